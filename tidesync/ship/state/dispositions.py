"""Operator dispositions of BLOCKED records in the ship state store (§7.6, §12).

A blocked record holds its partition's checkpoint and the later records of its queue key until
an operator decides: expire it (EXPIRED_APPROVED) or confirm a platform write's origin
(TERMINAL). Either releases the records of its key behind it and is kept in operator_action.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.ship_intake import PLATFORM_WRITE_RESULT, EventState, StateReason
from tidesync.ship.state.database import ShipStateDatabase
from tidesync.ship.state.watermarks import BlockedKeys, SQLiteWatermarks

_SELECT_BLOCKED = (
    "SELECT topic, kafka_partition, kafka_offset, replay_epoch, reason, coalesce(detail, ''),"
    " event_id, key_digest, rule_id FROM event_state WHERE state = 'BLOCKED' AND direction = ?"
)


class DispositionRefused(TidesyncError):
    """An operator's disposition of a blocked record that cannot be carried out as asked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


@dataclass(frozen=True, slots=True)
class BlockedRecord:
    """A BLOCKED row as an operator sees it: position, reason and ids, no business values."""

    topic: str
    partition: int
    offset: int
    replay_epoch: int
    reason: str
    detail: str
    event_id: uuid.UUID
    key_digest: bytes | None
    rule_id: str | None


@dataclass(frozen=True, slots=True)
class Disposed:
    """What an operator's disposition of a blocked record did."""

    record: BlockedRecord
    released: int        # records of its key that waited behind it and are READY now
    still_held_at: int | None  # a later blocked record of the key that still holds the rest


@dataclass(frozen=True, slots=True)
class _Disposal:
    """One kind of disposition: its operator_action name, who may have it, what it makes of
    the record (`reason` None keeps the blocked reason)."""

    action: str
    allowed: Callable[[BlockedRecord], None]
    state: EventState
    result: str
    reason: str | None = None


def _blocked_record(row: Sequence[Any]) -> BlockedRecord:
    return BlockedRecord(str(row[0]), int(row[1]), int(row[2]), int(row[3]), str(row[4]),
                         str(row[5]), uuid.UUID(bytes=row[6]), row[7], row[8])


