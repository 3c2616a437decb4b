"""Enabling a SQLite business table for two-way sync (§5): metadata columns, ledger and triggers;
also reads a table's state for `target status` and the applier.

SQLite: triggers cannot read session state and BEFORE triggers cannot change NEW, so a one-row
control table `_sync_session(remote_apply)` carries the flag and AFTER INSERT / AFTER UPDATE
triggers fix up local writes with an UPDATE of the row. The applier sets `remote_apply = 1` at
the start of its write transaction and back to 0 before COMMIT, so the committed value is always
0 and no other connection can ever see 1 (SQLite has one writer at a time). The fix-up UPDATE
does not fire the AFTER UPDATE trigger again as long as `PRAGMA recursive_triggers` stays off
(SQLite's default).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)
from tidesync.target.contract import LEDGER_TABLE
from tidesync.target.table_state import (
    SQLITE_SESSION_TABLE,
    EnableReport,
    SchemaError,
    TableState,
    check_node_id,
    trigger_names,
)


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
    # table_xinfo marks generated columns hidden 2 (virtual) or 3 (stored).
    state.generated_columns = {str(row[1]) for row in rows if row[6] in (2, 3)}
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
