"""Incremental snapshots in the binlog capture, chunk by chunk between binlog events (DBLog).

For each chunk the capture writes a low watermark (a row of `_sync_snapshot_signal` in the
table's database, so it appears in the binlog), reads the chunk by primary key range (or the
listed keys), and writes a high watermark. While its binlog reader is between the two marks it
notes the last image of every key of the table that changed; when it reaches the high mark it
publishes each row of the chunk as an `op=r` record in the table's topic, in the partition of
its key (where that key's change records go), as it stands at the high mark: the row read when
it did not change between the marks, its last change's after image when it did, nothing when
it was deleted. So every snapshot record sits in its partition after every change made before
the high mark and before every change made after it, and holds the row as of its place: an
older snapshot row can never overwrite a newer change on the shore. (Sending the changed rows'
last image, rather than leaving them to their change records as DBLog does, matters here: a
change of a row the shore does not hold yet is a conflict there, not an insert.)

A chunk is recorded as done only after the queue acknowledged its records; a capture killed
before that reads the chunk again (with new marks) when it restarts. Chunks are throttled to
`rows_per_second` so the changes of the binlog keep flowing in between.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from tidesync import failpoints
from tidesync.capture.change_records import RowChange, change_records
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SnapshotMarker,
    SourceInfo,
    TableDefinition,
)
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.snapshot_store import Key, SnapshotRequest, SnapshotStore
from tidesync.capture.tables import load_mysql_table, shortest_float32
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.values import BitString, JsonText, Row, Value
from tidesync.target.mysql_schema import mysql_quote

log = logging.getLogger(__name__)

SIGNAL_TABLE = "_sync_snapshot_signal"
"""The watermark table the capture writes in the snapshot table's database (never captured)."""
IDLE_TIMEOUT_SECONDS = 30.0
"""A chunk whose marks the binlog reader has not met although it has been idle (at the end of
the binlog) that long after the high mark was written is read again."""
FAILPOINT_CHUNK_PUBLISHED = "snapshot_chunk_published"
"""Hit after a chunk's records are acknowledged and before the chunk is recorded as done (also
as `snapshot_chunk_published#N` for the N-th chunk of the process)."""
POLL_SECONDS = 1.0
"""How often the capture looks for a new request when it has none."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def rows_to_emit(chunk: Mapping[Key, Row], changed: Mapping[Key, Row | None]) -> list[Row]:
    """The rows of a chunk to publish as snapshot records, in the chunk's order: a row whose
    key did not change between the low and the high watermark as it was read, one that
    changed as its last after image (`changed`: key → last image, None once deleted), and
    none for a deleted row."""
    emitted = []
    for key, row in chunk.items():
        if key not in changed:
            emitted.append(row)
            continue
        latest = changed[key]
        if latest is not None:
            emitted.append(latest)
    return emitted


def last_images(table: TableDefinition, change: RowChange) -> list[tuple[Key, Row | None]]:
    """What a row change leaves under each key it touches (None: no row any more)."""
    before, after = change.before, change.after
    touched: list[tuple[Key, Row | None]] = []
    if before is not None and (after is None or row_key(table, before) != row_key(table, after)):
        touched.append((row_key(table, before), None))
    if after is not None:
        touched.append((row_key(table, after), after))
    return touched


def row_key(table: TableDefinition, row: Row) -> Key:
    return tuple(row[name] for name in table.primary_key)


@dataclass
class _Chunk:
    """The chunk between its watermarks."""

    request: SnapshotRequest
    table: TableDefinition
    nonce: str
    rows: dict[Key, Row]
    cursor: Key | int
    last: bool
    started: float
    opened: bool = False
    changed: dict[Key, Row | None] = field(default_factory=dict)

    def mark(self, side: str) -> str:
        return f"{side}:{self.request.id}:{self.nonce}"


class IncrementalSnapshots:
    """Carries out the snapshot requests of one capture; driven by its binlog reader.

    `step` is called between binlog events (and at heartbeats), `signal` with the marks of each
    `_sync_snapshot_signal` row the reader meets, `changed` with the keys of each captured row
    change. `connect` opens an autocommit connection to the source.
    """

    def __init__(self, store: SnapshotStore, capture: str, connect: Callable[[], Any],
                 writer: DebeziumEnvelopeWriter, publisher: KafkaEnvelopePublisher, *,
                 captures: Callable[[str, str], bool], rows_per_second: int,
                 clock: Clock = utc_now,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._capture = capture
        self._connect = connect
        self._writer = writer
        self._publisher = publisher
        self._captures = captures
        self._rate = max(1, rows_per_second)
        self._clock = clock
        self._monotonic = monotonic
        self._connection: Any = None
        self._request: SnapshotRequest | None = None
        self._chunk: _Chunk | None = None
        self._next_chunk_at = 0.0
        self._next_poll_at = 0.0
        self._signal_ready: set[str] = set()
        self._emitted_chunks = 0

    @property
    def busy(self) -> bool:
        return self._chunk is not None or self._request is not None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # What the binlog reader reports.

    def changed(self, change: RowChange) -> None:
        chunk = self._chunk
        table = change.table
        if chunk is not None and chunk.opened and (table.database, table.table) == (
                chunk.table.database, chunk.table.table):
            chunk.changed.update(last_images(table, change))

    def signal(self, marks: Iterable[str], source: SourceInfo) -> None:
        """Marks read from the signal table; `source` says where in the binlog."""
        chunk = self._chunk
        if chunk is None:
            return  # marks of a chunk given up, or of a run before a restart
        for mark in marks:
            if mark == chunk.mark("L"):
                chunk.opened = True
            elif mark == chunk.mark("H") and chunk.opened:
                self._emit(chunk, source)
                return

    # Starting chunks.

    def idle(self) -> None:
        """The binlog reader is at the end of the binlog (a heartbeat): a chunk whose marks it
        has long passed without meeting them is given up and read again."""
        chunk = self._chunk
        if chunk is not None and self._monotonic() - chunk.started > IDLE_TIMEOUT_SECONDS:
            log.warning("snapshot %d: the binlog reader did not meet the chunk's watermarks;"
                        " reading the chunk again", chunk.request.id)
            self._chunk = None

    def step(self) -> None:
        now = self._monotonic()
        if self._chunk is not None:
            return
        if now < self._next_chunk_at:
            return
        if self._request is None:
            if now < self._next_poll_at:
                return
            self._next_poll_at = now + POLL_SECONDS
            self._request = self._store.active(self._capture)
            if self._request is None:
                return
        request = self._request
        try:
            self._open_chunk(request)
        except CaptureError as error:
            log.error("snapshot %d of %s.%s failed: %s", request.id, request.database,
                      request.table, error)
            self._store.fail(request.id, str(error), self._clock())
            self._request = None
        except pymysql.Error as error:
            log.warning("snapshot %d: the source refused a chunk (%s); trying again",
                        request.id, type(error).__name__)
            self.close()
            self._next_chunk_at = now + 5.0

    def _cursor(self) -> Any:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection.cursor()

    def _open_chunk(self, request: SnapshotRequest) -> None:
        if not self._captures(request.database, request.table):
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               f"{request.database}.{request.table} is not captured by this"
                               " capture (capture.databases / capture.tables)")
        with self._cursor() as cursor:
            table = load_mysql_table(cursor, request.database, request.table)
            if table is None:
                raise CaptureError(CaptureErrorReason.SCHEMA_MISMATCH,
                                   f"table {request.database}.{request.table} does not exist")
            if request.chunks_total == 0:
                total = (len(request.keys) if request.keys is not None
                         else _count(cursor, table))
                chunks = max(1, math.ceil(total / request.chunk_rows))
                self._store.start(request.id, total, chunks, self._clock())
            self._prepare_signal(cursor, table.database)
            chunk = _Chunk(request, table, secrets.token_hex(6), {}, 0, False,
                           self._monotonic())
            _write_mark(cursor, table.database, chunk.mark("L"))
            rows, chunk.cursor, chunk.last = _read_chunk(cursor, table, request)
            chunk.rows = {row_key(table, row): row for row in rows}
            _write_mark(cursor, table.database, chunk.mark("H"))
        chunk.started = self._monotonic()
        self._chunk = chunk

    def _prepare_signal(self, cursor: Any, database: str) -> None:
        if database in self._signal_ready:
            return
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {mysql_quote(database)}.{SIGNAL_TABLE}"
                       " (id INT PRIMARY KEY, mark VARCHAR(64) NOT NULL)")
        self._signal_ready.add(database)

    # Publishing a chunk.

    def _emit(self, chunk: _Chunk, at: SourceInfo) -> None:
        self._chunk = None
        rows = rows_to_emit(chunk.rows, chunk.changed)
        offsets: dict[tuple[str, int], int] = {}

        def delivered(topic: str, partition: int, offset: int) -> None:
            offsets[(topic, partition)] = max(offset, offsets.get((topic, partition), -1))

        processed_at = self._clock()
        for index, row in enumerate(rows):
            source = dataclasses.replace(at, row=index, snapshot=SnapshotMarker.INCREMENTAL,
                                         thread=None, query=None, transaction=None,
                                         foreign_key_checks=True)
            change = RowChange(chunk.table, EnvelopeOp.READ, None, row, source)
            for record, headers in change_records(self._writer, change, processed_at,
                                                  tombstones=False):
                self._publisher.publish(record, headers, on_delivery=delivered)
        self._publisher.flush()
        self._emitted_chunks += 1
        failpoints.hit(FAILPOINT_CHUNK_PUBLISHED)
        failpoints.hit(f"{FAILPOINT_CHUNK_PUBLISHED}#{self._emitted_chunks}")
        self._store.chunk_done(chunk.request.id, chunk.cursor, len(rows), offsets,
                               self._clock(), last=chunk.last)
        log.info("snapshot %d of %s.%s: chunk of %d rows, %d published (%d keys changed"
                 " meanwhile)%s",
                 chunk.request.id, chunk.table.database, chunk.table.table, len(chunk.rows),
                 len(rows), len(chunk.changed), "; all emitted" if chunk.last else "")
        self._request = None if chunk.last else self._store.active(self._capture)
        self._next_chunk_at = self._monotonic() + len(chunk.rows) / self._rate


def _count(cursor: Any, table: TableDefinition) -> int:
    cursor.execute(f"SELECT COUNT(*) FROM {_table_name(table)}")  # noqa: S608
    return int(cursor.fetchone()[0])


def _write_mark(cursor: Any, database: str, mark: str) -> None:
    cursor.execute(f"INSERT INTO {mysql_quote(database)}.{SIGNAL_TABLE} (id, mark)"  # noqa: S608
                   " VALUES (1, %s) ON DUPLICATE KEY UPDATE mark = VALUES(mark)", (mark,))


def _table_name(table: TableDefinition) -> str:
    return f"{mysql_quote(table.database)}.{mysql_quote(table.table)}"


def _read_chunk(cursor: Any, table: TableDefinition,
                request: SnapshotRequest) -> tuple[list[Row], Key | int, bool]:
    """The chunk's rows, the cursor after it, and whether it is the last one."""
    columns = ", ".join(mysql_quote(column.name) for column in table.columns)
    keys = "(" + ", ".join(mysql_quote(name) for name in table.primary_key) + ")"
    width = len(table.primary_key)
    one_key = "(" + ", ".join(["%s"] * width) + ")"
    if request.keys is not None:
        start = request.cursor if isinstance(request.cursor, int) else 0
        wanted = [key for key in request.keys[start:start + request.chunk_rows]
                  if len(key) == width]
        end = start + request.chunk_rows
        if not wanted:
            return [], end, end >= len(request.keys)
        cursor.execute(f"SELECT {columns} FROM {_table_name(table)} WHERE {keys} IN"  # noqa: S608
                       f" ({', '.join([one_key] * len(wanted))}) ORDER BY {keys[1:-1]}",
                       [value for key in wanted for value in key])
        return _decoded(cursor, table), end, end >= len(request.keys)
    after = request.cursor if isinstance(request.cursor, tuple) else None
    where, params = ("", []) if after is None else (f" WHERE {keys} > {one_key}", list(after))
    cursor.execute(f"SELECT {columns} FROM {_table_name(table)}{where}"  # noqa: S608
                   f" ORDER BY {keys[1:-1]} LIMIT {int(request.chunk_rows)}", params)
    rows = _decoded(cursor, table)
    last = len(rows) < request.chunk_rows
    return rows, (row_key(table, rows[-1]) if rows else (after or ())), last