class SQLiteDispositions:
    """Blocked records, the operator's dispositions of them, and the record of those."""

    def __init__(self, database: ShipStateDatabase, watermarks: SQLiteWatermarks,
                 blocked_keys: BlockedKeys) -> None:
        self.database = database
        self.watermarks = watermarks
        self.blocked_keys = blocked_keys

    def blocked_records(self, limit: int = 100) -> list[BlockedRecord]:
        """Blocked rows, oldest position first."""
        rows = self.database.conn.execute(
            _SELECT_BLOCKED + " ORDER BY topic, kafka_partition, kafka_offset LIMIT ?",
            (self.database.direction.value, limit)).fetchall()
        return [_blocked_record(row) for row in rows]

    def blocked_reasons(self) -> Counter[str]:
        rows = self.database.conn.execute(
            "SELECT reason, count(*) FROM event_state WHERE state = 'BLOCKED'"
            " AND direction = ? GROUP BY reason", (self.database.direction.value,)).fetchall()
        return Counter({str(row[0]): int(row[1]) for row in rows})

    def expire_blocked(self, topic: str, partition: int, offset: int, *, actor: str,
                       reason: str, two_way_rules: frozenset[str] = frozenset()) -> Disposed:
        """Approve that the blocked record at this position is never delivered (§7.6:
        EXPIRED_APPROVED, which the checkpoint passes), recorded in operator_action.

        Only a one-way rule's record may expire (§7), or one the normalizer could not read (no
        rule governs it): a two-way rule's record is refused (TWO_WAY_RULE), and a platform
        write of unproven origin is `confirm_origin`'s (USE_CONFIRM_ORIGIN)."""

        def allowed(record: BlockedRecord) -> None:
            if record.reason == StateReason.ORIGIN_UNPROVEN:
                raise DispositionRefused(
                    "USE_CONFIRM_ORIGIN", "a platform write of unproven origin is not expired;"
                                          " confirm its origin if it is the shore's write")
            if record.rule_id is not None and record.rule_id in two_way_rules:
                raise DispositionRefused(
                    "TWO_WAY_RULE", f"{record.rule_id} syncs both ways: its records may not"
                                    " expire (only a one-way rule's may)")

        return self._dispose(topic, partition, offset, actor, reason, _Disposal(
            "EXPIRE_BLOCKED", allowed, EventState.EXPIRED_APPROVED, "EXPIRED_APPROVED"))

    def confirm_origin(self, topic: str, partition: int, offset: int, *, actor: str,
                       reason: str) -> Disposed:
        """An operator confirms that an ORIGIN_UNPROVEN record is the shore's write (the
        applied_command proof was lost, say with a restored state file): it becomes TERMINAL
        PLATFORM_WRITE as a proven one would, and is never uploaded."""

        def allowed(record: BlockedRecord) -> None:
            if record.reason != StateReason.ORIGIN_UNPROVEN:
                raise DispositionRefused("NOT_ORIGIN_UNPROVEN",
                                         f"the record is blocked for {record.reason}, not for"
                                         " an unproven origin")

        return self._dispose(topic, partition, offset, actor, reason, _Disposal(
            "CONFIRM_ORIGIN", allowed, EventState.TERMINAL, PLATFORM_WRITE_RESULT,
            StateReason.OPERATOR_CONFIRMED.value))

    def _dispose(self, topic: str, partition: int, offset: int, actor: str, reason: str,
                 disposal: _Disposal) -> Disposed:
        """Move the blocked record at this position out of BLOCKED, let the records of its
        queue key that waited behind it go on, and record who and why.

        Those records become READY and are uploaded after the next `ship run` re-reads them.
        Their places in the partition's source sequence went to later records meanwhile, so
        they go without one; the shore orders them by queue position (it gap-checks sequenced
        events only). A later blocked record of the same key keeps holding those after it. A
        record that only waits (BEHIND_BLOCKED_RECORD) is not disposed of itself: the one it
        waits behind is."""
        if not actor.strip() or not reason.strip():
            raise DispositionRefused("REASON_REQUIRED", "an actor and a reason are required")
        direction = self.database.direction.value
        with self.database.transaction() as conn:
            row = conn.execute(
                _SELECT_BLOCKED + " AND topic = ? AND kafka_partition = ? AND kafka_offset = ?"
                " ORDER BY replay_epoch DESC LIMIT 1",
                (direction, topic, partition, offset)).fetchone()
            if row is None:
                raise DispositionRefused(
                    "NOT_BLOCKED", f"no blocked record at {topic}/{partition}@{offset}")
            record = _blocked_record(row)
            where = (direction, topic, partition, record.replay_epoch)
            if record.reason == StateReason.BEHIND_BLOCKED_RECORD:
                raise self._waits_behind(conn, where, record)
            disposal.allowed(record)
            now = self.database.now_text()
            conn.execute("UPDATE event_state SET state = ?, result = ?,"
                         " reason = coalesce(?, reason), updated_at = ? WHERE event_id = ?",
                         (disposal.state.value, disposal.result, disposal.reason, now,
                          record.event_id.bytes))
            released, still_held_at = 0, None
            if record.key_digest is not None:
                released, still_held_at = self._release_followers(conn, where, record, now)
            conn.execute(
                "INSERT INTO operator_action (action, event_id, direction, topic,"
                " kafka_partition, kafka_offset, replay_epoch, blocked_reason, released, actor,"
                " reason, acted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (disposal.action, record.event_id.bytes, direction, topic, partition, offset,
                 record.replay_epoch, record.reason, released, actor[:200], reason[:1000],
                 now))
            key = PartitionKey(topic, partition)
            self.watermarks.recompute(conn, key, record.replay_epoch)
            self.blocked_keys.reload_if_cached(conn, key, record.replay_epoch)
        return Disposed(record, released, still_held_at)

    def _waits_behind(self, conn: sqlite3.Connection, where: tuple[object, ...],
                      record: BlockedRecord) -> DispositionRefused:
        holder = conn.execute(
            "SELECT max(kafka_offset) FROM event_state WHERE direction = ?"
            " AND topic = ? AND kafka_partition = ? AND replay_epoch = ?"
            " AND state = 'BLOCKED' AND key_digest = ? AND kafka_offset < ?"
            " AND reason != ?",
            (*where, record.key_digest, record.offset,
             StateReason.BEHIND_BLOCKED_RECORD.value)).fetchone()[0]
        return DispositionRefused(
            "WAITS_BEHIND", f"this record waits behind the blocked record at offset "
                            f"{holder}; dispose of that one and this one is uploaded")

    def _release_followers(self, conn: sqlite3.Connection, where: tuple[object, ...],
                           record: BlockedRecord, now: str) -> tuple[int, int | None]:
        next_holder = conn.execute(
            "SELECT min(kafka_offset) FROM event_state WHERE direction = ? AND topic = ?"
            " AND kafka_partition = ? AND replay_epoch = ? AND state = 'BLOCKED'"
            " AND key_digest = ? AND kafka_offset > ? AND reason != ?",
            (*where, record.key_digest, record.offset,
             StateReason.BEHIND_BLOCKED_RECORD.value)).fetchone()[0]
        released = conn.execute(
            "UPDATE event_state SET state = 'READY', reason = NULL, detail = NULL,"
            " source_sequence = NULL, updated_at = ? WHERE direction = ? AND topic = ?"
            " AND kafka_partition = ? AND replay_epoch = ? AND state = 'BLOCKED'"
            " AND key_digest = ? AND reason = ? AND kafka_offset > ?"
            " AND (? IS NULL OR kafka_offset < ?)",
            (now, *where, record.key_digest, StateReason.BEHIND_BLOCKED_RECORD.value,
             record.offset, next_holder, next_holder)).rowcount
        return released, next_holder

    def operator_actions(self, limit: int = 100) -> list[dict[str, object]]:
        """The latest operator actions on this ship's records, newest first."""
        rows = self.database.conn.execute(
            "SELECT action_id, action, event_id, topic, kafka_partition, kafka_offset,"
            " replay_epoch, blocked_reason, released, actor, reason, acted_at"
            " FROM operator_action WHERE direction = ? ORDER BY action_id DESC LIMIT ?",
            (self.database.direction.value, limit)).fetchall()
        names = ("action_id", "action", "event_id", "topic", "partition", "offset",
                 "replay_epoch", "blocked_reason", "released", "actor", "reason", "acted_at")
        return [{**dict(zip(names, row, strict=True)), "event_id": str(uuid.UUID(bytes=row[2]))}
                for row in rows]
