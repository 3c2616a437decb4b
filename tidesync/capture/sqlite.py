"""SQLite capture for the embedded default: triggers write a changelog, capture publishes it.

`enable_sqlite_capture` adds AFTER INSERT/UPDATE/DELETE triggers that append each row change to
`_tidesync_changelog` with every value tagged by its SQLite storage class (REAL as 17 significant
digits, BLOB as hex), so decimals, bytes and datetimes come back exactly; the column's declared
type then gives the Debezium type. `SQLiteChangelogCapture` publishes the changelog in seq order,
saves the last published seq after each flush and deletes what it has published.

Coexisting with the sync triggers (`tidesync target enable --sqlite`): they stamp a local write
with a second UPDATE of the row, which the capture triggers also log. The capture triggers must
be the newer ones, so they fire first and the log reads in time order: the business write, then
the stamping UPDATE(s). Capture folds each stamping UPDATE (only `_sync_*` columns changed, a
new revision, no remote event id, written in the same statement) into the change it stamps, so
one write gives one change carrying its final revision. Capture checks the trigger order and
trigger text on start and after every schema change, and stops with a clear error if the sync
triggers were re-created later or the table changed since capture was enabled.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, Inexact, InvalidOperation, localcontext
from pathlib import Path
from typing import Any

from tidesync.capture.change_records import RowChange
from tidesync.capture.checkpointer import CaptureStats, Checkpointer
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
    column_schema,
)
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.positions import CapturePosition
from tidesync.domain.values import BitString, JsonText, Value

logger = logging.getLogger(__name__)

CHANGELOG_TABLE = "_tidesync_changelog"
SQLITE_DATABASE = "main"
"""The database name of SQLite tables in topics and records (as `tidesync target` uses)."""
SOURCE_KIND = "sqlite"

REVISION_COLUMN = "_sync_revision"
EVENT_ID_COLUMN = "_sync_event_id"
METADATA_COLUMNS = frozenset({REVISION_COLUMN, "_sync_origin", EVENT_ID_COLUMN,
                              "_sync_updated_at"})

_CHANGELOG_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHANGELOG_TABLE} ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " table_name TEXT NOT NULL,"
    " op TEXT NOT NULL CHECK (op IN ('c', 'u', 'd')),"
    " before_json TEXT,"
    " after_json TEXT,"
    " changed_at TEXT NOT NULL)"
)
_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
"""The same for every row of a statement and its triggers: SQLite fixes 'now' per step."""
_PAIRS_PER_CALL = 60  # SQLite functions take at most 127 arguments by default
_TRIGGER_PREFIX = "tidesync_capture_"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# --- declared types → Debezium types -------------------------------------------------------

_TYPE_TEXT = re.compile(r"^\s*([a-z]+(?:\s+[a-z]+)*)\s*(\([^)]*\))?\s*$")
_SQLITE_ALIASES = {
    "integer": "bigint", "int": "bigint", "int2": "smallint", "int8": "bigint",
    "real": "double", "double precision": "double", "float": "double",
    "clob": "longtext", "text": "longtext", "nchar": "char", "character": "char",
    "nvarchar": "varchar", "varying character": "varchar", "native character": "char",
    "bool": "boolean",
}
_SCALED = frozenset({"decimal", "numeric"})


def sqlite_column(table: str, name: str, declared: str, nullable: bool) -> ColumnDefinition:
    """A SQLite column as the MySQL column Debezium would describe; refuses what it cannot map
    (no declared type, DECIMAL without a scale, types without a Debezium encoding)."""
    match = _TYPE_TEXT.fullmatch(declared.lower())
    base = _SQLITE_ALIASES.get(match.group(1), match.group(1)) if match else ""
    arguments = (match.group(2) or "") if match else ""
    if not base or (base in _SCALED and "," not in arguments) or '"' in name:
        raise _unmappable(table, name, declared)
    if base == "boolean":
        return ColumnDefinition(name, "boolean", nullable)
    try:
        column = ColumnDefinition.parse(name, base + arguments, nullable=nullable)
        column_schema(column)
    except ValueError:
        raise _unmappable(table, name, declared) from None
    return column


def _unmappable(table: str, name: str, declared: str) -> CaptureError:
    return CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                        f"column {table}.{name} has declared type {declared or '(none)'!r}, "
                        "which has no exact Debezium type; declare e.g. INTEGER, DECIMAL(p,s), "
                        "VARCHAR(n), TEXT, BLOB, DATETIME(6), DATE, TIME, JSON or BOOLEAN")


def read_sqlite_table(connection: sqlite3.Connection, table: str) -> TableDefinition | None:
    """The table's columns (declared types mapped) and primary key, or None if it is missing."""
    rows = connection.execute(f"PRAGMA main.table_xinfo({_quote(table)})").fetchall()
    visible = [row for row in rows if row[6] == 0]
    if not visible:
        return None
    columns = tuple(sqlite_column(table, str(row[1]), str(row[2] or ""), not row[3])
                    for row in visible)
    primary_key = tuple(str(row[1]) for row in sorted(
        (row for row in visible if row[5] > 0), key=lambda row: int(row[5])))
    if not primary_key:
        raise CaptureError(CaptureErrorReason.NO_PRIMARY_KEY,
                           f"table {table} has no primary key: it cannot be captured")
    return TableDefinition(SQLITE_DATABASE, table, columns, primary_key)


