"""Enabling a MySQL/MariaDB business table for two-way sync (§5): metadata columns, ledger and
triggers; also reads a table's state for `target status` and the applier.

MySQL: BEFORE INSERT / BEFORE UPDATE triggers. A local business write (the session variable
`@tidesync_remote_apply` is NULL or 0) gets a new revision (UUID()), `_sync_origin` = this node,
`_sync_event_id` = NULL and `_sync_updated_at` = UTC now, whatever the writer tried to set; a
remote apply (the applier runs `SET @tidesync_remote_apply = 1` on its session) keeps the
event's revision, origin and event id (§5.2).

The metadata columns are INVISIBLE (MariaDB 10.3.3+, MySQL 8.0.23+): `SELECT *` does not show
them and `INSERT INTO t VALUES (...)` needs no value for them, so applications written before
the table was enabled keep working. Every statement of tidesync names them explicitly.
"""

from __future__ import annotations

import re
from typing import Any

from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    METADATA_COLUMNS,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)
from tidesync.target.backfill import (
    RANDOM_REVISIONS,
    BackfillOptions,
    business_columns,
    key_after,
    key_after_params,
)
from tidesync.target.contract import LEDGER_TABLE
from tidesync.target.table_state import (
    BusinessTrigger,
    EnableReport,
    SchemaError,
    TableState,
    check_node_id,
    is_our_trigger,
    trigger_names,
)

REMOTE_APPLY_VARIABLE = "@tidesync_remote_apply"

_INVISIBLE = re.compile(r"\binvisible\b", re.IGNORECASE)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_MARIADB_INVISIBLE = (10, 3, 3)
_MYSQL_INVISIBLE = (8, 0, 23)


def mysql_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _mysql_table(database: str, table: str) -> str:
    return f"{mysql_quote(database)}.{mysql_quote(table)}"


def inspect_mysql_table(cursor: Any, database: str, table: str) -> TableState:
    """Read a table's columns (with their visibility), primary key, triggers (ours and the
    business ones) and the ledger's presence."""
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, COALESCE(GENERATION_EXPRESSION, '') <> '',"
        " COALESCE(EXTRA, '') FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    rows = cursor.fetchall()
    state = TableState(database, table, exists=bool(rows))
    if not rows:
        return state
    state.columns = {str(name): str(kind) for name, kind, _, _, _ in rows}
    state.generated_columns = {str(name) for name, _, _, generated, _ in rows if generated}
    state.invisible_columns = {str(name) for name, _, _, _, extra in rows
                               if _INVISIBLE.search(str(extra))}
    state.on_update_columns = {str(name) for name, _, _, _, extra in rows
                               if "on update" in str(extra).lower()}
    if any(str(data_type).lower() == "longtext" for _, _, data_type, _, _ in rows):
        state.json_columns = mariadb_json_columns(cursor, database, table)
    cursor.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
    )
    state.primary_key = tuple(str(name) for (name,) in cursor.fetchall())
    ours = trigger_names(table)
    cursor.execute(
        "SELECT TRIGGER_NAME, ACTION_STATEMENT, ACTION_TIMING, EVENT_MANIPULATION"
        " FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s"
        " ORDER BY EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER", (database, table),
    )
    triggers = [(str(name), str(body), str(timing).upper(), str(event).upper())
                for name, body, timing, event in cursor.fetchall()]
    state.triggers = {name: body for name, body, _, _ in triggers if name in ours}
    # A MySQL trigger cannot write the table it fires on: only a BEFORE trigger (through NEW)
    # can change the row being written.
    state.business_triggers = [
        BusinessTrigger(name, timing, event, guarded=REMOTE_APPLY_VARIABLE in body.lower(),
                        changes_row=timing == "BEFORE")
        for name, body, timing, event in triggers if not is_our_trigger(name)]
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


