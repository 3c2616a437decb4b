"""The SQLite target applier of the embedded default: the MySQL applier's semantics on sqlite3.

The remote-apply flag lives in the `_sync_session` control table (see `sqlite_schema`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

from tidesync.domain.change_event import Revision
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.column_kinds import ColumnKind, ColumnType
from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.target.cas import (
    CompareAndSetApplier,
    DuplicatePrimaryKey,
    ForeignKeyViolation,
    PlannedWrite,
    StatementRejected,
    delete_mark,
    key_in_table_order,
    parse_revision,
    reject_template,
)
from tidesync.target.contract import (
    LEDGER_TABLE,
    CommitOutcomeUnknown,
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
    TransientTargetError,
)
from tidesync.target.sqlite_schema import inspect_sqlite_table, sqlite_quote
from tidesync.target.table_state import SQLITE_SESSION_TABLE, TableShape, check_node_id

log = logging.getLogger(__name__)
T = TypeVar("T")

MAIN = "main"
_DATETIME_TEXT = "%Y-%m-%d %H:%M:%S.%f"
_LOOKUP_BATCH = 500

# Extended and primary result codes (sqlite3.h).
_PRIMARY_KEY = 1555
_UNIQUE = 2067
_FOREIGN_KEY = 787
_BUSY, _LOCKED, _IOERR, _FULL, _CANTOPEN, _PROTOCOL, _NOMEM, _TOOBIG, _CONSTRAINT = (
    5, 6, 10, 13, 14, 15, 7, 18, 19)
_TRANSIENT = {_BUSY: "DATABASE_BUSY", _LOCKED: "DATABASE_LOCKED", _IOERR: "IO_ERROR",
              _FULL: "DISK_FULL", _CANTOPEN: "CANNOT_OPEN", _PROTOCOL: "LOCK_PROTOCOL",
              _NOMEM: "OUT_OF_MEMORY"}


_SERVER_FAULTS = frozenset({3, 4, 8, 9, 11, 17, 26})
"""PERM, ABORT, READONLY, INTERRUPT, CORRUPT, SCHEMA, NOTADB: the file's fault, never an
event's, even when its statement meets them."""


def in_main_database(database: str, table: str) -> tuple[str, str]:
    """The default SQLite route: every source database maps to the file's main database."""
    return MAIN, table


def map_sqlite_error(error: Exception, *, during_commit: bool = False,
                     in_statement: bool = False) -> Exception:
    """The SQLite twin of `map_mysql_error` (same outcomes; messages never copy values)."""
    if isinstance(error, OverflowError):
        return StatementRejected(RejectReason.VALUE_OUT_OF_RANGE,
                                 "an integer does not fit in 64 bits")
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(error)
    if primary in _TRANSIENT:
        if during_commit and primary == _IOERR:
            return CommitOutcomeUnknown("IO_ERROR", "SQLite I/O error during COMMIT")
        return TransientTargetError(_TRANSIENT[primary], f"SQLite error {code}")
    if isinstance(error, sqlite3.IntegrityError) or primary == _CONSTRAINT:
        if code == _PRIMARY_KEY:
            return DuplicatePrimaryKey()
        if code == _UNIQUE:
            return StatementRejected(RejectReason.DUPLICATE_UNIQUE_KEY,
                                     "duplicate value in a unique index")
        if code == _FOREIGN_KEY:
            return ForeignKeyViolation(f"SQLite error {code} (a foreign key)")
        return StatementRejected(RejectReason.CONSTRAINT_VIOLATION, f"SQLite error {code}")
    if primary == _TOOBIG:
        return StatementRejected(RejectReason.DATA_TOO_LONG, "a value is too big for SQLite")
    if isinstance(error, sqlite3.ProgrammingError) and "binding parameter" in text:
        return StatementRejected(RejectReason.UNSUPPORTED_TYPE, "a value type SQLite cannot bind")
    if isinstance(error, sqlite3.OperationalError) and "no such table" in text:
        return StatementRejected(RejectReason.UNKNOWN_TABLE, "the table does not exist")
    if isinstance(error, sqlite3.OperationalError) and (
            "no such column" in text or "has no column named" in text):
        return StatementRejected(RejectReason.UNKNOWN_COLUMN, "a column does not exist")
    if in_statement and isinstance(error, sqlite3.DatabaseError) and (
            primary not in _SERVER_FAULTS):
        return StatementRejected(RejectReason.DATABASE_REFUSED, f"SQLite error {code}")
    return TargetError("DATABASE_ERROR", f"SQLite error {code} ({type(error).__name__})")