# --- the triggers --------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def capture_trigger_names(table: str) -> tuple[str, str, str]:
    stem = f"{_TRIGGER_PREFIX}{table}"
    return f"{stem}_ai", f"{stem}_au", f"{stem}_ad"


def _tagged(reference: str) -> str:
    # [storage class, value]: integers and text as themselves, REAL as 17 significant digits
    # (exactly the same double when read back), BLOB as hex.
    return (f"json_array(typeof({reference}), CASE typeof({reference})"
            f" WHEN 'real' THEN printf('%!.17g', {reference})"
            f" WHEN 'blob' THEN hex({reference}) ELSE {reference} END)")


def _image(columns: Sequence[str], row: str) -> str:
    """A JSON object column → tagged value of NEW or OLD, in table column order."""
    pairs = [(name, _tagged(f"{row}.{_quote(name)}")) for name in columns]
    first = pairs[:_PAIRS_PER_CALL]
    expression = "json_object(" + ", ".join(
        f"{_literal(name)}, {value}" for name, value in first) + ")"
    for start in range(_PAIRS_PER_CALL, len(pairs), _PAIRS_PER_CALL):
        chunk = pairs[start:start + _PAIRS_PER_CALL]
        expression = f"json_insert({expression}, " + ", ".join(
            f"{_literal('$.' + _quote(name))}, {value}" for name, value in chunk) + ")"
    return expression


def capture_trigger_sql(table: str, columns: Sequence[str]) -> tuple[str, str, str]:
    """CREATE TRIGGER statements (AFTER INSERT, UPDATE, DELETE) that log row changes."""
    insert_name, update_name, delete_name = capture_trigger_names(table)
    new, old = _image(columns, "NEW"), _image(columns, "OLD")

    def create(name: str, timing: str, op: str, before: str, after: str) -> str:
        return (f"CREATE TRIGGER {_quote(name)} AFTER {timing} ON {_quote(table)} FOR EACH ROW"  # noqa: S608
                f" BEGIN INSERT INTO {CHANGELOG_TABLE}"
                f" (table_name, op, before_json, after_json, changed_at)"
                f" VALUES ({_literal(table)}, '{op}', {before}, {after}, {_NOW}); END")

    return (create(insert_name, "INSERT", "c", "NULL", new),
            create(update_name, "UPDATE", "u", old, new),
            create(delete_name, "DELETE", "d", old, "NULL"))


def enable_sqlite_capture(connection: sqlite3.Connection, table: str) -> list[str]:
    """Create the changelog and the table's capture triggers (newest of the table's triggers).

    Idempotent; one transaction. `connection` must be in autocommit mode (isolation_level=None).
    Enable two-way sync (`tidesync target enable --sqlite`) first, or enable capture again
    after it: the capture triggers must fire before the sync triggers.
    """
    actions: list[str] = []
    connection.execute("BEGIN IMMEDIATE")
    try:
        if not _changelog_exists(connection):
            connection.execute(_CHANGELOG_DDL)
            actions.append(f"created changelog {CHANGELOG_TABLE}")
        definition = read_sqlite_table(connection, table)
        if definition is None:
            raise CaptureError(CaptureErrorReason.CONFIGURATION, f"table {table} does not exist")
        expected = capture_trigger_sql(table, [c.name for c in definition.columns])
        if _trigger_problem(connection, table, expected) is None:
            actions.append(f"unchanged: capture triggers of {table}")
        else:
            for name, text in zip(capture_trigger_names(table), expected, strict=True):
                connection.execute(f"DROP TRIGGER IF EXISTS {_quote(name)}")
                connection.execute(text)
            actions.append(f"created capture triggers of {table} (insert, update, delete)")
        missing = sorted(METADATA_COLUMNS - {c.name for c in definition.columns})
        if missing:
            actions.append(f"note: {table} lacks {', '.join(missing)}: its changes are captured"
                           " but it is not enabled for two-way sync")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return actions


