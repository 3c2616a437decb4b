"""Claims received events for the apply processor: per source partition, in order, leased.

The ApplyJob streams are the record of what happened; these tables are the index a worker
queries to find work, updated in the same transaction as the job events they reflect.
The processor and the operator commands see only the `WorkQueue` protocol.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.jobs import HeldEvent, OpenEventCount, ReplayItem
from tidesync.apps.recorder import Statement
from tidesync.domain.apply_job import EventResult, FinalResult, apply_job_id, error_class_of
from tidesync.domain.change_event import ChangeEvent, Revision
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import NameTable, WireError, event_from_wire


@dataclass(frozen=True)
class SourcePartition:
    origin_node_id: str
    topic: str
    partition: int
    replay_epoch: int

    def params(self) -> tuple[str, str, int, int]:
        return (self.origin_node_id, self.topic, self.partition, self.replay_epoch)


@dataclass(frozen=True)
class ClaimedEvent:
    event_id: uuid.UUID
    batch_ref: uuid.UUID
    batch_index: int
    position: int
    sequence: int | None
    skip: bool = False
    """An operator skipped it: finalized REJECTED without being decoded or applied."""


@dataclass(frozen=True)
class Claim:
    """A partition leased to one worker, with the events it may apply, in source order."""

    partition: SourcePartition
    job_no: int
    job_id: uuid.UUID
    attempts: int
    next_sequence: int
    lease_expires_at: dt.datetime
    events: tuple[ClaimedEvent, ...]
    previous_job_id: uuid.UUID | None = None
    """A job whose lease expired before it finished: this claim takes its events over."""
    gap_detected_at: dt.datetime | None = None
    """When the partition's current sequence gap was first seen (injected clock), if any."""
    fk_wait_since: dt.datetime | None = None
    """When the partition began waiting for a foreign key to resolve (injected clock), if
    it is waiting."""
    owner: str = ""
    lease_token: int = 0
    """The fencing token of this lease: each claim of a partition takes the next one."""

    def fence(self) -> tuple[str, str, int, int, str, int]:
        """The partition, owner and token every statement on leased state checks."""
        return (*self.partition.params(), self.owner, self.lease_token)


class LeaseLost(TidesyncError):
    """Another worker holds the partition now (this worker's lease expired while it was
    paused or slow): nothing this claim would still write may land."""

    code = ErrorCode.APPLY_LEASE_LOST


@dataclass(frozen=True)
class UndecodableEvent:
    """A stored event that no longer decodes (it did at receive time): finalized REJECTED."""

    claimed: ClaimedEvent
    error: WireError


class StoredBatches:
    """Parsed batch bodies; decodes claimed events on demand (possibly off the main thread)."""

    def __init__(self, batches: dict[uuid.UUID, pb.UploadBatch]) -> None:
        self.batches = batches
        self.names = {ref: NameTable(batch.strings) for ref, batch in batches.items()}

    def decode(self, claimed: Sequence[ClaimedEvent]) -> list[ChangeEvent | UndecodableEvent]:
        out: list[ChangeEvent | UndecodableEvent] = []
        ref: uuid.UUID | None = None
        for item in claimed:
            if item.batch_ref != ref:  # claimed events run in long stretches of one batch
                ref = item.batch_ref
                batch = self.batches[ref]
                wire_events, names, version = batch.events, self.names[ref], batch.protocol_version
            try:
                out.append(event_from_wire(wire_events[item.batch_index], names,
                                           batch_version=version))
            except WireError as error:
                out.append(UndecodableEvent(item, error))
        return out



