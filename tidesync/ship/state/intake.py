"""Recording a poll's queue records in the ship state store (§7.5, §7.6, §12).

Looks up what the store knows (rows at re-read positions, captures recorded before, platform
writes this ship applied), lets `tidesync.domain.ship_intake` decide, and stores the decisions
and the partition's new watermark in one transaction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidesync.cdc.kafka import PartitionKey
from tidesync.cdc.outcomes import Block, Normalized, Outcome
from tidesync.cdc.platform_writes import platform_event_id
from tidesync.domain.change_event import ChangeEvent, Operation, table_rule
from tidesync.domain.ship_intake import (
    EventState,
    IntakeContext,
    ReadRecord,
    RecordKind,
    RereadAction,
    StateReason,
    StoredRecord,
    Tally,
    decide_fresh,
    decide_reread,
    read_event,
    record_id,
)
from tidesync.ship.state.database import ShipStateDatabase, look_up
from tidesync.ship.state.watermarks import BlockedKeys, SQLiteWatermarks

_INSERT_EVENT = (
    "INSERT INTO event_state (event_id, direction, topic, kafka_partition, kafka_offset,"
    " replay_epoch, rule_id, state, result, reason, detail, source_sequence, bytes, key_digest,"
    " capture_id, duplicate_of, captured_at, business_at, updated_at, capture_pos)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Captures recorded with their binlog place, probed along (capture_pos, capture_id) — a VALUES
# list joined to the index, one probe per pair — and those recorded before it existed.
_KNOWN_AT = (
    "SELECT t.capture_id, t.event_id FROM ({values}) AS v JOIN event_state AS t"
    " ON t.capture_pos = v.column1 AND t.capture_id = v.column2 WHERE t.capture_pos IS NOT NULL"
)
_KNOWN_LEGACY = ("SELECT capture_id, event_id FROM event_state WHERE capture_id IS NOT NULL"
                 " AND capture_pos IS NULL AND capture_id IN")
_PAIRS_PER_PROBE = 400  # two parameters each: under SQLite's oldest limit of 999
_CAPTURE_FIELDS = ("gtid", "server_id", "binlog_file", "binlog_position", "binlog_row",
                   "snapshot")


@dataclass(frozen=True, slots=True)
class Consumed:
    """One record read from the queue, with what the normalizer made of it."""

    topic: str
    partition: int
    offset: int
    outcome: Outcome
    size: int
    key_digest: bytes | None
    # Set when the change was written by the platform (a remote apply): the id in its
    # _sync_event_id (b"" when that is not a readable id). See `platform_write_id`.
    platform_id: bytes | None = None


@dataclass
class Recorded:
    """What recording a poll's records decided."""

    sendable: list[ChangeEvent] = field(default_factory=list)
    sizes: dict[uuid.UUID, int] = field(default_factory=dict)
    awaiting_receipt: int = 0
    new_events: int = 0
    rereads: int = 0
    skipped: int = 0
    blocked: int = 0
    duplicates: int = 0

    def count(self, tally: Tally) -> None:
        if tally is Tally.NEW_EVENT:
            self.new_events += 1
        elif tally is Tally.SKIPPED:
            self.skipped += 1
        elif tally is Tally.BLOCKED:
            self.blocked += 1
        else:
            self.duplicates += 1

    def send(self, event: ChangeEvent, source_sequence: int | None, size: int) -> None:
        self.sendable.append(event.with_source_sequence(source_sequence))
        self.sizes[event.event_id] = size


# ----------------------------------------------------------------------------- ids


def queue_key_digest(key: bytes | None) -> bytes | None:
    """A 16-byte digest of a queue record key: one business key, without its values."""
    return None if key is None else hashlib.sha256(key).digest()[:16]


