"""The shore CDC consumer (§12): shore business changes become one downlink command per node.

Reads the shore's own capture topics, drops what the platform wrote itself (proven by the
target's `_sync_applied` ledger), and commits queue offsets only after the results are stored.

Without sync rules, a change of a `[downlink].bidirectional_tables` table goes to every target
node (`TargetNodes`). Once any rule is offered, rules decide alone: a change goes to the nodes
each downlink rule targeting its table selects, in the rule's shape
(`tidesync.shore.downlink_rules`).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from eventsourcing.persistence import PersistenceError

from tidesync.apps.recorder import Statement
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord
from tidesync.cdc.kafka import (
    KafkaQueue,
    PartitionKey,
    QueueUnavailable,
)
from tidesync.cdc.outcomes import Block, Normalized, Skip
from tidesync.cdc.platform_writes import platform_event_id
from tidesync.domain.actor import system_actor
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.downlink_command import (
    CommandKind,
    DownlinkUnavailable,
    NewCommand,
    RowChangePayload,
)
from tidesync.domain.errors import Unavailable
from tidesync.migrations import MigrationError
from tidesync.shore.downlink import DownlinkService
from tidesync.shore.downlink_rules import DownlinkRoutes, DownlinkRules, row_change_payload
from tidesync.target.contract import TargetError

log = logging.getLogger(__name__)

SHORE_CDC_ACTOR = system_actor("shore-cdc")

_CONSUMER_LOCK = 0x73686F7265636463  # "shorecdc"
# The shore_cdc_event id of a released record the normalizer could not read (it has no event).
_RELEASED_NAMESPACE = uuid.UUID("6a1f3b0e-2c7d-5e49-8b15-d4c2e9a07f31")

class ShoreCdcResult(enum.StrEnum):
    """What became of one shore change (stored in shore_cdc_event)."""

    FORWARDED = "FORWARDED"    # commands for every target node committed with this row
    SUPPRESSED = "SUPPRESSED"  # written by the platform itself (proven): position only
    SKIPPED = "SKIPPED"        # not a change a ship can apply (reason_code says why)


class ShoreCdcReason(enum.StrEnum):
    ORIGIN_UNPROVEN = "ORIGIN_UNPROVEN"
    NOT_BIDIRECTIONAL = "NOT_BIDIRECTIONAL"
    SNAPSHOT_NOT_FORWARDED = "SNAPSHOT_NOT_FORWARDED"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    PARTITION_ERROR = "PARTITION_ERROR"
    OPERATOR_RELEASED = "OPERATOR_RELEASED"  # a held record an operator let pass
    # Under rules (`downlink_rules.DownlinkSkip`): no rule, no node, filtered, not changed,
    # or the rule's columns do not map back.
    NO_RULE = "NO_RULE"
    NO_NODE = "NO_NODE"
    ROW_FILTER = "ROW_FILTER"
    NO_SYNCED_CHANGE = "NO_SYNCED_CHANGE"
    RULE_SHAPE_FAILED = "RULE_SHAPE_FAILED"


class ShoreCdcUnavailable(Unavailable):
    """A batch could not be recorded (PostgreSQL, the target ledger or the broker is down);
    its partitions were rewound and it will be read again."""


# ----------------------------------------------------------------------------- decisions


class Releases(Protocol):
    """Which held positions an operator released (`shore_cdc_holds.ShoreCdcHolds`)."""

    def released(self, topic: str, partition: int, offset: int) -> bool: ...


class AppliedLedger(Protocol):
    """The shore target's record of event ids the platform applied (`_sync_applied`)."""

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]: ...


@dataclass(frozen=True)
class BlockedPartition:
    offset: int
    reason: str
    event_id: uuid.UUID | None = None


@dataclass
class _Batch:
    """What one poll decided, recorded in one transaction."""

    rows: list[Statement] = field(default_factory=list)
    commands: list[NewCommand] = field(default_factory=list)
    handled: dict[PartitionKey, int] = field(default_factory=dict)
    first: dict[PartitionKey, int] = field(default_factory=dict)
    blocks: dict[PartitionKey, BlockedPartition] = field(default_factory=dict)
    forwarded: int = 0
    suppressed: int = 0


