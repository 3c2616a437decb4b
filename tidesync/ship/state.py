"""The ship's state store (§7.5, §7.6): SQLite indexes over the CDC queue, never its payloads.

Records the decision for every queue record, assigns source sequences, and keeps the read,
received and terminal watermarks from which the queue commit (terminal + 1) follows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import hashlib
import re
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tidesync.cdc.debezium import Block, Normalized, Outcome
from tidesync.cdc.kafka import PartitionKey
from tidesync.cdc.platform_writes import platform_event_id
from tidesync.domain.change_event import ChangeEvent, Operation, table_rule
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import TidesyncError

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations" / "ship"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
RECORD_ID_NAMESPACE = uuid.UUID("2f6c1a8e-7d4b-5e93-b1c0-4a8e6d2f9b17")
RECEIPTS_CURSOR = "receipts"
COMMANDS_CURSOR = "commands"
COMMANDS_PAGE_END = "commands_page_end"
DUPLICATE_RESULT = "DUPLICATE"
PLATFORM_WRITE_RESULT = "PLATFORM_WRITE"
EVENT_ID_COLUMN = "_sync_event_id"
REVISION_COLUMN = "_sync_revision"




class Direction(enum.StrEnum):
    UPLINK = "UPLINK"
    DOWNLINK = "DOWNLINK"


class EventState(enum.StrEnum):
    """Queue consumption states of §7.6."""

    CONSUMED = "CONSUMED"
    READY = "READY"
    IN_FLIGHT = "IN_FLIGHT"
    RECEIVED = "RECEIVED"
    RETRY_WAIT = "RETRY_WAIT"
    TERMINAL = "TERMINAL"
    EXPIRED_APPROVED = "EXPIRED_APPROVED"
    BLOCKED = "BLOCKED"


SENDABLE = frozenset({EventState.CONSUMED, EventState.READY, EventState.IN_FLIGHT,
                      EventState.RETRY_WAIT})
"""States whose event still has to reach the shore (after a restart: send it again)."""
DONE = frozenset({EventState.TERMINAL, EventState.EXPIRED_APPROVED})
"""The only states the terminal watermark passes (§7.6)."""


class StateReason(enum.StrEnum):
    """Reasons the state store itself gives a record."""

    CAPTURE_REEMITTED = "CAPTURE_REEMITTED"
    BEHIND_BLOCKED_RECORD = "BEHIND_BLOCKED_RECORD"
    REREAD_MISMATCH = "REREAD_MISMATCH"
    REMOTE_APPLY = "REMOTE_APPLY"
    ORIGIN_UNPROVEN = "ORIGIN_UNPROVEN"
    OPERATOR_CONFIRMED = "OPERATOR_CONFIRMED"  # an operator proved a platform write's origin


class CommandState(enum.StrEnum):
    APPLYING = "APPLYING"
    DONE = "DONE"


class StateStoreError(TidesyncError):
    """The state store cannot be read or written (disk, corruption, schema)."""


class DispositionRefused(TidesyncError):
    """An operator's disposition of a blocked record that cannot be carried out as asked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ReceiveOutcome(enum.StrEnum):
    RECEIVED = "RECEIVED"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_REJECTED = "PERMANENT_REJECTED"


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Watermark:
    """One partition's offsets (inclusive, -1 for none) and its next source sequence."""

    topic: str
    partition: int
    replay_epoch: int
    base_offset: int
    read_offset: int
    received_offset: int
    terminal_offset: int
    committed_offset: int | None
    end_offset: int | None
    next_source_sequence: int

    @property
    def key(self) -> PartitionKey:
        return PartitionKey(self.topic, self.partition)

    @property
    def commit_offset(self) -> int:
        """The next offset to read after a restart: contiguous terminal + 1 (§7.6)."""
        return self.terminal_offset + 1

    @property
    def commit_due(self) -> bool:
        """The checkpoint moved past what the queue holds as committed."""
        floor = self.base_offset + 1 if self.committed_offset is None else self.committed_offset
        return self.commit_offset > floor

    @property
    def open_records(self) -> int:
        """Records read but not yet terminal (an upper bound: skipped ones count too)."""
        return self.read_offset - self.terminal_offset


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


@dataclass(frozen=True, slots=True)
class ReceiveAnswer:
    """The shore's answer for one uploaded event (`result` set when it is already terminal)."""

    event_id: uuid.UUID
    outcome: ReceiveOutcome
    reason: str = ""
    detail: str = ""
    result: str | None = None


@dataclass(frozen=True, slots=True)
class TerminalResult:
    """A terminal event result from a receipt."""

    event_id: uuid.UUID
    result: str
    reason: str = ""


@dataclass
class Progress:
    """Events whose state moved: which left the send window and how many bytes became final."""

    terminal: set[uuid.UUID] = field(default_factory=set)
    received: set[uuid.UUID] = field(default_factory=set)
    retry: set[uuid.UUID] = field(default_factory=set)
    blocked: set[uuid.UUID] = field(default_factory=set)
    terminal_bytes: int = 0
    unknown: int = 0


@dataclass(frozen=True, slots=True)
class Health:
    subsystem: str
    state: str
    reason_code: str
    detail: str
    since: dt.datetime


@dataclass(frozen=True, slots=True)
class PartitionBacklog:
    """Open (not terminal) events of a partition: count, bytes, oldest capture time (µs)."""

    key: PartitionKey
    events: int
    bytes: int
    oldest_captured_micros: int | None
    rule_id: str | None


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


