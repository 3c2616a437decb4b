"""Enabling a MySQL/MariaDB business table for two-way sync (§5): metadata columns, ledger and
triggers; also reads a table's state for `target status` and the applier.

MySQL: BEFORE INSERT / BEFORE UPDATE triggers. A local business write (the session variable
`@tidesync_remote_apply` is NULL or 0) gets a new revision (UUID()), `_sync_origin` = this node,
`_sync_event_id` = NULL and `_sync_updated_at` = UTC now, whatever the writer tried to set; a
remote apply (the applier runs `SET @tidesync_remote_apply = 1` on its session) keeps the
event's revision, origin and event id (§5.2).
"""

from __future__ import annotations

import re
from typing import Any

from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)
from tidesync.target.contract import LEDGER_TABLE
from tidesync.target.table_state import (
    EnableReport,
    SchemaError,
    TableState,
    check_node_id,
    trigger_names,
)

REMOTE_APPLY_VARIABLE = "@tidesync_remote_apply"

_BACKFILL_BATCH = 10_000


def mysql_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _mysql_table(database: str, table: str) -> str:
    return f"{mysql_quote(database)}.{mysql_quote(table)}"


def inspect_mysql_table(cursor: Any, database: str, table: str) -> TableState:
    """Read a table's columns, primary key, our triggers and the ledger's presence."""
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, COALESCE(GENERATION_EXPRESSION, '') <> ''"
        " FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    rows = cursor.fetchall()
    state = TableState(database, table, exists=bool(rows))
    if not rows:
        return state
    state.columns = {str(name): str(kind) for name, kind, _, _ in rows}
    state.generated_columns = {str(name) for name, _, _, generated in rows if generated}
    if any(str(data_type).lower() == "longtext" for _, _, data_type, _ in rows):
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