def capture_id(event: ChangeEvent, record_key: bytes | None) -> bytes | None:
    """A digest of where the capture read the change (binlog coordinates and row, table, queue
    key, operation), so that a record the capture emitted again after a crash is recognised;
    None when unknown. A new replay epoch sends everything again on purpose, so the epoch is
    part of it."""
    details = event.source_details
    get = details.get
    file, position = get("binlog_file"), get("binlog_position")
    if file is None or position is None:
        return None
    # The fields of _CAPTURE_FIELDS in its order, written out: this runs for every event.
    record = event.record
    text = (f"{get('gtid')!r}\x1f{get('server_id')!r}\x1f{file!r}\x1f{position!r}\x1f"
            f"{get('binlog_row')!r}\x1f{get('snapshot')!r}\x1f{record.database!r}\x1f"
            f"{record.table!r}\x1f{record_key!r}\x1f{_OPERATION_TEXT[event.operation]}\x1f"
            f"{event.replay_epoch}")
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


_OPERATION_TEXT = {operation: operation.value for operation in Operation}
_FILE_NUMBER_DIGITS = 6  # mysql-bin.000042: numbers below 2^20, so the place fits 64 bits


def capture_position(event: ChangeEvent) -> int | None:
    """Where the capture read the change, in binlog order: the binlog file's number × 2^40 +
    the position (None without a numbered file and a position below 2^40). Rows are indexed
    by it before their capture id, so new ones are appended to that index."""
    details = event.source_details
    file, position = details.get("binlog_file"), details.get("binlog_position")
    if type(file) is not str or type(position) is not int or not 0 <= position < 1 << 40:
        return None
    number = file.rpartition(".")[2]
    if not (number.isdigit() and number.isascii()) or len(number) > _FILE_NUMBER_DIGITS:
        return None
    return int(number) << 40 | position


def platform_write_id(event: ChangeEvent) -> bytes | None:
    """The 16-byte id of the platform write this change is (see
    `tidesync.cdc.platform_writes`), or None for a local business write; b"" when its
    `_sync_event_id` is not a readable id (it can then never be proven). A delete whose id
    cannot be read cannot carry the tombstone mark of that id, so it is a local delete."""
    found = platform_event_id(event)
    if isinstance(found, uuid.UUID):
        return found.bytes
    return None if found is None or event.operation is Operation.DELETE else b""


def rule_of(event: ChangeEvent) -> str:
    """The rule an event belongs to; without a rule runtime each table is its own rule."""
    return event.rule_id or table_rule(event.database, event.table)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_STATE_TEXT = {state: state.value for state in EventState}


# ----------------------------------------------------------------------------- the store