def _changelog_exists(connection: sqlite3.Connection) -> bool:
    return connection.execute(
        "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (CHANGELOG_TABLE,),
    ).fetchone() is not None


def _trigger_problem(connection: sqlite3.Connection, table: str,
                     expected: Sequence[str]) -> str | None:
    """Why the table's capture triggers are not as enabled (missing, stale, or not the newest
    of the table's triggers), or None when they are."""
    rows = connection.execute(
        "SELECT rowid, name, sql FROM main.sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
        (table,)).fetchall()
    ours = dict(zip(capture_trigger_names(table), expected, strict=True))
    found = {str(name): (int(rowid), str(text)) for rowid, name, text in rows}
    for name, text in ours.items():
        if name not in found:
            return f"capture trigger {name} is missing"
        if found[name][1] != text:
            return f"table {table} changed since capture was enabled"
    oldest_ours = min(found[name][0] for name in ours)
    newer = sorted(name for name, (rowid, _) in found.items()
                   if name not in ours and rowid > oldest_ours)
    if newer:
        return (f"trigger {newer[0]} on {table} was created after the capture triggers, so it "
                "fires after them")
    return None


# --- reading the changelog ------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One changelog row; `after_text` is kept to match the stamping UPDATEs that follow it."""

    seq: int
    last_seq: int
    table: str
    op: str
    before: dict[str, list[Any]] | None
    after: dict[str, list[Any]] | None
    after_text: str | None
    before_text: str | None
    changed_at: str


def _stamps(entry: _Entry) -> bool:
    """A sync-trigger stamping UPDATE: only metadata changed, a new revision, no event id."""
    before, after = entry.before, entry.after
    if entry.op != "u" or before is None or after is None or REVISION_COLUMN not in after:
        return False
    if after.get(EVENT_ID_COLUMN, ["null"])[0] != "null":
        return False
    if before.get(REVISION_COLUMN) == after[REVISION_COLUMN]:
        return False
    return all(before.get(name) == value for name, value in after.items()
               if name not in METADATA_COLUMNS)


def fold_stamping_updates(entries: Sequence[_Entry]) -> list[_Entry]:
    """Each stamping UPDATE folded into the change it stamps (same statement, same table, its
    before image equal to that change's after image); other entries pass unchanged."""
    folded: list[_Entry] = []
    open_heads: dict[tuple[str, str], _Entry] = {}
    group = ""
    for entry in entries:
        if entry.changed_at != group:
            open_heads.clear()
            group = entry.changed_at
        head = (open_heads.pop((entry.table, entry.before_text), None)
                if entry.before_text is not None and _stamps(entry) else None)
        if head is None:
            head = entry
            folded.append(head)
        else:
            head.after, head.after_text, head.last_seq = entry.after, entry.after_text, entry.seq
        if head.after_text is not None:
            open_heads[(head.table, head.after_text)] = head
    return folded


def read_changelog(connection: sqlite3.Connection, after_seq: int, limit: int) -> list[_Entry]:
    """Up to about `limit` entries after `after_seq`, never splitting a statement's entries
    (they share `changed_at`), so a stamping UPDATE is always read with what it stamps."""
    cursor = connection.execute(
        "SELECT seq, table_name, op, before_json, after_json, changed_at"  # noqa: S608
        f" FROM {CHANGELOG_TABLE} WHERE seq > ? ORDER BY seq", (after_seq,))
    entries: list[_Entry] = []
    try:
        for seq, table, op, before_text, after_text, changed_at in cursor:
            if len(entries) >= limit and changed_at != entries[-1].changed_at:
                break
            entries.append(_Entry(
                int(seq), int(seq), str(table), str(op),
                None if before_text is None else json.loads(before_text),
                None if after_text is None else json.loads(after_text),
                after_text, before_text, str(changed_at)))
    finally:
        cursor.close()
    return entries


# --- tagged values → Values ----------------------------------------------------------------


def sqlite_value(column: ColumnDefinition, tagged: Sequence[Any]) -> Value:
    """A logged value as the exact Value its column's type means; raises ValueError if the
    stored value does not fit the declared type (SQLite does not enforce types)."""
    storage, raw = tagged[0], tagged[1]
    if storage == "null":
        return None
    decode = _DECODERS.get(column.data_type)
    if decode is None:
        raise ValueError("no decoder")
    value: Value = decode(column, storage, raw)
    return value