_INSERT_RESULT = (
    "INSERT INTO shore_cdc_event (event_id, topic, kafka_partition, kafka_offset, result,"
    " reason_code, command_count) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (event_id) DO NOTHING"
)
# blocked_at is database time, shown to operators and used to order holds only.
_UPSERT_BLOCK = (
    "INSERT INTO shore_cdc_block (topic, kafka_partition, kafka_offset, reason_code, event_id)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (topic, kafka_partition) DO UPDATE SET"
    " kafka_offset = EXCLUDED.kafka_offset, reason_code = EXCLUDED.reason_code,"
    " event_id = EXCLUDED.event_id, blocked_at = now()"
)
_CLEAR_BLOCK = ("DELETE FROM shore_cdc_block WHERE topic = %s AND kafka_partition = %s"
                " AND kafka_offset <= %s")


class ShoreCdcConsumer:
    """Consumes the shore's capture topics in batches: one transaction per poll holds the
    batch's commands and results; queue offsets follow only after it commits."""

    def __init__(self, queue: KafkaQueue, normalizer: DebeziumNormalizer,
                 ledger: AppliedLedger, downlink: DownlinkService,
                 nodes: Callable[[], Sequence[str]], origin_node_id: str, *,
                 max_records: int = 500, poll_timeout: float = 0.2,
                 refresh_seconds: float = 5.0, releases: Releases | None = None,
                 rules: DownlinkRules | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.queue, self.normalizer, self.ledger = queue, normalizer, ledger
        self.releases, self.rules = releases, rules
        self.downlink, self.nodes, self.origin_node_id = downlink, nodes, origin_node_id
        self.max_records, self.poll_timeout = max_records, poll_timeout
        self.refresh_seconds, self.monotonic = refresh_seconds, monotonic
        self.assigned: set[PartitionKey] = set()
        self.blocked: dict[PartitionKey, BlockedPartition] = {}
        self._refreshed_at: float | None = None

    def refresh(self) -> list[PartitionKey]:
        """Assign partitions of new matching topics at the group's committed offsets, and
        read a held partition again once an operator released its record."""
        new = [key for key in self.queue.partitions() if key not in self.assigned]
        if new:
            self.queue.assign(self.queue.committed(new))
            self.assigned.update(new)
        self._resume_released()
        self._refreshed_at = self.monotonic()
        return new

    def _resume_released(self) -> None:
        if self.releases is None:
            return
        released = [key for key, held in self.blocked.items() if held.offset >= 0
                    and self.releases.released(key.topic, key.partition, held.offset)]
        if not released:
            return
        for key in released:
            log.info("shore CDC: %s/%d released at offset %d by an operator; reading on",
                     key.topic, key.partition, self.blocked.pop(key).offset)
        self.queue.unassign(released)
        self.queue.assign(self.queue.committed(released))
        self.queue.resume(released)  # held partitions were paused; the pause outlives assign

    def run_once(self) -> int:
        """Read, decide and record one batch; returns the number of records handled."""
        if self._refreshed_at is None or (
                self.monotonic() - self._refreshed_at >= self.refresh_seconds):
            self.refresh()
        polled = self.queue.poll(self.max_records, self.poll_timeout)
        records, errors = polled.records, polled.errors
        batch = _Batch()
        for key, name in errors.items():
            reason = (ShoreCdcReason.OFFSET_OUT_OF_RANGE if "OFFSET" in name
                      else ShoreCdcReason.PARTITION_ERROR)
            batch.blocks[key] = BlockedPartition(-1, reason)
        records = [r for r in records if PartitionKey(r.topic, r.partition) not in self.blocked]
        if not records and not batch.blocks:
            return 0
        try:
            self._decide(records, batch)
            self._record(batch)
        except (DownlinkUnavailable, TargetError) as error:
            self._rewind(batch)
            raise ShoreCdcUnavailable(type(error).__name__) from error
        self._hold(batch.blocks)
        if batch.handled:
            self.queue.commit({key: offset + 1 for key, offset in batch.handled.items()})
        if batch.forwarded or batch.suppressed:
            log.info("shore CDC: %d forwarded (%d commands), %d suppressed", batch.forwarded,
                     len(batch.commands), batch.suppressed)
        return len(records)

    def _decide(self, records: Sequence[KafkaRecord], batch: _Batch) -> None:
        for record in records:
            batch.first.setdefault(PartitionKey(record.topic, record.partition), record.offset)
        outcomes = [(record, self.normalizer.normalize(record)) for record in records]
        claimed = {x for _, o in outcomes if isinstance(o, Normalized)
                   and self._checked(o.event)
                   and isinstance(x := platform_event_id(o.event), uuid.UUID)}
        proven = self.ledger.applied_event_ids(sorted(claimed)) if claimed else set()
        nodes: Sequence[str] | None = None
        routes = self._routes()
        for record, outcome in outcomes:
            key = PartitionKey(record.topic, record.partition)
            if key in batch.blocks:
                continue  # Held at an earlier record of this batch.
            if isinstance(outcome, Block):
                if not self._passes(record, BlockedPartition(record.offset,
                                                             outcome.reason.value), batch):
                    continue
            elif isinstance(outcome, Normalized):
                if nodes is None and routes is None:
                    nodes = list(self.nodes())
                if not self._decide_event(record, outcome.event, proven, nodes or (), routes,
                                          batch):
                    continue
            else:
                assert isinstance(outcome, Skip)
            batch.handled[key] = record.offset

    def _checked(self, event: ChangeEvent) -> bool:
        return (event.database, event.table) in self.normalizer.settings.bidirectional_tables

    def _routes(self) -> DownlinkRoutes | None:
        """The offered downlink rules when any rule is offered (one view per batch)."""
        if self.rules is None:
            return None
        routes = self.rules.current()
        return routes if routes.rules_offered else None

    def _decide_event(self, record: KafkaRecord, event: ChangeEvent, proven: set[uuid.UUID],
                      nodes: Sequence[str], routes: DownlinkRoutes | None,
                      batch: _Batch) -> bool:
        """Record the event's result in the batch; False when it holds the partition.

        Under rules the loop check runs where it can (the table has sync metadata, listed in
        `bidirectional_tables`); a DOWNLINK-only rule's table needs none: ships never send
        it back."""
        result, reason = ShoreCdcResult.FORWARDED, ""
        checked = self._checked(event)
        if not checked and (routes is None or routes.two_way(event.database, event.table)):
            result, reason = ShoreCdcResult.SKIPPED, ShoreCdcReason.NOT_BIDIRECTIONAL.value
        elif event.operation is Operation.SNAPSHOT:
            result, reason = ShoreCdcResult.SKIPPED, ShoreCdcReason.SNAPSHOT_NOT_FORWARDED.value
        elif checked:
            claimed = platform_event_id(event)
            if claimed is not None and claimed not in proven:
                return self._passes(record, BlockedPartition(
                    record.offset, ShoreCdcReason.ORIGIN_UNPROVEN.value, event.event_id), batch)
            if claimed is not None:
                result = ShoreCdcResult.SUPPRESSED
        count = 0
        if result is ShoreCdcResult.FORWARDED:
            payloads: Mapping[str, RowChangePayload]
            if routes is None:
                payload = row_change_payload(event, self.origin_node_id)
                payloads = {node: payload for node in nodes}
            else:
                routed = routes.route(event, self.origin_node_id)
                payloads = routed.payloads
                if routed.skip is not None:
                    result, reason = ShoreCdcResult.SKIPPED, routed.skip.value
        if result is ShoreCdcResult.FORWARDED:
            batch.commands += [NewCommand(node, CommandKind.ROW_CHANGE, event.event_id,
                                          payload, actor=SHORE_CDC_ACTOR,
                                          reason="shore business change",
                                          trace_id=event.trace_id)
                               for node, payload in payloads.items()]
            count = len(payloads)
            batch.forwarded += 1
        elif result is ShoreCdcResult.SUPPRESSED:
            batch.suppressed += 1
        batch.rows.append((_INSERT_RESULT, (event.event_id, record.topic, record.partition,
                                            record.offset, result.value, reason, count)))
        return True

    def _passes(self, record: KafkaRecord, held: BlockedPartition, batch: _Batch) -> bool:
        """A record that holds its partition, unless an operator released its position:
        then it is recorded SKIPPED (OPERATOR_RELEASED) and the partition goes on."""
        if self.releases is None or not self.releases.released(record.topic, record.partition,
                                                               record.offset):
            batch.blocks[PartitionKey(record.topic, record.partition)] = held
            return False
        row_id = held.event_id or uuid.uuid5(_RELEASED_NAMESPACE, f"{record.topic}\x1f"
                                             f"{record.partition}\x1f{record.offset}")
        batch.rows.append((_INSERT_RESULT, (row_id, record.topic, record.partition,
                                            record.offset, ShoreCdcResult.SKIPPED.value,
                                            ShoreCdcReason.OPERATOR_RELEASED.value, 0)))
        return True

    def _record(self, batch: _Batch) -> None:
        statements = list(batch.rows)
        for key, offset in batch.handled.items():
            statements.append((_CLEAR_BLOCK, (key.topic, key.partition, offset)))
        for key, blocked in batch.blocks.items():
            statements.append((_UPSERT_BLOCK, (key.topic, key.partition, blocked.offset,
                                               blocked.reason, blocked.event_id)))
        if batch.commands or statements:
            self.downlink.issue(batch.commands, extra_statements=statements)

    def _rewind(self, batch: _Batch) -> None:
        """Read the batch's partitions again from where this batch started."""
        if batch.first:
            self.queue.unassign(batch.first)
            self.queue.assign(dict(batch.first))

    def _hold(self, blocks: Mapping[PartitionKey, BlockedPartition]) -> None:
        for key, blocked in blocks.items():
            log.error("shore CDC holds %s/%d at offset %d: %s", key.topic, key.partition,
                      blocked.offset, blocked.reason)
            self.blocked[key] = blocked
        if blocks:
            self.queue.pause(blocks)

    def close(self) -> None:
        self.queue.close()


# ----------------------------------------------------------------------------- running


class PostgresConsumerLock:
    """At most one shore CDC consumer at a time across worker processes: a session-level
    advisory lock, released by PostgreSQL when the holder's connection ends."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None

    def held(self) -> bool:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.conninfo, autocommit=True)
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)",
                                         (_CONSUMER_LOCK,)).fetchone()
                if not (row and row[0]):
                    self.release()
                    return False
                return True
            self._conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            self.release()
            return False

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class ShoreCdcRunner:
    """Runs the consumer while this process holds the lock; a new consumer after any loss,
    so a restart or takeover re-reads from the committed offsets."""

    open_consumer: Callable[[], ShoreCdcConsumer]
    lock: PostgresConsumerLock
    retry_seconds: float = 2.0
    consumer: ShoreCdcConsumer | None = None

    def run_once(self) -> int:
        if not self.lock.held():
            self._drop()
            return 0
        try:
            if self.consumer is None:
                self.consumer = self.open_consumer()
            return self.consumer.run_once()
        except (ShoreCdcUnavailable, QueueUnavailable, DownlinkUnavailable, TargetError,
                PersistenceError, psycopg.OperationalError, MigrationError) as error:
            log.warning("shore CDC paused: %s", error)
            self._drop()
            return 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                handled = self.run_once()
            except Exception:
                log.exception("shore CDC failed; retrying")
                self._drop()
                handled = 0
            if handled == 0:
                stop.wait(self.retry_seconds if self.consumer is None else 0.2)
        self.close()

    def _drop(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close()
            finally:
                self.consumer = None

    def close(self) -> None:
        self._drop()
        self.lock.release()


class TargetNodes:
    """The nodes a shore change goes to: `*` is every registered node not revoked (read
    again every `ttl` seconds, so a new ship gets changes from then on), else the listed ids."""

    def __init__(self, spec: Iterable[str], open_nodes: Callable[[], Any], ttl: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        names = [item.strip() for item in spec if item.strip()]
        self.listed = None if "*" in names else names
        self._open_nodes, self._ttl, self._monotonic = open_nodes, ttl, monotonic
        self._app: Any = None
        self._cached: tuple[float, list[str]] | None = None

    def __call__(self) -> list[str]:
        if self.listed is not None:
            return self.listed
        now = self._monotonic()
        if self._cached is None or now - self._cached[0] >= self._ttl:
            if self._app is None:
                self._app = self._open_nodes()
            active = [node_id for node_id in self._app.node_ids()
                      if not self._app.node(node_id).is_revoked]
            self._cached = (now, active)
        return self._cached[1]

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
            self._app = None


class ClosingConsumer(ShoreCdcConsumer):
    """A consumer that owns its ledger, downlink and node directory and closes them too."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            for part in (self.ledger, self.downlink, self.nodes, self.releases, self.rules):
                closer = getattr(part, "close", None)
                if closer is not None:
                    closer()
