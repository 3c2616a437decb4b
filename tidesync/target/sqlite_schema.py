"""Enabling a SQLite business table for two-way sync (§5): metadata columns, ledger and triggers;
also reads a table's state for `target status` and the applier.

SQLite: triggers cannot read session state and BEFORE triggers cannot change NEW, so a one-row
control table `_sync_session(remote_apply)` carries the flag and AFTER INSERT / AFTER UPDATE
triggers fix up local writes with an UPDATE of the row. The applier sets `remote_apply = 1` at
the start of its write transaction and back to 0 before COMMIT, so the committed value is always
0 and no other connection can ever see 1 (SQLite has one writer at a time). The fix-up UPDATE
does not fire the AFTER UPDATE trigger again as long as `PRAGMA recursive_triggers` stays off
(SQLite's default).

SQLite has no invisible columns: the metadata columns stay visible to `SELECT *`, and an
`INSERT` must name its columns.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
from collections.abc import Iterable, Iterator

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
    SQLITE_SESSION_TABLE,
    BusinessTrigger,
    EnableReport,
    SchemaError,
    TableState,
    check_node_id,
    is_our_trigger,
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
    state = TableState("main", table, exists=bool(visible), can_hide_columns=False)
    if not visible:
        return state
    state.columns = {str(row[1]): str(row[2] or "") for row in visible}
    # table_xinfo marks generated columns hidden 2 (virtual) or 3 (stored).
    state.generated_columns = {str(row[1]) for row in rows if row[6] in (2, 3)}
    state.primary_key = tuple(str(row[1]) for row in sorted(
        (row for row in visible if row[5] > 0), key=lambda row: int(row[5])))
    ours = trigger_names(table)
    triggers = [(str(name), str(text)) for name, text in connection.execute(
        "SELECT name, sql FROM main.sqlite_master WHERE type = 'trigger' AND tbl_name = ?"
        " ORDER BY name", (table,))]
    state.triggers = {name: text for name, text in triggers if name in ours}
    state.business_triggers = [_business_trigger(name, text) for name, text in triggers
                               if not is_our_trigger(name)]
    tables = {str(name) for (name,) in connection.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN (?, ?)",
        (LEDGER_TABLE, SQLITE_SESSION_TABLE))}
    state.ledger = LEDGER_TABLE in tables
    state.session_table = SQLITE_SESSION_TABLE in tables
    return state


_TRIGGER_HEAD = re.compile(
    r"\s*CREATE\s+(?:TEMP\s+|TEMPORARY\s+)?TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?:\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|\S+?)\s*"
    r"(?:\.\s*(?:\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|\S+?)\s*)?"
    r"(BEFORE|AFTER|INSTEAD\s+OF)?\s*(DELETE|INSERT|UPDATE)\b", re.IGNORECASE)


def _business_trigger(name: str, text: str) -> BusinessTrigger:
    """A business trigger as its CREATE TRIGGER text declares it (BEFORE when unsaid)."""
    match = _TRIGGER_HEAD.match(text)
    timing = " ".join((match.group(1) or "BEFORE").upper().split()) if match else "?"
    event = match.group(2).upper() if match else "?"
    # A SQLite trigger of either timing can UPDATE the row being written.
    return BusinessTrigger(name, timing, event, guarded=SQLITE_SESSION_TABLE in text,
                           changes_row=True)


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


def enable_sqlite_table(connection: sqlite3.Connection, table: str, node_id: str, *,
                        backfill: BackfillOptions = RANDOM_REVISIONS) -> EnableReport:
    """The SQLite twin of `enable_mysql_table`: the schema in one transaction (SQLite has
    transactional DDL), then the back-fill a chunk per transaction, then the triggers.

    `connection` must be in autocommit mode (isolation_level=None).
    """
    check_node_id(node_id)
    report = EnableReport("main", table)
    with _transaction(connection):
        state = inspect_sqlite_table(connection, table)
        if not state.exists:
            raise SchemaError(f"table {table} does not exist")
        if not state.primary_key:
            raise SchemaError(f"table {table} has no primary key")
        if state.metadata_problems():
            raise SchemaError(f"table {table}: " + "; ".join(state.metadata_problems()))
        _sqlite_session_and_ledger(connection, state, report)
        _add_sqlite_columns(connection, state, report)
    _backfill_sqlite(connection, state, node_id, report, backfill)
    with _transaction(connection):
        _create_sqlite_triggers(connection, state, node_id, report)
    report.notes.append("metadata columns stay visible: SQLite cannot hide columns"
                        " (SELECT * shows them; INSERT needs a column list)")
    report.notes += [trigger.describe() for trigger in state.business_triggers]
    return report


@contextlib.contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


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
                     report: EnableReport, options: BackfillOptions) -> None:
    """Stamp rows without a revision, a chunk per transaction, as a remote apply: business
    triggers guarded by the control table's flag (and ours, on a second enable) leave the rows
    alone. Rows already stamped are skipped, so a second run continues an interrupted one."""
    table = sqlite_quote(state.table)
    pending = f"({REVISION_COLUMN} = '' OR {REVISION_COLUMN} IS NULL)"
    total = int(connection.execute(
        f"SELECT COUNT(*) FROM {table} WHERE {pending}").fetchone()[0])  # noqa: S608
    if not total:
        report.actions.append("unchanged: every row has a revision")
        return
    options.check_can_stamp(state.table, total)
    firing = [trigger for trigger in state.business_triggers_on("UPDATE") if not trigger.guarded]
    before = _business_checksum(connection, state) if firing else None
    key = [sqlite_quote(name) for name in state.primary_key]
    business = business_columns(state)
    selected = ", ".join(key + [sqlite_quote(name) for name in business])
    update = (f"UPDATE {table} SET {REVISION_COLUMN} = ?, {ORIGIN_COLUMN} = ?,"  # noqa: S608
              f" {EVENT_ID_COLUMN} = NULL, {UPDATED_AT_COLUMN} = {SQLITE_UTC_NOW}"
              f" WHERE {' AND '.join(f'{name} IS ?' for name in key)} AND {pending}")
    width = len(key)
    done = 0
    last: tuple[object, ...] | None = None
    while True:
        after = "" if last is None else f" AND {key_after(key, '?')}"
        rows = connection.execute(
            f"SELECT {selected} FROM {table} WHERE {pending}{after}"  # noqa: S608
            f" ORDER BY {', '.join(key)} LIMIT {options.chunk_rows}",
            () if last is None else key_after_params(last)).fetchall()
        if not rows:
            break
        params = [(options.revision(list(zip(state.primary_key, row[:width], strict=True)),
                                    list(zip(business, row[width:], strict=True))).text,
                   node_id, *row[:width]) for row in rows]
        with _transaction(connection):
            connection.execute(f"UPDATE {SQLITE_SESSION_TABLE} SET remote_apply = 1"  # noqa: S608
                               " WHERE id = 1")
            done += connection.executemany(update, params).rowcount
            connection.execute(f"UPDATE {SQLITE_SESSION_TABLE} SET remote_apply = 0"  # noqa: S608
                               " WHERE id = 1")
        last = tuple(rows[-1][:width])
        options.progress(done, max(total, done))
    report.actions.append(f"back-filled {done} rows with {options.describe()}")
    if firing and done:
        names = ", ".join(f"{t.name} ({t.timing} {t.event})" for t in firing)
        changed = _business_checksum(connection, state) != before
        report.notes.append(
            f"the back-fill fired business triggers {names}: business columns "
            + ("CHANGED during the back-fill" if changed
               else "unchanged (checksum of every business column)"))


def _business_checksum(connection: sqlite3.Connection, state: TableState) -> int:
    """A hash of every business column of every row (in key order), never the values."""
    columns = [name for name in state.columns if name not in METADATA_COLUMNS]
    order = ", ".join(sqlite_quote(name) for name in state.primary_key)
    digest = hashlib.sha256()
    for row in connection.execute(
            f"SELECT {', '.join(f'quote({sqlite_quote(c)})' for c in columns)}"  # noqa: S608
            f" FROM {sqlite_quote(state.table)} ORDER BY {order}"):
        digest.update(repr(row).encode())
    return int.from_bytes(digest.digest()[:8], "big")


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