# --- values ---------------------------------------------------------------------------------


def datetime_text(value: dt.datetime) -> str:
    """A moment as the UTC text SQLite keeps in DATETIME columns."""
    return value.astimezone(dt.UTC).strftime(_DATETIME_TEXT)


_ENCODE: dict[type, Callable[[Any], object]] = {
    bool: int,
    Decimal: str,
    dt.datetime: datetime_text,
    dt.date: dt.date.isoformat,
    dt.time: dt.time.isoformat,
    JsonText: lambda value: value.text,
    BitString: lambda value: value.value,
}


def sqlite_param(value: Value) -> object:
    """A Value as sqlite3 stores it: exact text for decimals and times, integers for bits."""
    encode = _ENCODE.get(type(value))
    return value if encode is None else encode(value)


def decode_sqlite_value(value: object, column: ColumnType) -> Value:
    """A stored value as the Value its declared column type means; unparsable text stays text.

    DECIMAL columns have NUMERIC affinity, so SQLite keeps at most 15 significant digits; the
    declared scale is restored on the way out (1.50 stays 1.50).
    """
    if value is None:
        return None
    try:
        return _decode(value, column)
    except (ValueError, InvalidOperation):
        return value if isinstance(value, int | float | str | bytes) else str(value)


def _decode(value: object, column: ColumnType) -> Value:
    kind = column.kind
    if kind is ColumnKind.BOOL and isinstance(value, int):
        return bool(value)
    if kind is ColumnKind.BITS and isinstance(value, int):
        return BitString(column.size or 64, value)
    if kind is ColumnKind.DECIMAL and isinstance(value, int | float | str):
        number = Decimal(str(value))
        return number if column.size is None else number.quantize(Decimal(1).scaleb(-column.size))
    if kind is ColumnKind.FLOAT and isinstance(value, int):
        return float(value)
    if isinstance(value, str):
        if kind is ColumnKind.DATETIME:
            return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
        if kind is ColumnKind.DATE:
            return dt.date.fromisoformat(value)
        if kind is ColumnKind.TIME:
            return dt.time.fromisoformat(value)
    if kind is ColumnKind.JSON:
        return JsonText(value if isinstance(value, str) else json.dumps(value))
    if isinstance(value, int | float | str | bytes):
        return value
    return str(value)


# --- the driver boundary both SQLite appliers share ---------------------------------------


