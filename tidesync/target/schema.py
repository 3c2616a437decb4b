"""Enabling a business table for two-way sync (§5): metadata columns, ledger, triggers, and status.

Works on MySQL/MariaDB (pymysql) and on SQLite; also reads a table's shape for the appliers.

MySQL: BEFORE INSERT / BEFORE UPDATE triggers. A local business write (the session variable
`@tidesync_remote_apply` is NULL or 0) gets a new revision (UUID()), `_sync_origin` = this node,
`_sync_event_id` = NULL and `_sync_updated_at` = UTC now, whatever the writer tried to set; a
remote apply (the applier runs `SET @tidesync_remote_apply = 1` on its session) keeps the
event's revision, origin and event id (§5.2).

SQLite: triggers cannot read session state and BEFORE triggers cannot change NEW, so a one-row
control table `_sync_session(remote_apply)` carries the flag and AFTER INSERT / AFTER UPDATE
triggers fix up local writes with an UPDATE of the row. The applier sets `remote_apply = 1` at
the start of its write transaction and back to 0 before COMMIT, so the committed value is always
0 and no other connection can ever see 1 (SQLite has one writer at a time). The fix-up UPDATE
does not fire the AFTER UPDATE trigger again as long as `PRAGMA recursive_triggers` stays off
(SQLite's default).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidesync.domain.errors import TidesyncError
from tidesync.target.contract import (
    EVENT_ID_COLUMN,
    LEDGER_TABLE,
    METADATA_COLUMNS,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)

REMOTE_APPLY_VARIABLE = "@tidesync_remote_apply"
SQLITE_SESSION_TABLE = "_sync_session"
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
"""Node ids are written into trigger text, so only these characters are allowed."""

_BACKFILL_BATCH = 10_000
_MAX_IDENTIFIER = 64


class SchemaError(TidesyncError):
    """The table cannot be enabled as it is (missing, no primary key, clashing column types)."""


# --- column types ---------------------------------------------------------------------------


class ColumnKind(enum.Enum):
    BOOL = "bool"
    INTEGER = "integer"
    FLOAT = "float"
    DECIMAL = "decimal"
    TEXT = "text"
    BYTES = "bytes"
    DATETIME = "datetime"
    DATE = "date"
    TIME = "time"
    JSON = "json"
    BITS = "bits"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ColumnType:
    """What a declared column type means for values: its kind and, where it matters, a size
    (the scale of a DECIMAL, the length of a BIT)."""

    kind: ColumnKind
    size: int | None = None


_DECLARED = re.compile(r"\s*([a-z]+(?: precision)?)\s*(?:\(([^)]*)\))?.*", re.DOTALL)
_KIND_OF_BASE: dict[str, ColumnKind] = {
    **dict.fromkeys(("bool", "boolean"), ColumnKind.BOOL),
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"),
                    ColumnKind.INTEGER),
    **dict.fromkeys(("float", "double", "real", "double precision"), ColumnKind.FLOAT),
    **dict.fromkeys(("decimal", "numeric", "dec", "fixed"), ColumnKind.DECIMAL),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum",
                     "set", "nchar", "nvarchar", "clob", "character"), ColumnKind.TEXT),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
                    ColumnKind.BYTES),
    **dict.fromkeys(("datetime", "timestamp"), ColumnKind.DATETIME),
    "date": ColumnKind.DATE,
    "time": ColumnKind.TIME,
    "json": ColumnKind.JSON,
    "bit": ColumnKind.BITS,
}


def column_type(declared: str) -> ColumnType:
    """The meaning of a declared type ("decimal(12,2)", "tinyint(1)", "bit(8)", "DATETIME(6)")."""
    match = _DECLARED.fullmatch(declared.lower())
    if match is None:
        return ColumnType(ColumnKind.OTHER)
    base, arguments = match.group(1), (match.group(2) or "").replace(" ", "")
    kind = _KIND_OF_BASE.get(base, ColumnKind.OTHER)
    numbers = [int(part) for part in arguments.split(",") if part.isdigit()]
    if base == "tinyint" and arguments == "1":
        return ColumnType(ColumnKind.BOOL)
    if kind is ColumnKind.BITS:
        length = numbers[0] if numbers else 1
        return ColumnType(ColumnKind.BOOL) if length == 1 else ColumnType(kind, length)
    if kind is ColumnKind.DECIMAL:
        if base in ("decimal", "dec", "fixed") or numbers:
            return ColumnType(kind, numbers[1] if len(numbers) > 1 else 0)
        return ColumnType(kind)  # SQLite's bare NUMERIC: no declared scale
    return ColumnType(kind)


# --- what a table looks like ----------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    """An enabled table as the appliers need it: columns (in order) with their types, the
    primary key in key order, and how its revisions are stored."""

    database: str
    table: str
    columns: Mapping[str, ColumnType]
    primary_key: tuple[str, ...]
    revision_as_bytes: bool = False

    @functools.cached_property
    def key_columns(self) -> frozenset[str]:
        return frozenset(self.primary_key)

    def column_named(self, name: str) -> str | None:
        """The table's spelling of a column name (MySQL column names ignore case)."""
        if name in self.columns:
            return name
        lowered = name.lower()
        return next((column for column in self.columns if column.lower() == lowered), None)