def _decoded(cursor: Any, table: TableDefinition) -> list[Row]:
    return [{column.name: select_value(column, raw)
             for column, raw in zip(table.columns, raw_row, strict=True)}
            for raw_row in cursor.fetchall()]


def select_value(column: ColumnDefinition, raw: Any) -> Value:
    """A value pymysql read (session time zone UTC) as the Value a binlog event would give."""
    if raw is None:
        return None
    kind = column.data_type
    if kind == "float":
        return shortest_float32(float(raw))
    if kind in ("double", "real"):
        return float(raw)
    if kind in ("datetime", "timestamp"):
        if isinstance(raw, dt.datetime):
            return raw.replace(tzinfo=dt.UTC)
        return _EPOCH if not column.nullable else None  # a zero date
    if kind == "date":
        return raw if isinstance(raw, dt.date) else (_EPOCH.date() if not column.nullable
                                                     else None)
    if kind == "time" and isinstance(raw, dt.timedelta):
        return (dt.datetime.min + raw).time()
    if kind == "json":
        return JsonText(raw.decode() if isinstance(raw, bytes) else str(raw))
    if kind == "bit":
        bits = int.from_bytes(raw, "big") if isinstance(raw, bytes) else int(raw)
        return bool(bits) if (column.length or 1) == 1 else BitString(column.length or 1, bits)
    if isinstance(raw, bytearray):
        return bytes(raw)
    if isinstance(raw, bool | int | str | bytes | Decimal):
        return raw
    raise CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                       f"column {column.name} ({kind}): a value of type {type(raw).__name__}")


def snapshot_marks(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The marks of a signal table rows event's rows (write: values; update: after values)."""
    marks = []
    for row in rows:
        values = row.get("after_values", row.get("values", {}))
        mark = values.get("mark") if isinstance(values, Mapping) else None
        if isinstance(mark, str):
            marks.append(mark)
    return marks