# The defaults are what a row holds before the triggers or the back-fill stamp it (an invisible
# NOT NULL column needs one on MariaDB). A revision of '' marks a row the back-fill must stamp.
_MYSQL_DEFAULTS = {
    REVISION_COLUMN: "''",
    ORIGIN_COLUMN: "''",
    EVENT_ID_COLUMN: "''",
    UPDATED_AT_COLUMN: "'1970-01-02 00:00:00'",
}
# UUID text is ASCII: an ascii CHAR(36) is 36 bytes, where utf8mb4 reserves up to 144.
_MYSQL_METADATA_DDL = {
    REVISION_COLUMN: "CHAR(36) CHARACTER SET ascii NOT NULL DEFAULT ''",
    ORIGIN_COLUMN: "VARCHAR(64) NOT NULL DEFAULT ''",
    EVENT_ID_COLUMN: "CHAR(36) CHARACTER SET ascii NULL",
    UPDATED_AT_COLUMN: f"DATETIME(6) NOT NULL DEFAULT {_MYSQL_DEFAULTS[UPDATED_AT_COLUMN]}",
}
_MYSQL_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " event_id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,"
    " origin_node_id VARCHAR(64) NOT NULL,"
    " table_name VARCHAR(64) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL"
    ") ENGINE=InnoDB"
)


def enable_mysql_table(connection: Any, database: str, table: str, node_id: str, *,
                       allow_visible_metadata: bool = False,
                       backfill: BackfillOptions = RANDOM_REVISIONS) -> EnableReport:
    """Make a table two-way: metadata columns (invisible), back-filled revisions, ledger,
    triggers; the report also lists the table's business triggers.

    Idempotent: each step runs only when needed and the report says what was done; visible
    metadata columns of an earlier enable are made invisible. A server that cannot hide
    columns is refused unless `allow_visible_metadata`.
    `connection` is a pymysql connection; DDL commits implicitly, the back-fill commits per
    chunk (see `tidesync.target.backfill`; `backfill` says where revisions come from).
    """
    check_node_id(node_id)
    report = EnableReport(database, table)
    with connection.cursor() as cursor:
        state = _enableable_mysql_state(cursor, database, table)
        hide = _can_hide_columns(cursor, state, allow_visible_metadata, report)
        _add_mysql_columns(cursor, state, hide, report)
        _hide_mysql_columns(cursor, state, hide, report)
        _backfill_mysql(connection, cursor, state, node_id, report, backfill)
        _create_mysql_ledger(cursor, state, report)
        _create_mysql_triggers(cursor, state, node_id, report)
    connection.commit()
    report.notes += [trigger.describe() for trigger in state.business_triggers]
    return report


def invisible_columns_supported(version: str) -> bool:
    """Whether a server of this `SELECT VERSION()` text has INVISIBLE columns."""
    lowered = version.lower()
    mariadb = "mariadb" in lowered
    if mariadb and lowered.startswith("5.5.5-"):
        lowered = lowered[len("5.5.5-"):]  # the prefix old clients were shown
    match = _VERSION.search(lowered)
    if match is None:
        return False
    number = tuple(int(part) for part in match.groups())
    return number >= (_MARIADB_INVISIBLE if mariadb else _MYSQL_INVISIBLE)


def _can_hide_columns(cursor: Any, state: TableState, allow_visible: bool,
                      report: EnableReport) -> bool:
    cursor.execute("SELECT VERSION()")
    version = str(cursor.fetchone()[0])
    if invisible_columns_supported(version):
        return True
    if not (state.missing_metadata() or state.visible_metadata()):
        return False  # nothing to hide (the columns were made invisible elsewhere)
    if not allow_visible:
        raise SchemaError(
            f"the server (version {version}) cannot hide the sync metadata columns of"
            f" {state.database}.{state.table}: INVISIBLE columns need MariaDB 10.3.3 or"
            " MySQL 8.0.23. Visible, they appear in SELECT * and make INSERT without a column"
            " list fail. Upgrade the server, or pass --allow-visible-metadata to enable the"
            " table with visible metadata columns")
    report.notes.append(f"metadata columns stay visible: server version {version} cannot"
                        " hide them (SELECT * shows them; INSERT needs a column list)")
    return False


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


def _add_mysql_columns(cursor: Any, state: TableState, hide: bool,
                       report: EnableReport) -> None:
    missing = state.missing_metadata()
    if not missing:
        report.actions.append("unchanged: metadata columns present")
        return
    invisible = " INVISIBLE" if hide else ""
    clauses = ", ".join(f"ADD COLUMN {mysql_quote(name)} {_MYSQL_METADATA_DDL[name]}{invisible}"
                        for name in missing)
    cursor.execute(f"ALTER TABLE {_mysql_table(state.database, state.table)} {clauses}")
    report.actions.append(f"added {'invisible ' if hide else ''}columns {', '.join(missing)}")