class WorkQueue(Protocol):
    """Where apply work is found, leased and finished. Methods ending in `_statements` build
    index updates that ride in the transaction of the job events they reflect (the
    `extra_statements` of a save, in the placeholder style of the event store's driver)."""

    def claim(self, worker: str, now: dt.datetime, lease_seconds: float,
              max_events: int) -> Claim | None:
        """Lease the least recently served partition that has open events, or None."""
        ...

    def renew(self, claim: Claim, lease_seconds: float) -> None:
        """Extend the lease while the job runs; raises `LeaseLost` if it is no longer ours."""
        ...

    def holds(self, claim: Claim) -> bool:
        """Whether the claim's owner and token still hold its partition."""
        ...

    def fence_statements(self, claim: Claim) -> list[Statement]:
        """Fail the transaction unless the claim still holds its partition (run it first)."""
        ...

    def load_batches(self, claim: Claim) -> StoredBatches:
        """The stored batch bodies the claimed events point into, parsed once."""
        ...

    def load_events(self, claim: Claim) -> list[ChangeEvent | UndecodableEvent]:
        """The claimed events decoded from their stored batch bodies, in claim order."""
        ...

    def finalize_statements(self, origin_node_id: str, job_id: uuid.UUID,
                            results: Sequence[FinalResult],
                            now: dt.datetime) -> list[Statement]: ...

    def retry_statements(self, claim: Claim, event_ids: Sequence[str], error_class: str,
                         not_before: dt.datetime, attempt: int,
                         resume_sequence: int | None) -> list[Statement]: ...

    def dead_statements(self, claim: Claim, event_ids: Sequence[str], error_class: str,
                        reason_code: str, attempt: int,
                        resume_sequence: int | None) -> list[Statement]: ...

    def fk_wait_statements(self, claim: Claim, event_ids: Sequence[str], now: dt.datetime,
                           not_before: dt.datetime, resume_sequence: int | None
                           ) -> list[Statement]: ...

    def unlease_statements(self, claim: Claim, *, attempts: int = 0,
                           next_sequence: int | None = None) -> list[Statement]: ...

    def gap_statements(self, claim: Claim, missing_sequence: int, now: dt.datetime,
                       recheck_at: dt.datetime, stalled_ids: Sequence[str] = ()
                       ) -> list[Statement]: ...

    def open_conflict_statements(self, rule_id: str, key_digest: str,
                                 conflict_id: uuid.UUID) -> list[Statement]:
        """Mark a new case as the active conflict of rule + key (fails if one is active)."""
        ...

    def replay_statements(self, items: Sequence[ReplayItem]) -> list[Statement]:
        """Send events back to PENDING and lift their partitions' retry wait."""
        ...

    def skip_statements(self, items: Sequence[ReplayItem]) -> list[Statement]:
        """Send events back to PENDING marked to be finalized as skipped."""
        ...

    def held_event(self, node: str, event_id: uuid.UUID) -> HeldEvent | None:
        """One event's state in the work index, if it was received."""
        ...

    def run(self, statements: Sequence[Statement]) -> None:
        """Run index updates that have no job events to ride with, in one transaction."""
        ...

    def active_conflict_id(self, rule_id: str, key_digest: str) -> uuid.UUID | None:
        """The active conflict of rule + key, if there is one."""
        ...

    def active_conflict(self, rule_id: str, key_digest: str,
                        candidate: uuid.UUID) -> tuple[uuid.UUID, bool]:
        """The active conflict of rule + key: the existing one, or `candidate` newly opened."""
        ...

    def decided_conflict_id(self, rule_id: str, key_digest: str,
                            revision: Revision) -> uuid.UUID | None:
        """The decided conflict that weighed `revision` of rule + key, if any."""
        ...

    def open_event_counts(self, node: str | None = None) -> list[OpenEventCount]:
        """Counts of events not applied, by node, state, result, error class and reason."""
        ...

    def replayable(self, error_class: str, node: str | None = None
                   ) -> dict[uuid.UUID, list[ReplayItem]]:
        """DEAD or REJECTED events of one error class, by the job that holds them."""
        ...

    def close(self) -> None: ...