@dataclass
class TableState:
    """What `enable` and `status` see: the table's columns, our triggers and the ledger."""

    database: str
    table: str
    exists: bool
    columns: dict[str, str] = field(default_factory=dict)  # name → declared type
    json_columns: set[str] = field(default_factory=set)
    primary_key: tuple[str, ...] = ()
    triggers: dict[str, str] = field(default_factory=dict)  # our trigger name → its SQL text
    ledger: bool = False
    session_table: bool = True  # SQLite only: the control table exists

    def metadata_problems(self) -> list[str]:
        """Metadata columns whose declared type cannot hold what the applier writes."""
        problems = []
        for name in METADATA_COLUMNS:
            declared = self.columns.get(name)
            if declared is not None and not _metadata_type_ok(name, declared):
                problems.append(f"column {name} has type {declared}")
        return problems

    def missing_metadata(self) -> list[str]:
        return [name for name in METADATA_COLUMNS if name not in self.columns]

    def trigger_names(self) -> tuple[str, str]:
        return trigger_names(self.table)

    @property
    def enabled(self) -> bool:
        return (self.exists and bool(self.primary_key) and not self.missing_metadata()
                and not self.metadata_problems() and self.ledger and self.session_table
                and all(name in self.triggers for name in self.trigger_names()))

    def shape(self) -> TableShape:
        types = {
            name: ColumnType(ColumnKind.JSON) if name in self.json_columns else column_type(kind)
            for name, kind in self.columns.items()
        }
        revision = self.columns.get(REVISION_COLUMN, "").lower()
        return TableShape(self.database, self.table, types, self.primary_key,
                          revision_as_bytes="binary" in revision)

    def trigger_node_ids(self) -> set[str]:
        """The node ids our triggers stamp on local writes (normally exactly one)."""
        found: set[str] = set()
        for text in self.triggers.values():
            found.update(_TRIGGER_NODE.findall(text))
        return found


_TRIGGER_NODE = re.compile(rf"{ORIGIN_COLUMN}\s*=\s*'([^']*)'")


def _metadata_type_ok(name: str, declared: str) -> bool:
    kind = column_type(declared)
    lowered = declared.lower().replace(" ", "")
    if name == REVISION_COLUMN:
        return lowered.startswith(("char(36)", "binary(16)", "varchar(36)"))
    if name == EVENT_ID_COLUMN:
        return lowered.startswith(("char(36)", "varchar(36)"))
    if name == ORIGIN_COLUMN:
        return kind.kind is ColumnKind.TEXT
    return kind.kind is ColumnKind.DATETIME


def trigger_names(table: str) -> tuple[str, str]:
    """Our two trigger names for a table (kept within MySQL's 64 characters)."""
    stem = f"tidesync_{table}"
    if len(stem) + 3 > _MAX_IDENTIFIER:
        digest = hashlib.sha256(table.encode()).hexdigest()[:8]
        stem = f"{stem[:_MAX_IDENTIFIER - 3 - 9]}_{digest}"
    return f"{stem}_bi", f"{stem}_bu"