class SQLiteSession:
    """One sqlite3 connection in autocommit mode (transactions are explicit, `BEGIN
    IMMEDIATE`), opened on first use; every sqlite3 error is mapped in `_call` and nowhere
    else; the `_sync_applied` ledger. Mixed into the appliers of this package ahead of their
    applier base class."""

    _path: str
    _busy_timeout: float
    _connection: sqlite3.Connection | None
    _statements: dict[tuple[object, ...], str]

    def _open_session(self, path: str | Path, busy_timeout: float) -> None:
        self._path = str(path)
        self._busy_timeout = busy_timeout
        self._connection = None
        self._statements = {}

    def _call(self, action: Callable[[], T], *, commit: bool = False,
              statement: bool = False) -> T:
        """Run a driver call, mapping its error.

        `statement`: the call runs an event's statement (see map_sqlite_error).
        """
        try:
            return action()
        except (sqlite3.Error, OverflowError) as error:
            mapped = map_sqlite_error(error, during_commit=commit, in_statement=statement)
            if isinstance(mapped, TargetError):
                log.warning("target SQLite call failed: %s", mapped.reason_code)
            raise mapped from error

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._call(self._connect)
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=self._busy_timeout,
                                     isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _execute(self, statement: str, params: Sequence[object] = (), *,
                 for_event: bool = False) -> int:
        db = self._db()
        return self._call(lambda: db.execute(statement, params).rowcount, statement=for_event)

    def _query(self, statement: str, params: Sequence[object] = ()) -> list[Any]:
        db = self._db()
        return self._call(lambda: db.execute(statement, params).fetchall())

    def _begin(self) -> None:
        self._execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        db = self._db()
        self._call(lambda: db.execute("COMMIT"), commit=True)

    def _rollback(self) -> None:
        db = self._connection
        if db is not None and db.in_transaction:
            try:
                self._call(lambda: db.execute("ROLLBACK"))
            except TargetError:
                log.warning("rollback failed; closing the target database connection")
                self.close()

    def _ledger_holds(self, database: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        found: set[uuid.UUID] = set()
        for start in range(0, len(event_ids), _LOOKUP_BATCH):
            batch = [str(event_id) for event_id in event_ids[start:start + _LOOKUP_BATCH]]
            rows = self._query(f"SELECT event_id FROM {LEDGER_TABLE} WHERE event_id IN"  # noqa: S608
                               f" ({', '.join(['?'] * len(batch))})", batch)
            found.update(uuid.UUID(str(event_id)) for (event_id,) in rows)
        return found

    def _insert_ledger_rows(self, entries: Iterable[tuple[uuid.UUID, str, str]],
                      now: dt.datetime) -> None:
        """Ledger rows (event id, origin node, table), all applied at `now`."""
        applied_at = datetime_text(now)
        rows = [(str(event_id), origin, table, applied_at) for event_id, origin, table in entries]
        db = self._db()
        self._call(lambda: db.executemany(
            f"INSERT INTO {LEDGER_TABLE} (event_id, origin_node_id, table_name, applied_at)"  # noqa: S608
            " VALUES (?, ?, ?, ?)", rows))

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        if not event_ids or not self._query(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LEDGER_TABLE,)):
            return set()
        return self._ledger_holds(MAIN, event_ids)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


# --- the applier ----------------------------------------------------------------------------