def _blocked_record(row: Sequence[Any]) -> BlockedRecord:
    return BlockedRecord(str(row[0]), int(row[1]), int(row[2]), int(row[3]), str(row[4]),
                         str(row[5]), uuid.UUID(bytes=row[6]), row[7], row[8])


# ----------------------------------------------------------------------------- ids


def record_id(origin_node_id: str, replay_epoch: int, topic: str, partition: int,
              offset: int) -> uuid.UUID:
    """The row id of a record that has no event id (blocked before normalization)."""
    parts = [origin_node_id, str(replay_epoch), topic, str(partition), str(offset)]
    return uuid.uuid5(RECORD_ID_NAMESPACE, "".join(f"{len(p)}:{p};" for p in parts))


def queue_key_digest(key: bytes | None) -> bytes | None:
    """A 16-byte digest of a queue record key: one business key, without its values."""
    return None if key is None else hashlib.sha256(key).digest()[:16]


_CAPTURE_FIELDS = ("gtid", "server_id", "binlog_file", "binlog_position", "binlog_row",
                   "snapshot")


def capture_id(event: ChangeEvent, record_key: bytes | None) -> bytes | None:
    """A digest of where the capture read the change (binlog coordinates and row, table, queue
    key, operation), so that a record the capture emitted again after a crash is recognised;
    None when unknown. A new replay epoch sends everything again on purpose, so the epoch is
    part of it."""
    details = event.source_details
    if details.get("binlog_file") is None or details.get("binlog_position") is None:
        return None
    parts = [repr(details.get(name)) for name in _CAPTURE_FIELDS]
    parts += [repr(event.database), repr(event.table), repr(record_key),
              event.operation.value, str(event.replay_epoch)]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:16]


def platform_write_id(event: ChangeEvent) -> bytes | None:
    """The 16-byte id of the platform write this change is (see
    `tidesync.cdc.platform_writes`), or None for a local business write; b"" when its
    `_sync_event_id` is not a readable id (it can then never be proven). A delete whose id
    cannot be read cannot carry the tombstone mark of that id, so it is a local delete."""
    found = platform_event_id(event)
    if isinstance(found, uuid.UUID):
        return found.bytes
    return None if found is None or event.operation is Operation.DELETE else b""


def _micros(moment: dt.datetime | None) -> int | None:
    if moment is None:
        return None
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def rule_of(event: ChangeEvent) -> str:
    """The rule an event belongs to; without a rule runtime each table is its own rule."""
    return event.rule_id or table_rule(event.database, event.table)