def _integer(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    if storage != "integer":
        raise ValueError("not an integer")
    return int(raw)


def _boolean(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    if storage != "integer" or raw not in (0, 1):
        raise ValueError("not 0 or 1")
    return bool(raw == 1)


def _double(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    if storage == "real":
        return float(raw)
    if storage == "integer":
        return float(int(raw))
    raise ValueError("not a number")


def _decimal(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    # NUMERIC affinity keeps at most 15 significant digits as REAL: its shortest repr is the
    # decimal that was stored. The declared scale is restored; a value that needs more fraction
    # digits than the scale is refused rather than rounded.
    if storage == "integer":
        number = Decimal(int(raw))
    elif storage == "real":
        number = Decimal(repr(float(raw)))
    elif storage == "text":
        number = Decimal(str(raw).strip())
    else:
        raise ValueError("not a number")
    with localcontext() as context:
        context.prec = max(column.precision or 65, 28) + 10
        context.traps[Inexact] = True
        try:
            scaled = number.quantize(Decimal(1).scaleb(-(column.scale or 0)))
        except (Inexact, InvalidOperation):
            raise ValueError("more fraction digits than the declared scale") from None
    if not scaled.is_finite():
        raise ValueError("not finite")
    return scaled


def _text(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    if storage != "text":
        raise ValueError("not text")
    return str(raw)


def _bytes(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    if storage != "blob":
        raise ValueError("not a blob")
    return bytes.fromhex(str(raw))


def _json(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    text = _text(column, storage, raw)
    json.loads(str(text))
    return JsonText(str(text))


def _datetime(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    moment = dt.datetime.fromisoformat(str(_text(column, storage, raw)))
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)  # stored as UTC wall-clock text
    return moment.astimezone(dt.UTC)


def _date(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    return dt.date.fromisoformat(str(_text(column, storage, raw)))


def _time(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    moment = dt.time.fromisoformat(str(_text(column, storage, raw)))
    if moment.tzinfo is not None:
        raise ValueError("TIME with a zone")
    return moment


def _bits(column: ColumnDefinition, storage: str, raw: Any) -> Value:
    value = _integer(column, storage, raw)
    assert isinstance(value, int)
    length = column.length or 1
    return bool(value) if length == 1 and value in (0, 1) else BitString(length, value)


_DECODERS: dict[str, Callable[[ColumnDefinition, str, Any], Value]] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"),
                    _integer),
    "boolean": _boolean,
    **dict.fromkeys(("float", "double", "real"), _double),
    **dict.fromkeys(("decimal", "numeric"), _decimal),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"), _text),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
                    _bytes),
    "json": _json,
    **dict.fromkeys(("datetime", "timestamp"), _datetime),
    "date": _date,
    "time": _time,
    "bit": _bits,
}


# --- the capture loop ----------------------------------------------------------------------


class SQLiteChangelogCapture:
    """Publishes the changelog of one SQLite database in seq order."""

    def __init__(self, path: str | Path, writer: DebeziumEnvelopeWriter,
                 checkpointer: Checkpointer, *, poll_interval_seconds: float = 0.2,
                 keep_rows: int = 0) -> None:
        self.path = Path(path)
        self.writer = writer
        self.checkpointer = checkpointer
        self.poll_interval = poll_interval_seconds
        self.keep_rows = keep_rows
        self._db: sqlite3.Connection | None = None
        self._schema_version = -1
        self._tables: dict[str, TableDefinition] = {}

    def run(self, *, until_caught_up: bool = False,
            stop: threading.Event | None = None) -> CaptureStats:
        """Publish until stopped, or (until_caught_up) until the changelog is drained."""
        stop = stop or threading.Event()
        self._db = self._connect()
        self.checkpointer.source = SOURCE_KIND
        self.checkpointer.after_save = self._forget_published
        try:
            seq = self._start()
            while not stop.is_set():
                entries = self._read(seq)
                if entries:
                    seq = self._publish(entries)
                    continue
                if self.checkpointer.due():
                    self.checkpointer.checkpoint()
                if until_caught_up:
                    break
                stop.wait(self.poll_interval)
            self.checkpointer.checkpoint()
        finally:
            self._db.close()
        return self.checkpointer.stats

    def _connect(self) -> sqlite3.Connection:
        if not self.path.exists():
            raise CaptureError(CaptureErrorReason.SOURCE_UNAVAILABLE,
                               f"SQLite database {self.path} does not exist")
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout=10000")
        return db

    def _start(self) -> int:
        assert self._db is not None
        if not _changelog_exists(self._db):
            raise CaptureError(CaptureErrorReason.SOURCE_UNSUITABLE,
                               f"{self.path} has no {CHANGELOG_TABLE}: enable capture of its "
                               "tables first (tidesync ship capture enable TABLE)")
        checkpointer = self.checkpointer
        saved = checkpointer.store.load(checkpointer.name, SOURCE_KIND)
        # A first start publishes everything logged since capture was enabled.
        position = saved if saved is not None else CapturePosition(changelog_seq=0)
        checkpointer.start_at(position, save=saved is None)
        logger.info("capture %s starts after %s", checkpointer.name, position.describe())
        seq = position.changelog_seq or 0
        self._forget_published(position)  # what a crash left behind after the last save
        return seq

    def _read(self, after_seq: int) -> list[_Entry]:
        assert self._db is not None
        self._check_schema()
        return read_changelog(self._db, after_seq, self.checkpointer.max_records)

    def _publish(self, entries: list[_Entry]) -> int:
        for entry in fold_stamping_updates(entries):
            self.checkpointer.publish(self.writer, self._change(entry))
        last = entries[-1].seq
        self.checkpointer.transaction_done(CapturePosition(changelog_seq=last))
        return last

    def _change(self, entry: _Entry) -> RowChange:
        table = self._table(entry.table)
        source = SourceInfo(server_id=0, file=self.path.name, pos=entry.seq,
                            ts_ms=_epoch_ms(entry.changed_at))
        op = {"c": EnvelopeOp.CREATE, "u": EnvelopeOp.UPDATE, "d": EnvelopeOp.DELETE}[entry.op]
        return RowChange(table, op, self._row(table, entry.before),
                         self._row(table, entry.after), source)

    def _row(self, table: TableDefinition, image: Mapping[str, list[Any]] | None
             ) -> dict[str, Value] | None:
        if image is None:
            return None
        if len(image) != len(table.columns) or not all(c.name in image for c in table.columns):
            raise CaptureError(CaptureErrorReason.SCHEMA_MISMATCH,
                               f"a changelog row of {table.table} has other columns than the "
                               "table now has: capture cannot map it without guessing")
        row: dict[str, Value] = {}
        for column in table.columns:
            try:
                row[column.name] = sqlite_value(column, image[column.name])
            except (ValueError, TypeError, ArithmeticError):
                raise CaptureError(
                    CaptureErrorReason.UNMAPPABLE_COLUMN,
                    f"column {table.table}.{column.name}: a stored "
                    f"{image[column.name][0]} value does not fit its declared type "
                    f"({column.data_type})") from None
        return row

    def _table(self, name: str) -> TableDefinition:
        table = self._tables.get(name)
        if table is None:
            assert self._db is not None
            table = read_sqlite_table(self._db, name)
            if table is None:
                raise CaptureError(CaptureErrorReason.SCHEMA_MISMATCH,
                                   f"the changelog holds changes of {name}, which no longer "
                                   "exists")
            self._tables[name] = table
        return table

    def _check_schema(self) -> None:
        """After any schema change: re-read the tables and re-check every table's triggers."""
        assert self._db is not None
        version = int(self._db.execute("PRAGMA schema_version").fetchone()[0])
        if version == self._schema_version:
            return
        self._tables.clear()
        for table in self._captured_tables():
            definition = read_sqlite_table(self._db, table)
            if definition is None:
                continue
            problem = _trigger_problem(self._db, table, capture_trigger_sql(
                table, [c.name for c in definition.columns]))
            if problem is not None:
                raise CaptureError(CaptureErrorReason.SCHEMA_MISMATCH,
                                   f"{problem}: run `tidesync ship capture enable {table}` "
                                   "again (after draining the changelog if columns changed)")
        self._schema_version = version

    def _captured_tables(self) -> Iterator[str]:
        assert self._db is not None
        found = {str(table) for name, table in self._db.execute(
            "SELECT name, tbl_name FROM main.sqlite_master WHERE type = 'trigger'")
            if str(name) in capture_trigger_names(str(table))}
        yield from sorted(found)

    def _forget_published(self, position: CapturePosition) -> None:
        """Delete published changelog rows, keeping the newest `keep_rows` for diagnosis."""
        assert self._db is not None
        last = (position.changelog_seq or 0) - self.keep_rows
        if last > 0:
            self._db.execute(f"DELETE FROM {CHANGELOG_TABLE} WHERE seq <= ?",  # noqa: S608
                             (last,))


def _epoch_ms(changed_at: str) -> int:
    moment = dt.datetime.fromisoformat(changed_at).replace(tzinfo=dt.UTC)
    return (moment - _EPOCH) // dt.timedelta(milliseconds=1)