class PostgresWorkQueue:
    """Claim, release and finish apply work in PostgreSQL (`inbox_event`, `apply_partition`)."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[TupleRow]]) -> None:
        self.pool = pool
        self._last_discovery: dt.datetime | None = None

    def close(self) -> None:
        self.pool.close()

    # -------------------------------------------------------------------- claiming

    def claim(self, worker: str, now: dt.datetime, lease_seconds: float,
              max_events: int) -> Claim | None:
        """Lease the least recently served partition that has open events, or None."""
        if self._discovery_due(now):
            self.discover_partitions()
        with self.pool.connection() as conn, conn.transaction():
            row = conn.execute(_CLAIMABLE_PARTITION, {"now": now}).fetchone()
            if row is None:
                return None
            partition = SourcePartition(*row[:4])
            job_no, attempts, next_sequence, previous_job_id, gap_detected_at = row[4:9]
            fk_wait_since = row[9]
            events = self._open_events(conn, partition, max_events)
            if not events:
                return None
            claim = self._lease(conn, partition, job_no, attempts, next_sequence, events,
                                worker, now, lease_seconds)
            return dataclasses.replace(claim, previous_job_id=previous_job_id,
                                       gap_detected_at=gap_detected_at,
                                       fk_wait_since=fk_wait_since)

    def _discovery_due(self, now: dt.datetime) -> bool:
        return _discovery_due(self, now)

    def discover_partitions(self) -> None:
        """Give every partition with pending events its apply_partition row."""
        with self.pool.connection() as conn:
            conn.execute(
                "INSERT INTO apply_partition"
                " (origin_node_id, source_topic, source_partition, replay_epoch)"
                " SELECT DISTINCT origin_node_id, source_topic, source_partition, replay_epoch"
                " FROM inbox_event WHERE state = 'PENDING' ON CONFLICT DO NOTHING"
            )

    def _open_events(self, conn: psycopg.Connection[TupleRow], partition: SourcePartition,
                     max_events: int) -> list[ClaimedEvent]:
        rows = conn.execute(
            "SELECT event_id, batch_ref, batch_index, source_position, source_sequence,"
            " skip_requested FROM inbox_event WHERE origin_node_id = %s AND source_topic = %s"
            " AND source_partition = %s AND replay_epoch = %s AND state = 'PENDING'"
            " ORDER BY source_position LIMIT %s",
            (*partition.params(), max_events),
        ).fetchall()
        return [ClaimedEvent(*row) for row in rows]

    def _lease(self, conn: psycopg.Connection[TupleRow], partition: SourcePartition, job_no: int,
               attempts: int, next_sequence: int, events: list[ClaimedEvent], worker: str,
               now: dt.datetime, lease_seconds: float) -> Claim:
        job_id = apply_job_id(*partition.params(), job_no)
        # Lease expiry is database time on both sides (set here, compared in the claim query
        # and the renewal), so every worker reads the same clock; the injected Clock never
        # meets it. A new token fences off whoever held the partition before.
        row = conn.execute(
            "UPDATE apply_partition SET next_job_no = next_job_no + 1, current_job_id = %s,"
            " lease_owner = %s, lease_token = lease_token + 1,"
            " lease_expires_at = clock_timestamp() + make_interval(secs => %s),"
            " last_claimed_at = %s WHERE origin_node_id = %s AND source_topic = %s"
            " AND source_partition = %s AND replay_epoch = %s"
            " RETURNING lease_token, lease_expires_at",
            (job_id, worker, lease_seconds, now, *partition.params()),
        ).fetchone()
        assert row is not None  # the row is locked FOR UPDATE by the claim query
        token, expires = row
        # Inbox rows stay PENDING while leased: the lease, not a row update, keeps other
        # workers off, which saves a write of every claimed row.
        return Claim(partition, job_no, job_id, attempts, next_sequence, expires, tuple(events),
                     owner=worker, lease_token=int(token))

    def renew(self, claim: Claim, lease_seconds: float) -> None:
        """Extend the lease while the job runs; raises `LeaseLost` if it is no longer ours."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "UPDATE apply_partition SET"
                " lease_expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE"
                " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
                " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s RETURNING 1",
                (lease_seconds, *claim.fence())).fetchone()
        if row is None:
            raise LeaseLost(f"apply job {claim.job_id} lost its lease")

    def holds(self, claim: Claim) -> bool:
        """Whether the claim's owner and token still hold its partition."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT 1 FROM apply_partition WHERE"
                " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
                " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s",
                claim.fence()).fetchone()
        return row is not None

    @staticmethod
    def fence_statements(claim: Claim) -> list[Statement]:
        """Fail the transaction unless the claim still holds its partition (run it first)."""
        return [("SELECT apply_lease_held(%s, %s, %s, %s, %s, %s)", claim.fence())]

    # -------------------------------------------------------------------- decoding

    def load_batches(self, claim: Claim) -> StoredBatches:
        """The stored batch bodies the claimed events point into, parsed once."""
        refs = sorted({e.batch_ref for e in claim.events})
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT batch_ref, body FROM inbox_batch WHERE batch_ref = ANY(%s)", (refs,)
            ).fetchall()
        return StoredBatches({ref: pb.UploadBatch.FromString(body) for ref, body in rows})

    def load_events(self, claim: Claim) -> list[ChangeEvent | UndecodableEvent]:
        """The claimed events decoded from their stored batch bodies, in claim order."""
        return self.load_batches(claim).decode(claim.events)

    # ------------------------------------------- statements run with the job's events

    @staticmethod
    def finalize_statements(origin_node_id: str, job_id: uuid.UUID,
                            results: Sequence[FinalResult],
                            now: dt.datetime) -> list[Statement]:
        if not results:
            return []
        return [(
            "UPDATE inbox_event AS i SET state = 'TERMINAL', result = u.result,"
            " reason_code = u.reason_code, conflict_id = u.conflict_id,"
            " result_revision = uuid_send(u.result_revision), terminal_at = %s, job_id = %s,"
            " error_class = u.error_class, skip_requested = false"
            # Ids and revisions travel as the text the results hold; the server parses them
            # (a job finalizes thousands of events, and parsing them here costs more).
            " FROM unnest(%b::text[]::uuid[], %b::text[], %b::text[], %b::text[]::uuid[],"
            " %b::text[]::uuid[], %b::text[]) AS u(event_id, result, reason_code,"
            " conflict_id, result_revision, error_class)"
            " WHERE i.origin_node_id = %s AND i.event_id = u.event_id",
            (now, job_id, [r.event_id for r in results],
             [r.result.value for r in results],
             [r.reason_code or None for r in results],
             [r.conflict_id or None for r in results],
             [r.result_revision or None for r in results],
             [error_class_of(r.reason_code).value if r.result is EventResult.REJECTED else None
              for r in results],
             origin_node_id),
        )]

    @staticmethod
    def retry_statements(claim: Claim, event_ids: Sequence[str], error_class: str,
                         not_before: dt.datetime, attempt: int,
                         resume_sequence: int | None) -> list[Statement]:
        """Hold the whole partition until `not_before`: later events may share a key."""
        return [("UPDATE inbox_event SET attempts = %s, error_class = %s"
                 " WHERE origin_node_id = %s AND event_id = ANY(%s::uuid[])",
                 (attempt, error_class, claim.partition.origin_node_id, list(event_ids))),
                ("UPDATE apply_partition SET not_before = %s, attempts = %s,"
                 " next_sequence = COALESCE(%s, next_sequence), current_job_id = NULL,"
                 " lease_owner = NULL, lease_expires_at = NULL WHERE"
                 " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
                 " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s",
                 (not_before, attempt, resume_sequence, *claim.fence()))]

    @staticmethod
    def fk_wait_statements(claim: Claim, event_ids: Sequence[str], now: dt.datetime,
                           not_before: dt.datetime, resume_sequence: int | None
                           ) -> list[Statement]:
        """Hold the partition until `not_before`, waiting for a foreign key to resolve: its
        waiting events show FK_WAITING, and the wait's start is kept (the deadline runs from
        it); no retry attempt is counted."""
        return [("UPDATE inbox_event SET reason_code = 'FK_WAITING'"
                 " WHERE origin_node_id = %s AND event_id = ANY(%s::uuid[]) AND state = 'PENDING'",
                 (claim.partition.origin_node_id, list(event_ids))),
                ("UPDATE apply_partition SET not_before = %s,"
                 " fk_wait_since = COALESCE(fk_wait_since, %s),"
                 " next_sequence = COALESCE(%s, next_sequence), current_job_id = NULL,"
                 " lease_owner = NULL, lease_expires_at = NULL WHERE"
                 " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
                 " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s",
                 (not_before, now, resume_sequence, *claim.fence()))]

    @staticmethod
    def dead_statements(claim: Claim, event_ids: Sequence[str], error_class: str,
                        reason_code: str, attempt: int,
                        resume_sequence: int | None) -> list[Statement]:
        """Retries exhausted: the events wait for an operator; their partition holds."""
        return [("UPDATE inbox_event SET state = 'DEAD', attempts = %s, job_id = %s,"
                 " error_class = %s, reason_code = %s"
                 " WHERE origin_node_id = %s AND event_id = ANY(%s::uuid[])",
                 (attempt, claim.job_id, error_class, reason_code,
                  claim.partition.origin_node_id, list(event_ids))),
                *PostgresWorkQueue.unlease_statements(claim, attempts=attempt,
                                                      next_sequence=resume_sequence)]

    @staticmethod
    def unlease_statements(claim: Claim, *, attempts: int = 0,
                           next_sequence: int | None = None) -> list[Statement]:
        return [(
            "UPDATE apply_partition SET lease_owner = NULL, lease_expires_at = NULL,"
            " current_job_id = NULL, not_before = NULL, attempts = %s,"
            " next_sequence = COALESCE(%s, next_sequence),"
            " gap_at_sequence = NULL, gap_detected_at = NULL, fk_wait_since = NULL WHERE"
            " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
            " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s",
            (attempts, next_sequence, *claim.fence()),
        )]

    @staticmethod
    def gap_statements(claim: Claim, missing_sequence: int, now: dt.datetime,
                       recheck_at: dt.datetime, stalled_ids: Sequence[str] = ()
                       ) -> list[Statement]:
        """Record a sequence gap and look again at `recheck_at` (the ship retransmits);
        `stalled_ids`, held past the gap deadline, show as GAP_STALLED until it closes."""
        stalled: list[Statement] = [(
            "UPDATE inbox_event SET reason_code = 'GAP_STALLED' WHERE origin_node_id = %s"
            " AND event_id = ANY(%s::uuid[]) AND state = 'PENDING'",
            (claim.partition.origin_node_id, list(stalled_ids)))] if stalled_ids else []
        return [*stalled, (
            "UPDATE apply_partition SET lease_owner = NULL, lease_expires_at = NULL,"
            " current_job_id = NULL, attempts = 0, next_sequence = %s, gap_at_sequence = %s,"
            " gap_detected_at = COALESCE(gap_detected_at, %s), not_before = %s,"
            " fk_wait_since = NULL WHERE"
            " origin_node_id = %s AND source_topic = %s AND source_partition = %s"
            " AND replay_epoch = %s AND lease_owner = %s AND lease_token = %s",
            (missing_sequence, missing_sequence, now, recheck_at, *claim.fence()),
        )]

    @staticmethod
    def open_conflict_statements(rule_id: str, key_digest: str,
                                 conflict_id: uuid.UUID) -> list[Statement]:
        return [("INSERT INTO active_conflict (rule_id, key_digest, conflict_id)"
                 " VALUES (%s, %s, %s)", (rule_id, key_digest, conflict_id))]

    @staticmethod
    def replay_statements(items: Sequence[ReplayItem], *, skip: bool = False
                          ) -> list[Statement]:
        statements: list[Statement] = []
        for origin, event_id, _ in items:
            statements.append((
                "UPDATE inbox_event SET state = 'PENDING', job_id = NULL, attempts = 0,"
                " result = NULL, reason_code = NULL, terminal_at = NULL, skip_requested = %s"
                " WHERE origin_node_id = %s AND event_id = %s", (skip, origin, event_id)))
        for partition in {p for _, _, p in items}:
            statements.append((
                "UPDATE apply_partition SET not_before = NULL, attempts = 0"
                " WHERE origin_node_id = %s AND source_topic = %s AND source_partition = %s"
                " AND replay_epoch = %s", partition))
        return statements

    @staticmethod
    def skip_statements(items: Sequence[ReplayItem]) -> list[Statement]:
        return PostgresWorkQueue.replay_statements(items, skip=True)

    def held_event(self, node: str, event_id: uuid.UUID) -> HeldEvent | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT job_id, state, result, error_class, source_topic, source_partition,"
                " replay_epoch FROM inbox_event WHERE origin_node_id = %s AND event_id = %s",
                (node, event_id)).fetchone()
        if row is None:
            return None
        job_id, state, result, error_class, topic, partition, epoch = row
        return HeldEvent(job_id, state, result, error_class,
                         (node, event_id, (node, topic, partition, epoch)))

    def run(self, statements: Sequence[Statement]) -> None:
        """Run index updates that have no job events to ride with, in one transaction."""
        with self.pool.connection() as conn, conn.transaction():
            for sql, params in statements:
                conn.execute(sql.encode(), params)

    def active_conflict_id(self, rule_id: str, key_digest: str) -> uuid.UUID | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT conflict_id FROM active_conflict WHERE rule_id = %s AND key_digest = %s",
                (rule_id, key_digest)).fetchone()
        return None if row is None else uuid.UUID(str(row[0]))

    def active_conflict(self, rule_id: str, key_digest: str,
                        candidate: uuid.UUID) -> tuple[uuid.UUID, bool]:
        """The active conflict of rule + key: the existing one, or `candidate` newly opened."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO active_conflict (rule_id, key_digest, conflict_id)"
                " VALUES (%s, %s, %s) ON CONFLICT (rule_id, key_digest) DO UPDATE"
                " SET rule_id = EXCLUDED.rule_id RETURNING conflict_id, (xmax = 0)",
                (rule_id, key_digest, candidate),
            ).fetchone()
        assert row is not None
        return row[0], bool(row[1])

    def decided_conflict_id(self, rule_id: str, key_digest: str,
                            revision: Revision) -> uuid.UUID | None:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT conflict_id FROM decided_revision WHERE rule_id = %s"
                " AND key_digest = %s AND revision = %s",
                (rule_id, key_digest, uuid.UUID(bytes=revision.value))).fetchone()
        return None if row is None else uuid.UUID(str(row[0]))

    # -------------------------------------------------------------------- operators

    def open_event_counts(self, node: str | None = None) -> list[OpenEventCount]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT origin_node_id, state, result, error_class, reason_code, count(*)"
                " FROM inbox_event WHERE (state <> 'TERMINAL' OR result <> 'APPLIED')"
                " AND (%(node)s::text IS NULL OR origin_node_id = %(node)s)"
                " GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
                {"node": node},
            ).fetchall()
        return [(row[0], row[1], row[2], row[3], row[4], int(row[5])) for row in rows]

    def replayable(self, error_class: str, node: str | None = None
                   ) -> dict[uuid.UUID, list[ReplayItem]]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT job_id, origin_node_id, event_id, source_topic, source_partition,"
                " replay_epoch FROM inbox_event"
                " WHERE error_class = %(class)s AND job_id IS NOT NULL"
                " AND (state = 'DEAD' OR (state = 'TERMINAL' AND result = 'REJECTED'"
                # An operator gave these up one by one: only `jobs replay --event` brings one
                # back, never a replay of a whole class.
                "   AND reason_code IS DISTINCT FROM 'SKIPPED_BY_OPERATOR'))"
                " AND (%(node)s::text IS NULL OR origin_node_id = %(node)s)",
                {"class": error_class, "node": node},
            ).fetchall()
        return _by_job(rows)