# ----------------------------------------------------------------------------- migrations


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def ship_migrations(root: Path = MIGRATIONS_DIR) -> list[Migration]:
    """`tidesync/migrations/ship/NNNN_name.sql`, in version order."""
    found: dict[int, Migration] = {}
    for path in sorted(root.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None or int(match.group(1)) in found:
            raise StateStoreError(f"{path.name}: expected one NNNN_lower_snake.sql per version")
        found[int(match.group(1))] = Migration(int(match.group(1)), path.stem,
                                               path.read_text(encoding="utf-8"))
    if not found:
        raise StateStoreError(f"no ship state migrations under {root}")
    return [found[version] for version in sorted(found)]


# ----------------------------------------------------------------------------- the store


_SELECT_WATERMARKS = (
    "SELECT topic, kafka_partition, replay_epoch, base_offset, read_offset, received_offset,"
    " terminal_offset, committed_offset, end_offset, next_source_sequence"
    " FROM partition_watermark WHERE direction = ? AND consumer_group = ?"
)
_SELECT_WATERMARK = _SELECT_WATERMARKS + " AND topic = ? AND kafka_partition = ?"
# These two must repeat the WHERE clauses of the partial indexes to use them.
_FIRST_OPEN = (
    "SELECT min(kafka_offset) FROM event_state WHERE direction = ? AND topic = ?"
    " AND kafka_partition = ? AND replay_epoch = ?"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED')"
)
_FIRST_UNRECEIVED = (
    "SELECT min(kafka_offset) FROM event_state WHERE direction = ? AND topic = ?"
    " AND kafka_partition = ? AND replay_epoch = ?"
    " AND state NOT IN ('RECEIVED', 'TERMINAL', 'EXPIRED_APPROVED')"
)
_OPEN_BACKLOG = (
    "SELECT count(*), coalesce(sum(bytes), 0), min(captured_at), min(rule_id) FROM event_state"
    " WHERE direction = ? AND topic = ? AND kafka_partition = ? AND replay_epoch = ?"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED')"
)
_BLOCKED_KEYS = (
    "SELECT DISTINCT key_digest FROM event_state WHERE state = 'BLOCKED' AND direction = ?"
    " AND topic = ? AND kafka_partition = ? AND replay_epoch = ? AND key_digest IS NOT NULL"
)
_SELECT_BLOCKED = (
    "SELECT topic, kafka_partition, kafka_offset, replay_epoch, reason, coalesce(detail, ''),"
    " event_id, key_digest, rule_id FROM event_state WHERE state = 'BLOCKED' AND direction = ?"
)
_QUEUE_METRIC = (
    "INSERT OR IGNORE INTO queue_metric (sampled_at, rule_id, state, events, bytes,"
    " oldest_captured_at, newest_captured_at) SELECT ?, coalesce(rule_id, ''), state, count(*),"
    " sum(bytes), min(captured_at), max(captured_at) FROM event_state WHERE direction = ?"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED') GROUP BY rule_id, state"
)
_INSERT_EVENT = (
    "INSERT INTO event_state (event_id, direction, topic, kafka_partition, kafka_offset,"
    " replay_epoch, rule_id, state, result, reason, detail, source_sequence, bytes, key_digest,"
    " capture_id, duplicate_of, captured_at, business_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class SQLiteShipState:
    """The ship state store over one SQLite file (WAL, synchronous=FULL, foreign keys).

    One instance per process and consumer group. Methods that write run one transaction each;
    `_underscore` twins take an open connection so several writes compose into one.
    `durable=False` (synchronous=OFF) exists for property tests only.
    """

    def __init__(self, path: str | Path, origin_node_id: str, consumer_group: str, *,
                 direction: Direction = Direction.UPLINK, durable: bool = True,
                 read_only: bool = False, clock: Clock = utc_now) -> None:
        self.path = Path(path)
        self.origin_node_id = origin_node_id
        self.consumer_group = consumer_group
        self.direction = direction
        self.clock = clock
        self._blocked_keys: dict[PartitionKey, set[bytes]] = {}
        self.conn = self._connect(durable, read_only)
        if not read_only:
            self.migrate()

    def _connect(self, durable: bool, read_only: bool) -> sqlite3.Connection:
        try:
            if read_only:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            if not read_only:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'OFF'}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA cell_size_check = ON")
        except sqlite3.Error as error:
            raise StateStoreError(f"cannot open the state store {self.path}: {error}") from error
        return conn

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction; SQLite errors become StateStoreError here, only here."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.Error as error:
            raise StateStoreError(f"state store failure: {error}") from error

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Apply pending migrations (each in its own transaction); returns their names."""
        migrations = ship_migrations() if migrations is None else migrations
        applied: list[str] = []
        with self.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY"
                         " KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
        done = {row[0] for row in self.conn.execute("SELECT version FROM schema_version")}
        for migration in migrations:
            if migration.version in done:
                continue
            with self.transaction() as conn:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                             (migration.version, migration.name, self._now_text()))
            applied.append(migration.name)
        return applied

    def _now_text(self) -> str:
        return self.clock().isoformat()

    # ------------------------------------------------------------------ watermarks

    def watermarks(self) -> list[Watermark]:
        rows = self.conn.execute(_SELECT_WATERMARKS + " ORDER BY topic, kafka_partition",
                                 (self.direction.value, self.consumer_group)).fetchall()
        return [Watermark(*row) for row in rows]

    def watermark(self, key: PartitionKey) -> Watermark | None:
        return self._watermark(self.conn, key)

    def _watermark(self, conn: sqlite3.Connection, key: PartitionKey) -> Watermark | None:
        row = conn.execute(_SELECT_WATERMARK, (self.direction.value, self.consumer_group,
                                               key.topic, key.partition)).fetchone()
        return None if row is None else Watermark(*row)

    def start_partition(self, key: PartitionKey, replay_epoch: int) -> Watermark | None:
        """The partition's watermark to resume from, or None to start at its beginning.

        A watermark of another replay epoch is dropped: a new epoch replays the partition
        from the start with new event ids (§7.4)."""
        with self.transaction() as conn:
            current = self._watermark(conn, key)
            if current is not None and current.replay_epoch != replay_epoch:
                conn.execute(
                    "DELETE FROM partition_watermark WHERE direction = ? AND consumer_group = ?"
                    " AND topic = ? AND kafka_partition = ?",
                    (self.direction.value, self.consumer_group, key.topic, key.partition))
                return None
            self._blocked_keys[key] = self._load_blocked_keys(conn, key, replay_epoch)
            return current

    def _load_blocked_keys(self, conn: sqlite3.Connection, key: PartitionKey,
                           replay_epoch: int) -> set[bytes]:
        rows = conn.execute(_BLOCKED_KEYS, (self.direction.value, key.topic, key.partition,
                                            replay_epoch)).fetchall()
        return {row[0] for row in rows}

    def _create_watermark(self, conn: sqlite3.Connection, key: PartitionKey, replay_epoch: int,
                          first_offset: int) -> Watermark:
        base = first_offset - 1
        conn.execute(
            "INSERT INTO partition_watermark (direction, consumer_group, topic, kafka_partition,"
            " replay_epoch, base_offset, read_offset, received_offset, terminal_offset,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.direction.value, self.consumer_group, key.topic, key.partition, replay_epoch,
             base, base, base, base, self._now_text()))
        self._blocked_keys.setdefault(key, set())
        return Watermark(key.topic, key.partition, replay_epoch, base, base, base, base, None,
                         None, 1)

    def _advance(self, conn: sqlite3.Connection, watermark: Watermark, read_offset: int,
                 next_sequence: int) -> Watermark:
        """Store the read position and recompute the contiguous received/terminal offsets."""
        params = (self.direction.value, watermark.topic, watermark.partition,
                  watermark.replay_epoch)
        first_open = conn.execute(_FIRST_OPEN, params).fetchone()[0]
        first_unreceived = conn.execute(_FIRST_UNRECEIVED, params).fetchone()[0]
        terminal = read_offset if first_open is None else min(read_offset, first_open - 1)
        received = read_offset if first_unreceived is None else min(read_offset,
                                                                    first_unreceived - 1)
        terminal = max(terminal, watermark.base_offset)
        received = max(received, terminal)
        conn.execute(
            "UPDATE partition_watermark SET read_offset = ?, received_offset = ?,"
            " terminal_offset = ?, next_source_sequence = ?, updated_at = ?"
            " WHERE direction = ? AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
            (read_offset, received, terminal, next_sequence, self._now_text(),
             self.direction.value, self.consumer_group, watermark.topic, watermark.partition))
        return replace(watermark, read_offset=read_offset, received_offset=received,
                       terminal_offset=terminal, next_source_sequence=next_sequence)

    def mark_committed(self, offsets: dict[PartitionKey, int]) -> None:
        """Remember the offsets committed to the queue (for status; the queue holds them)."""
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE partition_watermark SET committed_offset = ? WHERE direction = ?"
                " AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
                [(offset, self.direction.value, self.consumer_group, key.topic, key.partition)
                 for key, offset in offsets.items()])

    def set_end_offsets(self, offsets: dict[PartitionKey, int]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE partition_watermark SET end_offset = ? WHERE direction = ?"
                " AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
                [(offset, self.direction.value, self.consumer_group, key.topic, key.partition)
                 for key, offset in offsets.items()])

    # ------------------------------------------------------------------ intake

    def record(self, items: Sequence[Consumed], replay_epoch: int) -> Recorded:
        """Record a poll's records in one transaction (per partition in offset order).

        New events get the next source sequence of their partition; records read before
        (after a restart) find their row by position and keep its sequence and state."""
        recorded = Recorded()
        by_partition: dict[PartitionKey, list[Consumed]] = {}
        for item in items:
            by_partition.setdefault(PartitionKey(item.topic, item.partition), []).append(item)
        with self.transaction() as conn:
            for key, records in by_partition.items():
                self._record_partition(conn, key, records, replay_epoch, recorded)
        return recorded

    def _record_partition(self, conn: sqlite3.Connection, key: PartitionKey,
                          records: list[Consumed], replay_epoch: int,
                          recorded: Recorded) -> None:
        watermark = self._watermark(conn, key)
        if watermark is None:
            watermark = self._create_watermark(conn, key, replay_epoch, records[0].offset)
        read_offset, sequence = watermark.read_offset, watermark.next_source_sequence
        reread = [r for r in records if r.offset <= read_offset]
        existing = self._rows_at(conn, key, replay_epoch, reread) if reread else {}
        fresh = [r for r in records if r.offset > read_offset]
        for item in reread:
            self._reread(conn, item, existing.get(item.offset), replay_epoch, recorded)
        captures = {item.offset: capture_id(item.outcome.event, item.key_digest)
                     for item in fresh if isinstance(item.outcome, Normalized)}
        known = self._known_captures(conn, captures.values())
        rows: list[tuple[object, ...]] = []
        now = self._now_text()
        blocked_keys = self._blocked_keys.setdefault(key, set())
        for item in fresh:
            row, sequence = self._decide(conn, item, replay_epoch, sequence,
                                         captures.get(item.offset), known, blocked_keys,
                                         recorded, now)
            if row is not None:
                rows.append(row)
            read_offset = max(read_offset, item.offset)
        conn.executemany(_INSERT_EVENT, rows)
        self._advance(conn, watermark, read_offset, sequence)

    def _rows_at(self, conn: sqlite3.Connection, key: PartitionKey, replay_epoch: int,
                 items: list[Consumed]) -> dict[int, tuple[bytes, str, int | None]]:
        rows = conn.execute(
            "SELECT kafka_offset, event_id, state, source_sequence FROM event_state"
            " WHERE topic = ? AND kafka_partition = ? AND kafka_offset BETWEEN ? AND ?"
            " AND replay_epoch = ? AND direction = ?",
            (key.topic, key.partition, items[0].offset, items[-1].offset, replay_epoch,
             self.direction.value)).fetchall()
        return {row[0]: (row[1], row[2], row[3]) for row in rows}

    def _reread(self, conn: sqlite3.Connection, item: Consumed,
                row: tuple[bytes, str, int | None] | None, replay_epoch: int,
                recorded: Recorded) -> None:
        """A record read again after a restart: its row decides, never a second sequence."""
        recorded.rereads += 1
        event = item.outcome.event if isinstance(item.outcome, Normalized) else None
        if row is None:
            if event is None and not isinstance(item.outcome, Block):
                recorded.skipped += 1
                return
            # It was skipped before and is not now: its place in the sequence is gone.
            self._insert_mismatch(conn, item, replay_epoch)
            recorded.blocked += 1
            return
        event_id, state, sequence = row
        if event is None or event.event_id.bytes != event_id:
            if state in SENDABLE:
                conn.execute("UPDATE event_state SET state = 'BLOCKED', reason = ?, detail = ?"
                             " WHERE event_id = ?",
                             (StateReason.REREAD_MISMATCH.value,
                              "the record reads differently than when it was first recorded",
                              event_id))
                recorded.blocked += 1
            return
        if state in SENDABLE:
            recorded.sendable.append(replace(event, source_sequence=sequence))
            recorded.sizes[event.event_id] = item.size
        elif state == EventState.RECEIVED:
            recorded.awaiting_receipt += 1

    def _insert_mismatch(self, conn: sqlite3.Connection, item: Consumed,
                         replay_epoch: int) -> None:
        row_id = record_id(self.origin_node_id, replay_epoch, item.topic, item.partition,
                           item.offset)
        conn.execute(
            "INSERT OR IGNORE INTO event_state (event_id, direction, topic, kafka_partition,"
            " kafka_offset, replay_epoch, state, reason, detail, bytes, key_digest, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'BLOCKED', ?, ?, ?, ?, ?)",
            (row_id.bytes, self.direction.value, item.topic, item.partition, item.offset,
             replay_epoch, StateReason.REREAD_MISMATCH.value,
             "a record skipped when first read is an event or a block now", item.size,
             item.key_digest, self._now_text()))

    def _known_captures(self, conn: sqlite3.Connection,
                        wanted: Iterable[bytes | None]) -> dict[bytes, bytes]:
        """capture id → event id of the rows that already hold these capture coordinates."""
        found: dict[bytes, bytes] = {}
        for cid in filter(None, wanted):
            row = conn.execute("SELECT event_id FROM event_state WHERE capture_id = ?",
                               (cid,)).fetchone()
            if row is not None:
                found[cid] = row[0]
        return found

    def _platform_write(self, conn: sqlite3.Connection, item: Consumed, event: ChangeEvent,
                        common: tuple[object, ...], rule: str,
                        times: tuple[int | None, int | None], capture: bytes | None,
                        blocked_keys: set[bytes], recorded: Recorded,
                        now: str) -> tuple[object, ...]:
        """A platform write is never uploaded (it came from the shore): proven by
        applied_command it is terminal at once, so the checkpoint passes it; unproven it
        blocks (ORIGIN_UNPROVEN) with the records of its key behind it — never dropped."""
        proven = bool(item.platform_id) and conn.execute(
            "SELECT 1 FROM applied_command WHERE applied_id = ?", (item.platform_id,)
        ).fetchone() is not None
        if proven:
            recorded.skipped += 1
            return (event.event_id.bytes, *common, rule, EventState.TERMINAL.value,
                    PLATFORM_WRITE_RESULT, StateReason.REMOTE_APPLY.value,
                    "a shore command applied by this ship", None, item.size, item.key_digest,
                    capture, None, *times, now)
        recorded.blocked += 1
        if item.key_digest is not None:
            blocked_keys.add(item.key_digest)
        return (event.event_id.bytes, *common, rule, EventState.BLOCKED.value, None,
                StateReason.ORIGIN_UNPROVEN.value,
                "a platform write whose event id this ship never applied", None, item.size,
                item.key_digest, capture, None, *times, now)

    def _decide(self, conn: sqlite3.Connection, item: Consumed, replay_epoch: int,
                sequence: int, capture: bytes | None,
                known: dict[bytes, bytes], blocked_keys: set[bytes], recorded: Recorded,
                now: str) -> tuple[tuple[object, ...] | None, int]:
        """The event_state row of a record read for the first time, and the next sequence."""
        outcome = item.outcome
        common = (self.direction.value, item.topic, item.partition, item.offset, replay_epoch)
        if isinstance(outcome, Block):
            recorded.blocked += 1
            if item.key_digest is not None:
                blocked_keys.add(item.key_digest)
            row_id = record_id(self.origin_node_id, replay_epoch, item.topic, item.partition,
                               item.offset)
            return (row_id.bytes, *common, None, EventState.BLOCKED.value, None,
                    outcome.reason.value, outcome.detail, None, item.size, item.key_digest,
                    None, None, None, None, now), sequence
        if not isinstance(outcome, Normalized):
            recorded.skipped += 1
            return None, sequence
        event = outcome.event
        rule = rule_of(event)
        times = (_micros(event.captured_at), _micros(event.business_occurred_at))
        original = known.get(capture) if capture is not None else None
        if original is not None:
            recorded.duplicates += 1
            return (event.event_id.bytes, *common, rule, EventState.TERMINAL.value,
                    DUPLICATE_RESULT, StateReason.CAPTURE_REEMITTED.value,
                    "the capture emitted this change again", None, item.size, item.key_digest,
                    None, original, *times, now), sequence
        if item.platform_id is not None:
            return self._platform_write(conn, item, event, common, rule, times, capture,
                                        blocked_keys, recorded, now), sequence
        if item.key_digest is not None and item.key_digest in blocked_keys:
            recorded.blocked += 1
            return (event.event_id.bytes, *common, rule, EventState.BLOCKED.value, None,
                    StateReason.BEHIND_BLOCKED_RECORD.value,
                    "an earlier record of the same key is blocked", None, item.size,
                    item.key_digest, capture, None, *times, now), sequence
        if capture is not None:
            known[capture] = event.event_id.bytes
        recorded.new_events += 1
        recorded.sendable.append(replace(event, source_sequence=sequence))
        recorded.sizes[event.event_id] = item.size
        return (event.event_id.bytes, *common, rule, EventState.READY.value, None, None, None,
                sequence, item.size, item.key_digest, capture, None, *times, now), sequence + 1

    # ------------------------------------------------------------------ sending

    def mark(self, event_ids: Iterable[uuid.UUID], state: EventState) -> None:
        """Move sendable events to IN_FLIGHT, READY or RETRY_WAIT (never out of a final one)."""
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE event_state SET state = ?, updated_at = ? WHERE event_id = ?"
                " AND state IN ('CONSUMED', 'READY', 'IN_FLIGHT', 'RETRY_WAIT')",
                [(state.value, self._now_text(), event_id.bytes) for event_id in event_ids])

    def apply_answers(self, answers: Sequence[ReceiveAnswer]) -> Progress:
        """Record the shore's per-event receive answers and advance the watermarks."""
        progress = Progress()
        now = self._now_text()
        with self.transaction() as conn:
            rows = self._rows_by_id(conn, [a.event_id for a in answers])
            for answer in answers:
                row = rows.get(answer.event_id.bytes)
                if row is None or row[4] in DONE:
                    progress.unknown += row is None
                    continue
                self._apply_answer(conn, answer, row, progress, now)
            self._advance_partitions(conn, rows.values())
        return progress

    def _apply_answer(self, conn: sqlite3.Connection, answer: ReceiveAnswer,
                      row: tuple[str, int, int, int, str, int, bytes | None],
                      progress: Progress, now: str) -> None:
        event_id = answer.event_id
        if answer.outcome is ReceiveOutcome.RECEIVED and answer.result:
            conn.execute("UPDATE event_state SET state = 'TERMINAL', result = ?, reason = ?,"
                         " updated_at = ? WHERE event_id = ?",
                         (answer.result, answer.reason or None, now, event_id.bytes))
            progress.terminal.add(event_id)
            progress.terminal_bytes += row[5]
        elif answer.outcome is ReceiveOutcome.RECEIVED:
            conn.execute("UPDATE event_state SET state = 'RECEIVED', updated_at = ?"
                         " WHERE event_id = ? AND state != 'RECEIVED'", (now, event_id.bytes))
            progress.received.add(event_id)
        elif answer.outcome is ReceiveOutcome.RETRYABLE_FAILURE:
            conn.execute("UPDATE event_state SET state = 'RETRY_WAIT', reason = ?,"
                         " attempts = attempts + 1, updated_at = ? WHERE event_id = ?",
                         (answer.reason or None, now, event_id.bytes))
            progress.retry.add(event_id)
        else:
            conn.execute("UPDATE event_state SET state = 'BLOCKED', reason = ?, detail = ?,"
                         " updated_at = ? WHERE event_id = ?",
                         (answer.reason or "PERMANENT_REJECTED", answer.detail[:500], now,
                          event_id.bytes))
            if row[6] is not None:
                self._blocked_keys.setdefault(PartitionKey(row[0], row[1]), set()).add(row[6])
            progress.blocked.add(event_id)

    def apply_receipts(self, results: Sequence[TerminalResult], cursor: str) -> Progress:
        """Record terminal results from a receipts page and its cursor in one transaction."""
        progress = Progress()
        now = self._now_text()
        with self.transaction() as conn:
            rows = self._rows_by_id(conn, [r.event_id for r in results])
            for result in results:
                row = rows.get(result.event_id.bytes)
                if row is None or row[4] in DONE:
                    progress.unknown += row is None
                    continue
                conn.execute("UPDATE event_state SET state = 'TERMINAL', result = ?,"
                             " reason = ?, updated_at = ? WHERE event_id = ?",
                             (result.result, result.reason or None, now, result.event_id.bytes))
                progress.terminal.add(result.event_id)
                progress.terminal_bytes += row[5]
            self._advance_partitions(conn, rows.values())
            self._set_cursor(conn, RECEIPTS_CURSOR, cursor)
        return progress

    def _rows_by_id(self, conn: sqlite3.Connection, event_ids: Sequence[uuid.UUID]
                    ) -> dict[bytes, tuple[str, int, int, int, str, int, bytes | None]]:
        found: dict[bytes, tuple[str, int, int, int, str, int, bytes | None]] = {}
        for event_id in event_ids:
            row = conn.execute(
                "SELECT topic, kafka_partition, kafka_offset, replay_epoch, state, bytes,"
                " key_digest FROM event_state WHERE event_id = ? AND direction = ?",
                (event_id.bytes, self.direction.value)).fetchone()
            if row is not None:
                found[event_id.bytes] = (row[0], row[1], row[2], row[3], row[4], row[5], row[6])
        return found

    def _advance_partitions(self, conn: sqlite3.Connection,
                            rows: Iterable[tuple[str, int, int, int, str, int, bytes | None]]
                            ) -> None:
        for topic, partition in sorted({(row[0], row[1]) for row in rows}):
            watermark = self._watermark(conn, PartitionKey(topic, partition))
            if watermark is not None:
                self._advance(conn, watermark, watermark.read_offset,
                              watermark.next_source_sequence)

    # ------------------------------------------------------------------ cursors and health

    def cursor(self, name: str = RECEIPTS_CURSOR) -> str:
        row = self.conn.execute("SELECT cursor FROM sync_cursor WHERE name = ?",
                                (name,)).fetchone()
        return "" if row is None else str(row[0])

    def _set_cursor(self, conn: sqlite3.Connection, name: str, cursor: str) -> None:
        conn.execute("INSERT INTO sync_cursor (name, cursor, updated_at) VALUES (?, ?, ?)"
                     " ON CONFLICT (name) DO UPDATE SET cursor = excluded.cursor,"
                     " updated_at = excluded.updated_at", (name, cursor, self._now_text()))

    def set_health(self, items: Iterable[Health]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO subsystem_health (subsystem, state, reason_code, detail, since)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (subsystem) DO UPDATE SET"
                " state = excluded.state, reason_code = excluded.reason_code,"
                " detail = excluded.detail, since = excluded.since",
                [(h.subsystem, h.state, h.reason_code, h.detail, h.since.isoformat())
                 for h in items])

    def health(self) -> list[Health]:
        rows = self.conn.execute("SELECT subsystem, state, reason_code, detail, since"
                                 " FROM subsystem_health ORDER BY subsystem").fetchall()
        return [Health(r[0], r[1], r[2], r[3], dt.datetime.fromisoformat(r[4])) for r in rows]

    # ------------------------------------------------------------------ shore commands

    def command_progress(self, applied_id: bytes | None,
                         command_id: bytes) -> tuple[str | None, bool]:
        """(applied_command state or None, whether an ack of the command awaits acceptance)."""
        state = None
        if applied_id:
            row = self.conn.execute("SELECT state FROM applied_command WHERE applied_id = ?",
                                    (applied_id,)).fetchone()
            state = None if row is None else str(row[0])
        pending = self.conn.execute("SELECT 1 FROM pending_command_ack WHERE command_id = ?",
                                    (command_id,)).fetchone() is not None
        return state, pending

    def begin_command(self, applied_id: bytes, command_id: bytes, sequence: int,
                      kind: str) -> None:
        """Record (durably, before the business database is written) that this id is about
        to be applied: from now on a captured platform write with it is proven ours."""
        now = self._now_text()
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO applied_command (applied_id, command_id, sequence, kind, state,"
                " recorded_at, updated_at) VALUES (?, ?, ?, ?, 'APPLYING', ?, ?)"
                " ON CONFLICT (applied_id) DO NOTHING",
                (applied_id, command_id, sequence, kind, now, now))

    def finish_command(self, applied_id: bytes | None, command_id: bytes, sequence: int,
                       result: str, reason: str, local_revision: bytes, ack: bytes) -> None:
        """The command's result (applied_command DONE) and its ack to send, in one transaction."""
        now = self._now_text()
        with self.transaction() as conn:
            if applied_id:
                conn.execute(
                    "UPDATE applied_command SET state = 'DONE', result = ?, reason = ?,"
                    " local_revision = ?, updated_at = ? WHERE applied_id = ?",
                    (result, reason or None, local_revision or None, now, applied_id))
            conn.execute(
                "INSERT INTO pending_command_ack (command_id, sequence, result, ack, recorded_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (command_id) DO UPDATE SET"
                " result = excluded.result, ack = excluded.ack",
                (command_id, sequence, result, ack, now))
            conn.execute(
                "INSERT INTO command_result_count (result, total) VALUES (?, 1)"
                " ON CONFLICT (result) DO UPDATE SET total = total + 1", (result,))

    def pending_acks(self, limit: int) -> list[tuple[bytes, bytes]]:
        """(command id, serialized one-ack CommandAcks) of unaccepted acks, in sequence order."""
        rows = self.conn.execute("SELECT command_id, ack FROM pending_command_ack"
                                 " ORDER BY sequence LIMIT ?", (limit,)).fetchall()
        return [(bytes(row[0]), bytes(row[1])) for row in rows]

    def pending_ack_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM pending_command_ack").fetchone()[0])

    def acks_answered(self, answered: Iterable[bytes]) -> None:
        """Forget acks the shore answered (accepted, or rejected as not this node's); when none
        is left, a fully processed page's end becomes the commands cursor."""
        with self.transaction() as conn:
            conn.executemany("DELETE FROM pending_command_ack WHERE command_id = ?",
                             [(command_id,) for command_id in answered])
            self._promote_commands_cursor(conn)

    def page_processed(self, next_cursor: str) -> None:
        """Every command of a page has its result: its end is the cursor once acks are in."""
        with self.transaction() as conn:
            self._set_cursor(conn, COMMANDS_PAGE_END, next_cursor)
            self._promote_commands_cursor(conn)

    def _promote_commands_cursor(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM pending_command_ack LIMIT 1").fetchone() is not None:
            return
        row = conn.execute("SELECT cursor FROM sync_cursor WHERE name = ?",
                           (COMMANDS_PAGE_END,)).fetchone()
        if row is not None:
            self._set_cursor(conn, COMMANDS_CURSOR, str(row[0]))
            conn.execute("DELETE FROM sync_cursor WHERE name = ?", (COMMANDS_PAGE_END,))

    def applied_command(self, applied_id: bytes) -> tuple[str, str | None, str | None] | None:
        """(state, result, reason) of an applied id, or None."""
        row = self.conn.execute("SELECT state, result, reason FROM applied_command"
                                " WHERE applied_id = ?", (applied_id,)).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def command_counts(self) -> dict[str, int]:
        """Command results recorded, by result (re-applies after a crash count again)."""
        rows = self.conn.execute("SELECT result, total FROM command_result_count").fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    # ------------------------------------------------------------------ reporting

    def state_counts(self) -> dict[str, int]:
        rows = self.conn.execute("SELECT state, count(*) FROM event_state WHERE direction = ?"
                                 " GROUP BY state", (self.direction.value,)).fetchall()
        return {row[0]: row[1] for row in rows}

    def awaiting_receipts(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM event_state WHERE state = 'RECEIVED'"
                                " AND direction = ?", (self.direction.value,)).fetchone()
        return int(row[0])

    def blocked_records(self, limit: int = 100) -> list[BlockedRecord]:
        """Blocked rows, oldest position first."""
        rows = self.conn.execute(
            _SELECT_BLOCKED + " ORDER BY topic, kafka_partition, kafka_offset LIMIT ?",
            (self.direction.value, limit)).fetchall()
        return [_blocked_record(row) for row in rows]

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

        return self._dispose(topic, partition, offset, actor, reason, "EXPIRE_BLOCKED", allowed,
                             "state = 'EXPIRED_APPROVED', result = 'EXPIRED_APPROVED'")

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

        return self._dispose(topic, partition, offset, actor, reason, "CONFIRM_ORIGIN", allowed,
                             f"state = 'TERMINAL', result = '{PLATFORM_WRITE_RESULT}',"
                             f" reason = '{StateReason.OPERATOR_CONFIRMED.value}'")

    def _dispose(self, topic: str, partition: int, offset: int, actor: str, reason: str,
                 action: str, allowed: Callable[[BlockedRecord], None],
                 assignments: str) -> Disposed:
        """Move the blocked record at this position out of BLOCKED (`assignments`), let the
        records of its queue key that waited behind it go on, and record who and why.

        Those records become READY and are uploaded after the next `ship run` re-reads them.
        Their places in the partition's source sequence went to later records meanwhile, so
        they go without one; the shore orders them by queue position (it gap-checks sequenced
        events only). A later blocked record of the same key keeps holding those after it. A
        record that only waits (BEHIND_BLOCKED_RECORD) is not disposed of itself: the one it
        waits behind is."""
        if not actor.strip() or not reason.strip():
            raise DispositionRefused("REASON_REQUIRED", "an actor and a reason are required")
        with self.transaction() as conn:
            row = conn.execute(
                _SELECT_BLOCKED + " AND topic = ? AND kafka_partition = ? AND kafka_offset = ?"
                " ORDER BY replay_epoch DESC LIMIT 1",
                (self.direction.value, topic, partition, offset)).fetchone()
            if row is None:
                raise DispositionRefused(
                    "NOT_BLOCKED", f"no blocked record at {topic}/{partition}@{offset}")
            record = _blocked_record(row)
            where = (self.direction.value, topic, partition, record.replay_epoch)
            if record.reason == StateReason.BEHIND_BLOCKED_RECORD:
                holder = conn.execute(
                    "SELECT max(kafka_offset) FROM event_state WHERE direction = ?"
                    " AND topic = ? AND kafka_partition = ? AND replay_epoch = ?"
                    " AND state = 'BLOCKED' AND key_digest = ? AND kafka_offset < ?"
                    " AND reason != ?",
                    (*where, record.key_digest, offset,
                     StateReason.BEHIND_BLOCKED_RECORD.value)).fetchone()[0]
                raise DispositionRefused(
                    "WAITS_BEHIND", f"this record waits behind the blocked record at offset "
                                    f"{holder}; dispose of that one and this one is uploaded")
            allowed(record)
            now = self._now_text()
            conn.execute(f"UPDATE event_state SET {assignments}, updated_at = ?"  # noqa: S608
                         " WHERE event_id = ?", (now, record.event_id.bytes))
            released, still_held_at = 0, None
            if record.key_digest is not None:
                released, still_held_at = self._release_followers(conn, where, record, now)
            conn.execute(
                "INSERT INTO operator_action (action, event_id, direction, topic,"
                " kafka_partition, kafka_offset, replay_epoch, blocked_reason, released, actor,"
                " reason, acted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (action, record.event_id.bytes, self.direction.value, topic, partition, offset,
                 record.replay_epoch, record.reason, released, actor[:200], reason[:1000],
                 now))
            key = PartitionKey(topic, partition)
            watermark = self._watermark(conn, key)
            if watermark is not None and watermark.replay_epoch == record.replay_epoch:
                self._advance(conn, watermark, watermark.read_offset,
                              watermark.next_source_sequence)
            if key in self._blocked_keys:
                self._blocked_keys[key] = self._load_blocked_keys(conn, key,
                                                                  record.replay_epoch)
        return Disposed(record, released, still_held_at)

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
        rows = self.conn.execute(
            "SELECT action_id, action, event_id, topic, kafka_partition, kafka_offset,"
            " replay_epoch, blocked_reason, released, actor, reason, acted_at"
            " FROM operator_action WHERE direction = ? ORDER BY action_id DESC LIMIT ?",
            (self.direction.value, limit)).fetchall()
        names = ("action_id", "action", "event_id", "topic", "partition", "offset",
                 "replay_epoch", "blocked_reason", "released", "actor", "reason", "acted_at")
        return [{**dict(zip(names, row, strict=True)), "event_id": str(uuid.UUID(bytes=row[2]))}
                for row in rows]

    def blocked_reasons(self) -> Counter[str]:
        rows = self.conn.execute(
            "SELECT reason, count(*) FROM event_state WHERE state = 'BLOCKED'"
            " AND direction = ? GROUP BY reason", (self.direction.value,)).fetchall()
        return Counter({str(row[0]): int(row[1]) for row in rows})

    def backlog(self, watermark: Watermark) -> PartitionBacklog:
        row = self.conn.execute(_OPEN_BACKLOG, (self.direction.value, watermark.topic,
                                                watermark.partition, watermark.replay_epoch)
                                ).fetchone()
        return PartitionBacklog(watermark.key, row[0], row[1], row[2], row[3])

    def average_bytes(self) -> float:
        """Mean recorded size of an event (for estimating unread backlog bytes)."""
        row = self.conn.execute(
            "SELECT avg(bytes) FROM (SELECT bytes FROM event_state WHERE direction = ?"
            " ORDER BY rowid DESC LIMIT 1000)", (self.direction.value,)).fetchone()
        return float(row[0] or 0.0)

    def record_metrics(self, sampled_at: dt.datetime) -> None:
        """One queue_metric row per rule and open state (the offline ETA input, §15)."""
        with self.transaction() as conn:
            conn.execute(_QUEUE_METRIC, (sampled_at.isoformat(), self.direction.value))


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (ours hold no semicolons inside literals)."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]