def check_node_id(node_id: str) -> str:
    if not NODE_ID_PATTERN.fullmatch(node_id):
        raise SchemaError(
            "node id must be 1-64 letters, digits, '.', '_', ':' or '-', starting alphanumeric",
        )
    return node_id


@dataclass
class EnableReport:
    """What `enable` did (or found already done), one line per step."""

    database: str
    table: str
    actions: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(not line.startswith("unchanged") for line in self.actions)


# --- MySQL ----------------------------------------------------------------------------------


def mysql_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _mysql_table(database: str, table: str) -> str:
    return f"{mysql_quote(database)}.{mysql_quote(table)}"


def inspect_mysql_table(cursor: Any, database: str, table: str) -> TableState:
    """Read a table's columns, primary key, our triggers and the ledger's presence."""
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    rows = cursor.fetchall()
    state = TableState(database, table, exists=bool(rows))
    if not rows:
        return state
    state.columns = {str(name): str(kind) for name, kind, _ in rows}
    if any(str(data_type).lower() == "longtext" for _, _, data_type in rows):
        state.json_columns = mariadb_json_columns(cursor, database, table)
    cursor.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
    )
    state.primary_key = tuple(str(name) for (name,) in cursor.fetchall())
    ours = trigger_names(table)
    cursor.execute(
        "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS"
        " WHERE TRIGGER_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s", (database, table),
    )
    state.triggers = {str(name): str(body) for name, body in cursor.fetchall() if name in ours}
    cursor.execute(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s", (database, LEDGER_TABLE),
    )
    state.ledger = cursor.fetchone()[0] > 0
    return state


_JSON_CHECK = re.compile(r"\s*json_valid\(`((?:[^`]|``)+)`\)\s*")


def mariadb_json_columns(cursor: Any, database: str, table: str) -> set[str]:
    """The table's JSON columns on MariaDB (empty on MySQL, whose JSON is a type of its own)."""
    # MariaDB's JSON is LONGTEXT with a json_valid() check; MySQL has a real JSON type and no
    # TABLE_NAME in CHECK_CONSTRAINTS.
    if "mariadb" not in str(cursor.connection.get_server_info()).lower():
        return set()
    cursor.execute(
        "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS"
        " WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s", (database, table),
    )
    found: set[str] = set()
    for (clause,) in cursor.fetchall():
        match = _JSON_CHECK.fullmatch(str(clause))
        if match:
            found.add(match.group(1).replace("``", "`"))
    return found


def mysql_trigger_body(node_id: str) -> str:
    """The body both MySQL triggers share: stamp local writes, leave remote applies alone."""
    return (
        "BEGIN\n"
        f"  IF COALESCE({REMOTE_APPLY_VARIABLE}, 0) = 0 THEN\n"
        f"    SET NEW.{REVISION_COLUMN} = UUID(), NEW.{ORIGIN_COLUMN} = '{node_id}',\n"
        f"        NEW.{EVENT_ID_COLUMN} = NULL, NEW.{UPDATED_AT_COLUMN} = UTC_TIMESTAMP(6);\n"
        "  END IF;\n"
        "END"
    )


# UUID text is ASCII: an ascii CHAR(36) is 36 bytes, where utf8mb4 reserves up to 144.
_MYSQL_METADATA_DDL = {
    REVISION_COLUMN: "CHAR(36) CHARACTER SET ascii NOT NULL",
    ORIGIN_COLUMN: "VARCHAR(64) NOT NULL",
    EVENT_ID_COLUMN: "CHAR(36) CHARACTER SET ascii NULL",
    UPDATED_AT_COLUMN: "DATETIME(6) NOT NULL",
}
_MYSQL_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " event_id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,"
    " origin_node_id VARCHAR(64) NOT NULL,"
    " table_name VARCHAR(64) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL"
    ") ENGINE=InnoDB"
)


def enable_mysql_table(connection: Any, database: str, table: str, node_id: str) -> EnableReport:
    """Make a table two-way: metadata columns, back-filled revisions, ledger, triggers.

    Idempotent: each step runs only when needed and the report says what was done.
    `connection` is a pymysql connection; DDL commits implicitly, back-fill commits per batch.
    """
    check_node_id(node_id)
    report = EnableReport(database, table)
    with connection.cursor() as cursor:
        state = _enableable_mysql_state(cursor, database, table)
        _add_mysql_columns(cursor, state, report)
        _backfill_mysql(connection, cursor, state, node_id, report)
        _create_mysql_ledger(cursor, state, report)
        _create_mysql_triggers(cursor, state, node_id, report)
    connection.commit()
    return report