def _hide_mysql_columns(cursor: Any, state: TableState, hide: bool,
                        report: EnableReport) -> None:
    """Make the metadata columns an earlier enable left visible INVISIBLE, keeping each
    column's definition (MODIFY restates it; MariaDB wants a default for NOT NULL ones)."""
    visible = state.visible_metadata()
    if not hide or not visible:
        if hide and len(state.missing_metadata()) < len(METADATA_COLUMNS):
            report.actions.append("unchanged: metadata columns invisible")
        return
    table = _mysql_table(state.database, state.table)
    cursor.execute(f"SHOW CREATE TABLE {table}")
    create = str(cursor.fetchone()[1])
    clauses = [f"MODIFY COLUMN {_restated(create, name)} INVISIBLE" for name in visible]
    cursor.execute(f"ALTER TABLE {table} {', '.join(clauses)}")
    state.invisible_columns.update(visible)
    report.actions.append(f"made columns {', '.join(visible)} invisible (SELECT * and INSERT"
                          " without a column list no longer see them)")


_NOT_NULL = re.compile(r"\bNOT NULL\b", re.IGNORECASE)
_DEFAULT = re.compile(r"\bDEFAULT\b", re.IGNORECASE)


def _restated(create: str, column: str) -> str:
    """A column's definition as SHOW CREATE TABLE states it, with a default when it has none."""
    quoted = mysql_quote(column)
    for line in create.splitlines():
        definition = line.strip().rstrip(",")
        if definition.startswith(quoted + " "):
            if _NOT_NULL.search(definition) and not _DEFAULT.search(definition):
                definition += f" DEFAULT {_MYSQL_DEFAULTS[column]}"
            return definition
    raise SchemaError(f"column {column} not found in the definition of the table")


def _backfill_mysql(connection: Any, cursor: Any, state: TableState, node_id: str,
                    report: EnableReport, options: BackfillOptions) -> None:
    """Give each row that existed before the columns did ('' or zero bytes) a revision, a
    chunk of rows per transaction, changing no business column: `ON UPDATE` columns are set to
    themselves, and the session runs as a remote apply so business triggers guarded by the flag
    stay quiet. Rows already stamped are skipped, so a second run continues an interrupted
    one."""
    as_bytes = "binary" in state.columns.get(REVISION_COLUMN, "char(36)").lower()
    empty = "REPEAT(X'00', 16)" if as_bytes else "''"
    table = _mysql_table(state.database, state.table)
    pending = f"{REVISION_COLUMN} IN ({empty}, '')"
    cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {pending}")  # noqa: S608
    total = int(cursor.fetchone()[0])
    if not total:
        report.actions.append("unchanged: every row has a revision")
        return
    options.check_can_stamp(f"{state.database}.{state.table}", total)
    kept = sorted(state.on_update_columns - set(METADATA_COLUMNS))
    firing = [trigger for trigger in state.business_triggers_on("UPDATE")
              if not trigger.guarded]
    before = business_checksum(cursor, state) if firing else None
    cursor.execute(f"SELECT {REMOTE_APPLY_VARIABLE}")
    flag = cursor.fetchone()[0]
    cursor.execute(f"SET {REMOTE_APPLY_VARIABLE} = 1")
    try:
        done = _mysql_backfill_passes(connection, cursor, state, node_id, options,
                                      pending, total, kept, as_bytes)
    finally:
        cursor.execute(f"SET {REMOTE_APPLY_VARIABLE} = %s", (flag,))
    report.actions.append(f"back-filled {done} rows with {options.describe()}"
                          + (f" ({', '.join(kept)} kept as they were)" if kept else ""))
    if firing:
        names = ", ".join(f"{t.name} ({t.timing} {t.event})" for t in firing)
        changed = business_checksum(cursor, state) != before
        report.notes.append(
            f"the back-fill fired business triggers {names}: business columns "
            + ("CHANGED during the back-fill (by these triggers or by concurrent writes)"
               if changed else "unchanged (checksum of every business column)"))