class SQLiteTargetApplier(SQLiteSession, CompareAndSetApplier):
    """Applies change events to tables of one SQLite file enabled by `enable_sqlite_table`.

    The write transaction is `BEGIN IMMEDIATE` (the write lock up front, so two writers never
    deadlock upgrading), sets `_sync_session.remote_apply = 1` first and back to 0 just before
    COMMIT. Routes must map to the `main` database. Use from one thread at a time.
    """

    def __init__(
        self, path: str | Path, *, node_id: str, route: Route = in_main_database,
        clock: Clock = utc_now, busy_timeout: float = 10.0,
    ) -> None:
        super().__init__(check_node_id(node_id), route, clock)
        self._open_session(path, busy_timeout)

    # -- CompareAndSetApplier primitives ------------------------------------------------------

    def _inspect(self, database: str, table: str) -> TableShape | TargetOutcome:
        if database != MAIN:
            return reject_template(RejectReason.UNKNOWN_DATABASE,
                             f"SQLite targets have only the {MAIN} database")
        db = self._db()
        state = self._call(lambda: inspect_sqlite_table(db, table))
        if not state.exists:
            return reject_template(RejectReason.UNKNOWN_TABLE, f"table {table} does not exist")
        if not state.enabled:
            return reject_template(RejectReason.TABLE_NOT_ENABLED,
                             f"table {table} is not enabled for sync (tidesync target enable)")
        return state.shape()

    def _begin(self) -> None:
        super()._begin()
        self._execute(f"UPDATE {SQLITE_SESSION_TABLE} SET remote_apply = 1 WHERE id = 1")  # noqa: S608

    def _insert(self, write: PlannedWrite, now: dt.datetime) -> None:
        shape = write.shape
        key = ("insert", shape.table, write.columns)
        statement = self._statements.get(key)
        if statement is None:
            names = [*write.columns, REVISION_COLUMN, ORIGIN_COLUMN, EVENT_ID_COLUMN,
                     UPDATED_AT_COLUMN]
            statement = self._statements[key] = (
                f"INSERT INTO {sqlite_quote(shape.table)}"  # noqa: S608
                f" ({', '.join(sqlite_quote(n) for n in names)})"
                f" VALUES ({', '.join(['?'] * len(names))})")
        self._execute(statement, [*map(sqlite_param, write.values), *_metadata(write, now)],
                      for_event=True)

    def _update(self, write: PlannedWrite, now: dt.datetime) -> int:
        shape = write.shape
        key = ("update", shape.table, write.columns)
        statement = self._statements.get(key)
        if statement is None:
            assignments = "".join(f"{sqlite_quote(column)} = ?, " for column in write.columns)
            statement = self._statements[key] = (
                f"UPDATE {sqlite_quote(shape.table)} SET {assignments}{REVISION_COLUMN} = ?,"  # noqa: S608
                f" {ORIGIN_COLUMN} = ?, {EVENT_ID_COLUMN} = ?, {UPDATED_AT_COLUMN} = ?"
                f" WHERE {_key_match(shape)} AND {REVISION_COLUMN} = ?")
        assert write.base_revision is not None
        return self._execute(for_event=True, statement=statement, params=[
            *map(sqlite_param, write.values), *_metadata(write, now),
            *map(sqlite_param, write.key), _revision_param(shape, write.base_revision),
        ])

    def _delete(self, write: PlannedWrite) -> int:
        """Mark then delete (see cas.delete_mark): the mark is the compare-and-set."""
        shape = write.shape
        event = write.event
        assert event.base_revision is not None
        key = [*map(sqlite_param, write.key)]
        mark = _revision_param(shape, delete_mark(write))
        marked = self._execute(
            f"UPDATE {sqlite_quote(shape.table)} SET {REVISION_COLUMN} = ?,"  # noqa: S608
            f" {ORIGIN_COLUMN} = ?, {EVENT_ID_COLUMN} = ?, {UPDATED_AT_COLUMN} = ?"
            f" WHERE {_key_match(shape)} AND {REVISION_COLUMN} = ?",
            [mark, event.origin_node_id, str(event.event_id), datetime_text(self._clock()),
             *key, _revision_param(shape, event.base_revision)], for_event=True)
        if marked != 1:
            return 0
        self._execute(
            f"DELETE FROM {sqlite_quote(shape.table)} WHERE {_key_match(shape)}"  # noqa: S608
            f" AND {EVENT_ID_COLUMN} = ?", [*key, str(event.event_id)], for_event=True)
        return 1

    def _read_row(self, shape: TableShape,
                  key: tuple[Value, ...]) -> tuple[Mapping[str, Value] | None, Revision | None]:
        columns = ", ".join(sqlite_quote(column) for column in shape.columns)
        rows = self._query(f"SELECT {columns} FROM {sqlite_quote(shape.table)}"  # noqa: S608
                           f" WHERE {_key_match(shape)}", [sqlite_param(v) for v in key])
        if not rows:
            return None, None
        row = {name: decode_sqlite_value(raw, kind)
               for (name, kind), raw in zip(shape.columns.items(), rows[0], strict=True)}
        return row, parse_revision(row.get(REVISION_COLUMN))

    def _insert_ledger(self, database: str, writes: Sequence[PlannedWrite],
                       now: dt.datetime) -> None:
        self._insert_ledger_rows(((write.event.event_id, write.event.origin_node_id,
                             write.shape.table) for write in writes), now)

    def _commit(self) -> None:
        self._execute(f"UPDATE {SQLITE_SESSION_TABLE} SET remote_apply = 0 WHERE id = 1")  # noqa: S608
        super()._commit()

    # -- the rest of TargetApplier ------------------------------------------------------------

    def current_row(
        self, database: str, table: str, primary_key: Mapping[str, Value],
    ) -> tuple[Mapping[str, Value] | None, Revision | None]:
        target_database, target_table = self._route(database, table)
        shape = self._shape(target_database, target_table)
        if not isinstance(shape, TableShape):
            db = self._db()
            state = self._call(lambda: inspect_sqlite_table(db, target_table))
            if target_database != MAIN or not state.exists:
                return None, None
            shape = state.shape()
        return self._read_row(shape, key_in_table_order(shape, primary_key))


def _metadata(write: PlannedWrite, now: dt.datetime) -> tuple[object, ...]:
    event = write.event
    assert event.result_revision is not None
    return (_revision_param(write.shape, event.result_revision), event.origin_node_id,
            str(event.event_id), datetime_text(now))


def _revision_param(shape: TableShape, revision: Revision) -> object:
    return revision.value if shape.revision_as_bytes else revision.text


def _key_match(shape: TableShape) -> str:
    return " AND ".join(f"{sqlite_quote(column)} = ?" for column in shape.primary_key)