class SQLiteIntake:
    """Records queue records: new ones get the next source sequence of their partition;
    records read before (after a restart) find their row by position and keep its sequence
    and state."""

    def __init__(self, database: ShipStateDatabase, watermarks: SQLiteWatermarks,
                 blocked_keys: BlockedKeys) -> None:
        self.database = database
        self.watermarks = watermarks
        self.blocked_keys = blocked_keys

    def record(self, items: Sequence[Consumed], replay_epoch: int) -> Recorded:
        """Record a poll's records in one transaction (per partition in offset order)."""
        recorded = Recorded()
        by_partition: dict[PartitionKey, list[Consumed]] = {}
        for item in items:
            by_partition.setdefault(PartitionKey(item.topic, item.partition), []).append(item)
        with self.database.transaction() as conn:
            for key, records in by_partition.items():
                self._record_partition(conn, key, records, replay_epoch, recorded)
        return recorded

    def _record_partition(self, conn: sqlite3.Connection, key: PartitionKey,
                          records: list[Consumed], replay_epoch: int,
                          recorded: Recorded) -> None:
        watermark = self.watermarks.watermark_in(conn, key)
        if watermark is None:
            watermark = self.watermarks.create(conn, key, replay_epoch, records[0].offset)
        read_offset = watermark.read_offset
        reread = [r for r in records if r.offset <= read_offset]
        existing = self._rows_at(conn, key, replay_epoch, reread) if reread else {}
        fresh = [r for r in records if r.offset > read_offset]
        for item in reread:
            self._reread(conn, item, existing.get(item.offset), replay_epoch, recorded)
        next_sequence = self._record_fresh(conn, key, fresh, watermark.next_source_sequence,
                                           replay_epoch, recorded)
        read_offset = max([read_offset, *(item.offset for item in fresh)])
        self.watermarks.advance(conn, watermark, read_offset, next_sequence)

    def _record_fresh(self, conn: sqlite3.Connection, key: PartitionKey, fresh: list[Consumed],
                      next_sequence: int, replay_epoch: int, recorded: Recorded) -> int:
        """Decide and store records read for the first time; returns the next sequence."""
        read = [self._read_record(item, replay_epoch) for item in fresh]
        places = [capture_position(item.outcome.event) if record.capture_id is not None
                  and isinstance(item.outcome, Normalized) else None
                  for item, record in zip(fresh, read, strict=True)]
        blocked_keys = self.blocked_keys.of(key)
        context = IntakeContext(
            next_sequence, frozenset(blocked_keys),
            self._known_captures(conn, [(r.capture_id, place) for r, place
                                        in zip(read, places, strict=True)]),
            self._proven_platform_writes(conn, (r.platform_id for r in read)))
        now = self.database.now_text()
        decided = decide_fresh(read, context)
        blocked_keys.update(decided.context.blocked_keys)
        # The columns shared by every row of the run are looked up once, not per row.
        direction = self.database.direction.value
        sendable, sizes = recorded.sendable, recorded.sizes
        rows = []
        for item, record, place, decision in zip(fresh, read, places, decided.decisions,
                                                 strict=True):
            tally = decision.tally
            if tally is Tally.NEW_EVENT:
                recorded.new_events += 1
            else:
                recorded.count(tally)
            state = decision.state
            if state is None:
                continue
            outcome = item.outcome
            if isinstance(outcome, Normalized):
                event = outcome.event
                if state is EventState.READY:  # decision.sendable
                    sendable.append(event.with_source_sequence(decision.source_sequence))
                    sizes[event.event_id] = item.size
                business = event.business_occurred_at
                rule: str | None = rule_of(event)
                captured_micros: int | None = (event.captured_at - _EPOCH) // _MICROSECOND
                business_micros = (None if business is None
                                   else (business - _EPOCH) // _MICROSECOND)
            else:
                rule = captured_micros = business_micros = None
            assert record.row_id is not None
            rows.append((record.row_id.bytes, direction, item.topic, item.partition,
                         item.offset, replay_epoch, rule, _STATE_TEXT[state], decision.result,
                         decision.reason, decision.detail, decision.source_sequence,
                         item.size, item.key_digest, decision.capture_id,
                         decision.duplicate_of, captured_micros, business_micros, now,
                         None if decision.capture_id is None else place))
        conn.executemany(_INSERT_EVENT, rows)
        return decided.context.next_sequence

    def _read_record(self, item: Consumed, replay_epoch: int) -> ReadRecord:
        """The record as the intake policy sees it."""
        outcome = item.outcome
        if isinstance(outcome, Block):
            row_id = record_id(self.database.origin_node_id, replay_epoch, item.topic,
                               item.partition, item.offset)
            return ReadRecord(item.offset, RecordKind.BLOCK, row_id, item.key_digest,
                              block_reason=outcome.reason.value, block_detail=outcome.detail)
        if isinstance(outcome, Normalized):
            return read_event(item.offset, outcome.event.event_id, item.key_digest,
                              capture_id(outcome.event, item.key_digest), item.platform_id)
        return ReadRecord(item.offset, RecordKind.SKIP, key_digest=item.key_digest)

    def _rows_at(self, conn: sqlite3.Connection, key: PartitionKey, replay_epoch: int,
                 items: list[Consumed]) -> dict[int, StoredRecord]:
        rows = conn.execute(
            "SELECT kafka_offset, event_id, state, source_sequence FROM event_state"
            " WHERE topic = ? AND kafka_partition = ? AND kafka_offset BETWEEN ? AND ?"
            " AND replay_epoch = ? AND direction = ?",
            (key.topic, key.partition, items[0].offset, items[-1].offset, replay_epoch,
             self.database.direction.value)).fetchall()
        return {row[0]: StoredRecord(row[1], EventState(row[2]), row[3]) for row in rows}

    def _reread(self, conn: sqlite3.Connection, item: Consumed, stored: StoredRecord | None,
                replay_epoch: int, recorded: Recorded) -> None:
        """A record read again after a restart: its row decides, never a second sequence."""
        recorded.rereads += 1
        action = decide_reread(self._read_record(item, replay_epoch), stored)
        if action is RereadAction.SKIP:
            recorded.skipped += 1
        elif action is RereadAction.BLOCK_NEW:
            self._insert_mismatch(conn, item, replay_epoch)
            recorded.blocked += 1
        elif action is RereadAction.BLOCK_STORED and stored is not None:
            conn.execute("UPDATE event_state SET state = 'BLOCKED', reason = ?, detail = ?"
                         " WHERE event_id = ?",
                         (StateReason.REREAD_MISMATCH.value,
                          "the record reads differently than when it was first recorded",
                          stored.row_id))
            recorded.blocked += 1
        elif (action is RereadAction.SEND and stored is not None
              and isinstance(item.outcome, Normalized)):
            recorded.send(item.outcome.event, stored.source_sequence, item.size)
        elif action is RereadAction.AWAIT_RECEIPT:
            recorded.awaiting_receipt += 1

    def _insert_mismatch(self, conn: sqlite3.Connection, item: Consumed,
                         replay_epoch: int) -> None:
        """It was skipped before and is not now: its place in the sequence is gone."""
        row_id = record_id(self.database.origin_node_id, replay_epoch, item.topic,
                           item.partition, item.offset)
        conn.execute(
            "INSERT OR IGNORE INTO event_state (event_id, direction, topic, kafka_partition,"
            " kafka_offset, replay_epoch, state, reason, detail, bytes, key_digest, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'BLOCKED', ?, ?, ?, ?, ?)",
            (row_id.bytes, self.database.direction.value, item.topic, item.partition,
             item.offset, replay_epoch, StateReason.REREAD_MISMATCH.value,
             "a record skipped when first read is an event or a block now", item.size,
             item.key_digest, self.database.now_text()))

    def _known_captures(self, conn: sqlite3.Connection,
                        wanted: Sequence[tuple[bytes | None, int | None]]
                        ) -> dict[bytes, bytes]:
        """capture id → event id of the rows that already hold these capture coordinates
        (`wanted`: capture id and binlog place of each record). Rows recorded before places
        were kept are found by capture id alone."""
        rows = look_up(conn, _KNOWN_LEGACY, (capture for capture, _ in wanted))
        pairs = sorted({(place, capture) for capture, place in wanted
                        if capture is not None and place is not None})
        for start in range(0, len(pairs), _PAIRS_PER_PROBE):
            chunk = pairs[start:start + _PAIRS_PER_PROBE]
            values = "VALUES " + ",".join(["(?, ?)"] * len(chunk))
            rows += conn.execute(_KNOWN_AT.format(values=values),
                                 [part for pair in chunk for part in pair]).fetchall()
        return {row[0]: row[1] for row in rows}

    def _proven_platform_writes(self, conn: sqlite3.Connection,
                                wanted: Iterable[bytes | None]) -> frozenset[bytes]:
        """The platform write ids this ship applied (applied_command proves them ours)."""
        rows = look_up(conn, "SELECT applied_id FROM applied_command WHERE applied_id IN",
                       wanted)
        return frozenset(row[0] for row in rows)