_BACKFILL_PASSES = 3
"""Key-order passes at most: a row written behind the first pass is found by the next."""
_BACKFILL_STAMPS = "_sync_backfill_stamps"
"""The session's temporary table of a chunk's keys and revisions."""


def _mysql_backfill_passes(connection: Any, cursor: Any, state: TableState, node_id: str,
                           options: BackfillOptions, pending: str, total: int,
                           kept: list[str], as_bytes: bool) -> int:
    table = _mysql_table(state.database, state.table)
    key = [mysql_quote(name) for name in state.primary_key]
    business = business_columns(state)
    selected = ", ".join(key + [mysql_quote(name) for name in business])
    # A chunk's revisions go into a temporary table and onto the rows with one joined UPDATE:
    # a statement per row would cost a round trip per row (minutes for a million rows).
    stamps = _mysql_table(state.database, _BACKFILL_STAMPS)
    cursor.execute(f"DROP TEMPORARY TABLE IF EXISTS {stamps}")
    cursor.execute(f"CREATE TEMPORARY TABLE {stamps} SELECT {', '.join(key)},"  # noqa: S608
                   f" {REVISION_COLUMN} FROM {table} LIMIT 0")
    cursor.execute(f"ALTER TABLE {stamps} ADD PRIMARY KEY ({', '.join(key)})")
    insert = (f"INSERT INTO {stamps} ({', '.join(key)}, {REVISION_COLUMN})"  # noqa: S608
              f" VALUES ({', '.join(['%s'] * (len(key) + 1))})")
    keep = "".join(f", t.{name} = t.{name}" for name in map(mysql_quote, kept))
    joined = " AND ".join(f"t.{name} = s.{name}" for name in key)
    update = (f"UPDATE {table} AS t JOIN {stamps} AS s ON {joined}"  # noqa: S608
              f" SET t.{REVISION_COLUMN} = s.{REVISION_COLUMN}, t.{ORIGIN_COLUMN} = %s,"
              f" t.{EVENT_ID_COLUMN} = NULL, t.{UPDATED_AT_COLUMN} = UTC_TIMESTAMP(6){keep}"
              f" WHERE t.{pending}")
    width = len(key)
    done = 0
    try:
        for _ in range(_BACKFILL_PASSES):
            last: tuple[object, ...] | None = None
            found = 0
            while True:
                after = "" if last is None else f" AND {key_after(key, '%s')}"
                cursor.execute(
                    f"SELECT {selected} FROM {table} WHERE {pending}{after}"  # noqa: S608
                    f" ORDER BY {', '.join(key)} LIMIT {options.chunk_rows}",
                    () if last is None else key_after_params(last))
                rows = cursor.fetchall()
                if not rows:
                    break
                params = []
                for row in rows:
                    revision = options.revision(
                        list(zip(state.primary_key, row[:width], strict=True)),
                        list(zip(business, row[width:], strict=True)))
                    params.append((*row[:width], revision.value if as_bytes else revision.text))
                cursor.execute(f"DELETE FROM {stamps}")  # noqa: S608
                cursor.executemany(insert, params)
                done += cursor.execute(update, (node_id,)) or 0
                connection.commit()
                found += len(rows)
                last = tuple(rows[-1][:width])
                options.progress(done, max(total, done))
            if not found:
                break
    finally:
        cursor.execute(f"DROP TEMPORARY TABLE IF EXISTS {stamps}")
    return done


def business_checksum(cursor: Any, state: TableState) -> tuple[int, int]:
    """Row count and a checksum of every business column of the table (not its values)."""
    columns = [name for name in state.columns if name not in METADATA_COLUMNS]
    row = f"CRC32(CONCAT_WS(',', {', '.join(f'QUOTE({mysql_quote(c)})' for c in columns)}))"
    cursor.execute(f"SELECT COUNT(*), COALESCE(SUM({row}), 0) + COALESCE(BIT_XOR({row}), 0)"  # noqa: S608
                   f" FROM {_mysql_table(state.database, state.table)}")
    count, digest = cursor.fetchone()
    return int(count), int(digest)


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