def _enableable_mysql_state(cursor: Any, database: str, table: str) -> TableState:
    state = inspect_mysql_table(cursor, database, table)
    if not state.exists:
        raise SchemaError(f"table {database}.{table} does not exist")
    if not state.primary_key:
        raise SchemaError(f"table {database}.{table} has no primary key")
    problems = state.metadata_problems()
    if problems:
        raise SchemaError(f"table {database}.{table}: " + "; ".join(problems))
    return state


def _add_mysql_columns(cursor: Any, state: TableState, report: EnableReport) -> None:
    missing = state.missing_metadata()
    if not missing:
        report.actions.append("unchanged: metadata columns present")
        return
    clauses = ", ".join(f"ADD COLUMN {mysql_quote(name)} {_MYSQL_METADATA_DDL[name]}"
                        for name in missing)
    cursor.execute(f"ALTER TABLE {_mysql_table(state.database, state.table)} {clauses}")
    report.actions.append(f"added columns {', '.join(missing)}")


def _backfill_mysql(connection: Any, cursor: Any, state: TableState, node_id: str,
                    report: EnableReport) -> None:
    # Rows that existed before the columns did hold '' (or zero bytes): give each a revision.
    as_bytes = "binary" in state.columns.get(REVISION_COLUMN, "char(36)").lower()
    fresh = "UNHEX(REPLACE(UUID(), '-', ''))" if as_bytes else "UUID()"
    empty = "REPEAT(X'00', 16)" if as_bytes else "''"
    statement = (
        f"UPDATE {_mysql_table(state.database, state.table)} SET"  # noqa: S608
        f" {REVISION_COLUMN} = {fresh}, {ORIGIN_COLUMN} = %s, {EVENT_ID_COLUMN} = NULL,"
        f" {UPDATED_AT_COLUMN} = UTC_TIMESTAMP(6)"
        f" WHERE {REVISION_COLUMN} IN ({empty}, '') LIMIT {_BACKFILL_BATCH}"
    )
    total = 0
    while True:
        count = cursor.execute(statement, (node_id,))
        connection.commit()
        total += count
        if count < _BACKFILL_BATCH:
            break
    report.actions.append(f"back-filled {total} rows with fresh revisions" if total else
                          "unchanged: every row has a revision")


def _create_mysql_ledger(cursor: Any, state: TableState, report: EnableReport) -> None:
    if state.ledger:
        report.actions.append(f"unchanged: ledger {LEDGER_TABLE} present")
        return
    cursor.execute(_MYSQL_LEDGER_DDL.format(table=_mysql_table(state.database, LEDGER_TABLE)))
    report.actions.append(f"created ledger {state.database}.{LEDGER_TABLE}")


def _create_mysql_triggers(cursor: Any, state: TableState, node_id: str,
                           report: EnableReport) -> None:
    body = mysql_trigger_body(node_id)
    mariadb = "mariadb" in str(cursor.connection.get_server_info()).lower()
    for name, timing in zip(state.trigger_names(), ("INSERT", "UPDATE"), strict=True):
        existing = state.triggers.get(name)
        if existing is not None and existing.strip() == body:
            report.actions.append(f"unchanged: trigger {name}")
            continue
        qualified = f"{mysql_quote(state.database)}.{mysql_quote(name)}"
        create = (f"TRIGGER {qualified} BEFORE {timing} ON"
                  f" {_mysql_table(state.database, state.table)} FOR EACH ROW {body}")
        # MariaDB replaces a trigger atomically; MySQL needs DROP then CREATE.
        if mariadb:
            cursor.execute(f"CREATE OR REPLACE {create}")
        else:
            cursor.execute(f"DROP TRIGGER IF EXISTS {qualified}")
            cursor.execute(f"CREATE {create}")
        report.actions.append(f"{'replaced' if existing is not None else 'created'} trigger"
                              f" {name} (BEFORE {timing}, local origin {node_id})")


# --- SQLite ---------------------------------------------------------------------------------


def sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_SQLITE_UUID = (
    "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||"
    " substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) ||"
    " substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))"
)
"""A version-4 UUID as text: SQLite has no uuid() function."""
SQLITE_UTC_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

_SQLITE_METADATA_DDL = {
    REVISION_COLUMN: "CHAR(36) NOT NULL DEFAULT ''",
    ORIGIN_COLUMN: "VARCHAR(64) NOT NULL DEFAULT ''",
    EVENT_ID_COLUMN: "CHAR(36)",
    UPDATED_AT_COLUMN: "DATETIME(6) NOT NULL DEFAULT ''",
}


def inspect_sqlite_table(connection: sqlite3.Connection, table: str) -> TableState:
    """The same view of a table in the connection's main database."""
    rows = connection.execute(f"PRAGMA main.table_xinfo({sqlite_quote(table)})").fetchall()
    visible = [row for row in rows if row[6] == 0]
    state = TableState("main", table, exists=bool(visible))
    if not visible:
        return state
    state.columns = {str(row[1]): str(row[2] or "") for row in visible}
    state.primary_key = tuple(str(row[1]) for row in sorted(
        (row for row in visible if row[5] > 0), key=lambda row: int(row[5])))
    ours = trigger_names(table)
    state.triggers = {
        str(name): str(text) for name, text in connection.execute(
            "SELECT name, sql FROM main.sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
            (table,))
        if name in ours
    }
    tables = {str(name) for (name,) in connection.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN (?, ?)",
        (LEDGER_TABLE, SQLITE_SESSION_TABLE))}
    state.ledger = LEDGER_TABLE in tables
    state.session_table = SQLITE_SESSION_TABLE in tables
    return state


def sqlite_trigger_sql(table: str, primary_key: Iterable[str], node_id: str) -> tuple[str, str]:
    """CREATE TRIGGER statements (AFTER INSERT, AFTER UPDATE) that stamp local writes."""
    quoted = sqlite_quote(table)
    where = " AND ".join(f"{sqlite_quote(c)} IS NEW.{sqlite_quote(c)}" for c in primary_key)
    fix_up = (
        f"UPDATE {quoted} SET {REVISION_COLUMN} = {_SQLITE_UUID}, {ORIGIN_COLUMN} = '{node_id}',"  # noqa: S608
        f" {EVENT_ID_COLUMN} = NULL, {UPDATED_AT_COLUMN} = {SQLITE_UTC_NOW} WHERE {where};"
    )
    remote = f"(SELECT remote_apply FROM {SQLITE_SESSION_TABLE} WHERE id = 1)"  # noqa: S608
    insert_name, update_name = trigger_names(table)

    def create(name: str, timing: str) -> str:
        return (f"CREATE TRIGGER {sqlite_quote(name)} AFTER {timing} ON {quoted} FOR EACH ROW"
                f" WHEN {remote} IS NOT 1 BEGIN {fix_up} END")

    return create(insert_name, "INSERT"), create(update_name, "UPDATE")


def enable_sqlite_table(connection: sqlite3.Connection, table: str, node_id: str) -> EnableReport:
    """The SQLite twin of `enable_mysql_table`, in one transaction (SQLite has transactional DDL).

    `connection` must be in autocommit mode (isolation_level=None).
    """
    check_node_id(node_id)
    report = EnableReport("main", table)
    connection.execute("BEGIN IMMEDIATE")
    try:
        state = inspect_sqlite_table(connection, table)
        if not state.exists:
            raise SchemaError(f"table {table} does not exist")
        if not state.primary_key:
            raise SchemaError(f"table {table} has no primary key")
        if state.metadata_problems():
            raise SchemaError(f"table {table}: " + "; ".join(state.metadata_problems()))
        _sqlite_session_and_ledger(connection, state, report)
        _add_sqlite_columns(connection, state, report)
        _backfill_sqlite(connection, state, node_id, report)
        _create_sqlite_triggers(connection, state, node_id, report)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return report