def _discovery_due(queue: PostgresWorkQueue, now: dt.datetime) -> bool:
    """Whether partitions with new pending events are looked for again (at most every 1 s)."""
    last = queue._last_discovery
    if last is None or now - last > dt.timedelta(seconds=1):
        queue._last_discovery = now
        return True
    return False


def _by_job(rows: Sequence[Sequence[object]]) -> dict[uuid.UUID, list[ReplayItem]]:
    by_job: dict[uuid.UUID, list[ReplayItem]] = {}
    for job_id, origin, event_id, topic, partition, epoch in rows:
        assert isinstance(job_id, uuid.UUID) and isinstance(event_id, uuid.UUID)
        assert isinstance(origin, str) and isinstance(topic, str)
        assert isinstance(partition, int) and isinstance(epoch, int)
        by_job.setdefault(job_id, []).append((origin, event_id, (origin, topic, partition, epoch)))
    return by_job




_CLAIMABLE_PARTITION = (
    "SELECT p.origin_node_id, p.source_topic, p.source_partition, p.replay_epoch,"
    " p.next_job_no, p.attempts, p.next_sequence, p.current_job_id, p.gap_detected_at,"
    " p.fk_wait_since"
    " FROM apply_partition p"
    # Database time on both sides (see `_lease`).
    " WHERE (p.lease_expires_at IS NULL OR p.lease_expires_at < clock_timestamp())"
    " AND (p.not_before IS NULL OR p.not_before <= %(now)s)"
    " AND NOT EXISTS (SELECT 1 FROM inbox_event d WHERE d.origin_node_id = p.origin_node_id"
    "   AND d.source_topic = p.source_topic AND d.source_partition = p.source_partition"
    "   AND d.replay_epoch = p.replay_epoch AND d.state = 'DEAD')"
    " AND EXISTS (SELECT 1 FROM inbox_event i WHERE i.origin_node_id = p.origin_node_id"
    "   AND i.source_topic = p.source_topic AND i.source_partition = p.source_partition"
    "   AND i.replay_epoch = p.replay_epoch AND i.state = 'PENDING')"
    " ORDER BY p.last_claimed_at NULLS FIRST LIMIT 1 FOR UPDATE OF p SKIP LOCKED"
)
