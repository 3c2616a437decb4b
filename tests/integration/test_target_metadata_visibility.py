"""`target enable` on MariaDB leaves applications as they were: the metadata columns are
invisible (or refused on a server that cannot hide them), and the back-fill changes no business
column, not even an `ON UPDATE CURRENT_TIMESTAMP` one; the built-in capture still sees them."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.integration.capture_support import normalize_all, read_records, settings_for
from tests.integration.shore_support import run_sql
from tests.integration.test_capture_mariadb import column_types, run_until_caught_up
from tidesync.domain.change_event import Operation, Revision
from tidesync.entrypoints.cli import main as cli_main
from tidesync.localservices import MariaDBInstance
from tidesync.target.mysql_schema import (
    enable_mysql_table,
    inspect_mysql_table,
    invisible_columns_supported,
)
from tidesync.target.table_state import SchemaError, status_lines

pytestmark = pytest.mark.services

NODE = "shore-hq"
METADATA = ("_sync_revision", "_sync_origin", "_sync_event_id", "_sync_updated_at")
FILM_DDL = ("CREATE TABLE film (film_id INT PRIMARY KEY, title VARCHAR(50) NOT NULL,"
            " edits INT NOT NULL DEFAULT 0,"
            " last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"
            " ON UPDATE CURRENT_TIMESTAMP) ENGINE=InnoDB")
# Rows last touched long ago, as in a sample schema loaded years before sync was enabled.
OLD_ROWS = ("INSERT INTO film (film_id, title, last_update) VALUES"
            " (1, 'ACADEMY DINOSAUR', NOW() - INTERVAL 400 DAY),"
            " (2, 'ACE GOLDFINGER', NOW() - INTERVAL 300 DAY),"
            " (3, 'ADAPTATION HOLES', NOW() - INTERVAL 200 DAY)")
BUSINESS = "film_id, title, edits, last_update"


@pytest.fixture
def film_db(shore_mariadb: MariaDBInstance, make_mariadb_database: Any) -> str:
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, FILM_DDL, OLD_ROWS)
    return database


def _enable(instance: MariaDBInstance, database: str, table: str = "film",
            **options: Any) -> Any:
    connection = instance.connect(database)
    try:
        return enable_mysql_table(connection, database, table, NODE, **options)
    finally:
        connection.close()


def _business_rows(instance: MariaDBInstance, database: str) -> list[tuple[Any, ...]]:
    return run_sql(instance, database, f"SELECT {BUSINESS} FROM film ORDER BY film_id")


def _extra(instance: MariaDBInstance, database: str) -> dict[str, str]:
    rows = run_sql(instance, database,
                   "SELECT COLUMN_NAME, EXTRA FROM information_schema.COLUMNS"
                   f" WHERE TABLE_SCHEMA = '{database}' AND TABLE_NAME = 'film'")
    return {str(name): str(extra).upper() for name, extra in rows}


def _state(instance: MariaDBInstance, database: str, table: str = "film") -> Any:
    connection = instance.connect(database)
    try:
        with connection.cursor() as cursor:
            return inspect_mysql_table(cursor, database, table)
    finally:
        connection.close()


# --- invisible metadata ---------------------------------------------------------------------


def test_enabled_metadata_is_invisible_to_select_star_and_insert_values(shore_mariadb, film_db):
    report = _enable(shore_mariadb, film_db)
    assert any(line.startswith("added invisible columns") for line in report.actions)
    extra = _extra(shore_mariadb, film_db)
    assert all("INVISIBLE" in extra[column] for column in METADATA)
    assert not any("INVISIBLE" in extra[column] for column in BUSINESS.split(", "))

    # An application written before sync: no column list, SELECT *.
    run_sql(shore_mariadb, film_db, "INSERT INTO film VALUES (4, 'AFFAIR PREJUDICE', 0, NOW())")
    rows = run_sql(shore_mariadb, film_db, "SELECT * FROM film WHERE film_id = 4")
    assert len(rows[0]) == 4
    # Named explicitly, the columns are there and the trigger stamped the local write.
    revision, origin, event_id = run_sql(
        shore_mariadb, film_db,
        "SELECT _sync_revision, _sync_origin, _sync_event_id FROM film WHERE film_id = 4")[0]
    assert Revision.parse(revision) and origin == NODE and event_id is None
    state = _state(shore_mariadb, film_db)
    assert state.enabled and not state.visible_metadata()
    assert "  metadata columns: invisible" in status_lines(state, NODE)


def test_enabling_again_hides_metadata_an_earlier_enable_left_visible(shore_mariadb, film_db):
    _enable(shore_mariadb, film_db)
    # What an earlier release left: visible columns, NOT NULL without a default.
    run_sql(shore_mariadb, film_db, "ALTER TABLE film"
            " MODIFY COLUMN _sync_revision CHAR(36) CHARACTER SET ascii NOT NULL,"
            " MODIFY COLUMN _sync_origin VARCHAR(64) NOT NULL,"
            " MODIFY COLUMN _sync_event_id CHAR(36) CHARACTER SET ascii NULL,"
            " MODIFY COLUMN _sync_updated_at DATETIME(6) NOT NULL")
    state = _state(shore_mariadb, film_db)
    assert state.visible_metadata() == list(METADATA)
    assert any("VISIBLE" in line for line in status_lines(state, NODE))
    before = run_sql(shore_mariadb, film_db,
                     "SELECT film_id, _sync_revision, _sync_origin, _sync_updated_at FROM film")

    report = _enable(shore_mariadb, film_db)

    assert any(line.startswith("made columns _sync_revision, _sync_origin, _sync_event_id,"
                               " _sync_updated_at invisible") for line in report.actions)
    assert all("INVISIBLE" in _extra(shore_mariadb, film_db)[column] for column in METADATA)
    after = run_sql(shore_mariadb, film_db,
                    "SELECT film_id, _sync_revision, _sync_origin, _sync_updated_at FROM film")
    assert after == before  # the conversion keeps every value
    run_sql(shore_mariadb, film_db, "INSERT INTO film VALUES (4, 'AFFAIR PREJUDICE', 0, NOW())")
    # A third run has nothing left to do.
    again = _enable(shore_mariadb, film_db)
    assert not again.changed and "unchanged: metadata columns invisible" in again.actions


class _ServerSays:
    """A pymysql connection whose server reports another version."""

    def __init__(self, connection: Any, version: str) -> None:
        self._connection = connection
        self._version = version

    def cursor(self) -> Any:
        return _VersionCursor(self._connection.cursor(), self._version)

    def commit(self) -> None:
        self._connection.commit()


class _VersionCursor:
    def __init__(self, cursor: Any, version: str) -> None:
        self._cursor = cursor
        self._version = version

    def __enter__(self) -> _VersionCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def execute(self, statement: str, args: Any = None) -> int:
        if statement == "SELECT VERSION()":
            return int(self._cursor.execute("SELECT %s", (self._version,)))
        return int(self._cursor.execute(statement, args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def test_a_server_too_old_to_hide_columns_is_refused_unless_allowed(shore_mariadb, film_db):
    connection = shore_mariadb.connect(film_db)
    old = _ServerSays(connection, "10.2.44-MariaDB-log")
    try:
        with pytest.raises(SchemaError) as refused:
            enable_mysql_table(old, film_db, "film", NODE)
        assert "10.2.44-MariaDB-log" in str(refused.value)
        assert "--allow-visible-metadata" in str(refused.value)
        assert _state(shore_mariadb, film_db).missing_metadata() == list(METADATA)

        report = enable_mysql_table(old, film_db, "film", NODE, allow_visible_metadata=True)
    finally:
        connection.close()
    assert any(line.startswith("added columns") for line in report.actions)
    assert any("stay visible" in note for note in report.notes)
    state = _state(shore_mariadb, film_db)
    assert state.enabled and state.visible_metadata() == list(METADATA)
    assert len(run_sql(shore_mariadb, film_db, "SELECT * FROM film WHERE film_id = 1")[0]) == 8


def test_server_versions_that_can_hide_columns():
    assert invisible_columns_supported("10.11.19-MariaDB-0+deb12u1")
    assert invisible_columns_supported("10.3.3-MariaDB")
    assert not invisible_columns_supported("10.3.2-MariaDB")
    assert not invisible_columns_supported("5.5.5-10.2.44-MariaDB")
    assert invisible_columns_supported("8.0.23")
    assert invisible_columns_supported("8.4.2-commercial")
    assert not invisible_columns_supported("8.0.22")
    assert not invisible_columns_supported("5.7.44-log")


def test_cli_enable_refuses_nothing_here_and_status_shows_visibility(
        shore_mariadb, film_db, monkeypatch, capsys):
    for name, value in (("HOST", shore_mariadb.host), ("PORT", str(shore_mariadb.port)),
                        ("USER", shore_mariadb.user), ("NODE_ID", NODE)):
        monkeypatch.setenv(f"TIDESYNC_TARGET__{name}", value)
    assert cli_main(["target", "enable", f"{film_db}.film", "--random-revisions"]) == 0
    assert "added invisible columns" in capsys.readouterr().out
    assert cli_main(["target", "status", f"{film_db}.film"]) == 0
    assert "metadata columns: invisible" in capsys.readouterr().out


# --- a back-fill that changes no business column --------------------------------------------


def test_backfill_keeps_on_update_timestamps_and_every_business_column(shore_mariadb, film_db):
    before = _business_rows(shore_mariadb, film_db)
    report = _enable(shore_mariadb, film_db)
    assert "back-filled 3 rows with fresh revisions (last_update kept as they were)" in (
        report.actions)
    assert _business_rows(shore_mariadb, film_db) == before
    revisions = run_sql(shore_mariadb, film_db, "SELECT _sync_revision FROM film")
    assert len({Revision.parse(revision) for (revision,) in revisions}) == 3


def test_backfill_reports_an_unguarded_update_trigger_that_changes_values(
        shore_mariadb, film_db):
    run_sql(shore_mariadb, film_db, "CREATE TRIGGER film_edits BEFORE UPDATE ON film"
            " FOR EACH ROW SET NEW.edits = OLD.edits + 1")
    report = _enable(shore_mariadb, film_db)
    assert any("film_edits (BEFORE UPDATE)" in note and "CHANGED" in note
               for note in report.notes)
    assert any(note.startswith("business trigger film_edits (BEFORE UPDATE): fires again")
               for note in report.notes)


def test_backfill_leaves_a_guarded_update_trigger_quiet(shore_mariadb, film_db):
    run_sql(shore_mariadb, film_db, "CREATE TRIGGER film_edits BEFORE UPDATE ON film"
            " FOR EACH ROW IF COALESCE(@tidesync_remote_apply, 0) = 0 THEN"
            " SET NEW.edits = OLD.edits + 1; END IF")
    before = _business_rows(shore_mariadb, film_db)
    report = _enable(shore_mariadb, film_db)
    assert _business_rows(shore_mariadb, film_db) == before
    assert any(note.startswith("business trigger film_edits (BEFORE UPDATE): reads the"
                               " remote-apply flag") for note in report.notes)
    # The guard does not get in the way of local writes.
    run_sql(shore_mariadb, film_db, "UPDATE film SET title = 'ACADEMY DINO' WHERE film_id = 1")
    assert run_sql(shore_mariadb, film_db, "SELECT edits FROM film WHERE film_id = 1") == [(1,)]


# --- capture still sees invisible columns ---------------------------------------------------


def test_binlog_capture_sees_the_invisible_metadata(ship_mariadb, make_mariadb_database,
                                                    kafka_broker, tmp_path):
    database = make_mariadb_database(ship_mariadb)
    run_sql(ship_mariadb, database, FILM_DDL)
    connection = ship_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "film", "ship-1")
    finally:
        connection.close()
    assert "INVISIBLE" in _extra(ship_mariadb, database)["_sync_revision"]
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    run_until_caught_up(ship_mariadb, database, bootstrap, position, name, 9131)
    run_sql(ship_mariadb, database, "INSERT INTO film VALUES (7, 'BIRD INDEPENDENCE', 0, NOW())",
            "UPDATE film SET title = 'BIRDS' WHERE film_id = 7")
    run_until_caught_up(ship_mariadb, database, bootstrap, position, name, 9131)

    control = ship_mariadb.connect(database)
    try:
        types = column_types(control, database)
    finally:
        control.close()
    events, _ = normalize_all(read_records(bootstrap, [f"{name}.{database}.film"]),
                              settings_for({(database, "film")}, types))
    stored = run_sql(ship_mariadb, database,
                     "SELECT _sync_revision, _sync_origin FROM film WHERE film_id = 7")[0]
    assert [event.operation for event in events] == [Operation.INSERT, Operation.UPDATE]
    last = events[-1]
    assert last.after is not None and last.after["_sync_origin"] == "ship-1"
    assert last.result_revision == Revision.parse(stored[0])
    assert last.base_revision == events[0].result_revision