def _sqlite_session_and_ledger(connection: sqlite3.Connection, state: TableState,
                               report: EnableReport) -> None:
    if state.session_table:
        report.actions.append(f"unchanged: control table {SQLITE_SESSION_TABLE} present")
    else:
        connection.execute(
            f"CREATE TABLE {SQLITE_SESSION_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1),"
            " remote_apply INTEGER NOT NULL DEFAULT 0)")
        connection.execute(f"INSERT INTO {SQLITE_SESSION_TABLE} (id, remote_apply) VALUES (1, 0)")  # noqa: S608
        report.actions.append(f"created control table {SQLITE_SESSION_TABLE}")
    if state.ledger:
        report.actions.append(f"unchanged: ledger {LEDGER_TABLE} present")
    else:
        connection.execute(
            f"CREATE TABLE {LEDGER_TABLE} (event_id CHAR(36) NOT NULL PRIMARY KEY,"
            " origin_node_id VARCHAR(64) NOT NULL, table_name VARCHAR(64) NOT NULL,"
            " applied_at DATETIME(6) NOT NULL)")
        report.actions.append(f"created ledger {LEDGER_TABLE}")


def _add_sqlite_columns(connection: sqlite3.Connection, state: TableState,
                        report: EnableReport) -> None:
    missing = state.missing_metadata()
    for name in missing:
        connection.execute(f"ALTER TABLE {sqlite_quote(state.table)} ADD COLUMN"
                           f" {name} {_SQLITE_METADATA_DDL[name]}")
    report.actions.append(f"added columns {', '.join(missing)}" if missing else
                          "unchanged: metadata columns present")


def _backfill_sqlite(connection: sqlite3.Connection, state: TableState, node_id: str,
                     report: EnableReport) -> None:
    count = connection.execute(
        f"UPDATE {sqlite_quote(state.table)} SET {REVISION_COLUMN} = {_SQLITE_UUID},"  # noqa: S608
        f" {ORIGIN_COLUMN} = ?, {EVENT_ID_COLUMN} = NULL, {UPDATED_AT_COLUMN} = {SQLITE_UTC_NOW}"
        f" WHERE {REVISION_COLUMN} = '' OR {REVISION_COLUMN} IS NULL", (node_id,),
    ).rowcount
    report.actions.append(f"back-filled {count} rows with fresh revisions" if count else
                          "unchanged: every row has a revision")


def _create_sqlite_triggers(connection: sqlite3.Connection, state: TableState, node_id: str,
                            report: EnableReport) -> None:
    for name, text in zip(state.trigger_names(),
                          sqlite_trigger_sql(state.table, state.primary_key, node_id),
                          strict=True):
        existing = state.triggers.get(name)
        if existing == text:
            report.actions.append(f"unchanged: trigger {name}")
            continue
        connection.execute(f"DROP TRIGGER IF EXISTS {sqlite_quote(name)}")
        connection.execute(text)
        report.actions.append(f"{'replaced' if existing is not None else 'created'} trigger"
                              f" {name} (local origin {node_id})")


# --- status ---------------------------------------------------------------------------------


def status_lines(state: TableState, expected_node_id: str | None = None) -> list[str]:
    """A person's view of one table's readiness, one fact per line."""
    name = f"{state.database}.{state.table}"
    if not state.exists:
        return [f"{name}: table does not exist"]
    lines = [f"{name}: {'enabled' if state.enabled else 'NOT enabled'}"]
    lines.append(f"  primary key: {', '.join(state.primary_key) or 'MISSING'}")
    for column in METADATA_COLUMNS:
        declared = state.columns.get(column)
        lines.append(f"  column {column}: {declared if declared else 'missing'}")
    lines += [f"  problem: {problem}" for problem in state.metadata_problems()]
    for trigger in state.trigger_names():
        present = "present" if trigger in state.triggers else "missing"
        lines.append(f"  trigger {trigger}: {present}")
    nodes = state.trigger_node_ids()
    if nodes:
        lines.append(f"  local writes stamped with origin: {', '.join(sorted(nodes))}")
    if expected_node_id is not None and nodes and nodes != {expected_node_id}:
        lines.append(f"  problem: triggers stamp {', '.join(sorted(nodes))},"
                     f" configured node is {expected_node_id}")
    lines.append(f"  ledger {LEDGER_TABLE}: {'present' if state.ledger else 'missing'}")
    if not state.session_table:
        lines.append(f"  control table {SQLITE_SESSION_TABLE}: missing")
    return lines
