"""Content-derived revisions on MariaDB: the same rows in a ship's and the shore's database get
the same revisions, an interrupted back-fill continues, and nothing of the rows changes."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.shore_support import run_sql
from tidesync.localservices import MariaDBInstance
from tidesync.target.backfill import BackfillOptions
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.target.sqlite_schema import enable_sqlite_table

KEY = b"fleet-key-for-tests-0123456789abcdef"
DDL = ("CREATE TABLE stock (site VARCHAR(8) NOT NULL, item INT NOT NULL,"
       " price DECIMAL(10, 2), counted DATETIME(3), photo VARBINARY(8), note TEXT,"
       " touched TIMESTAMP NOT NULL DEFAULT '2001-02-03 04:05:06' ON UPDATE CURRENT_TIMESTAMP,"
       " PRIMARY KEY (site, item)) ENGINE=InnoDB")
ROWS = ", ".join(
    f"('s{n % 3}', {n}, {n}.25, '2024-0{1 + n % 9}-02 10:11:12.345', X'0{n % 10}ff',"
    f" {'NULL' if n % 5 == 0 else repr(f'note {n}')}, '2001-02-03 04:05:06')"
    for n in range(1, 41))
INSERT = f"INSERT INTO stock VALUES {ROWS}"


def _enable(instance: MariaDBInstance, database: str, node: str,
            options: BackfillOptions) -> list[str]:
    connection = instance.connect(database)
    try:
        return enable_mysql_table(connection, database, "stock", node, backfill=options).actions
    finally:
        connection.close()


def _revisions(instance: MariaDBInstance, database: str) -> dict[tuple[str, int], str]:
    rows = run_sql(instance, database, "SELECT site, item, _sync_revision FROM stock")
    return {(site, item): revision for site, item, revision in rows}


@pytest.fixture
def two_sides(ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
              make_mariadb_database: Callable[[MariaDBInstance], str]) -> tuple[str, str]:
    ship, shore = make_mariadb_database(ship_mariadb), make_mariadb_database(shore_mariadb)
    run_sql(ship_mariadb, ship, DDL, INSERT)
    run_sql(shore_mariadb, shore, DDL, INSERT,
            "UPDATE stock SET price = 1.50 WHERE site = 's1' AND item = 7")
    return ship, shore


def test_identical_rows_on_ship_and_shore_get_identical_revisions(
        ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
        two_sides: tuple[str, str]) -> None:
    ship, shore = two_sides
    before = run_sql(ship_mariadb, ship, "SELECT * FROM stock ORDER BY site, item")
    _enable(ship_mariadb, ship, "ship-1", BackfillOptions(revision_key=KEY, chunk_rows=6))
    _enable(shore_mariadb, shore, "shore", BackfillOptions(revision_key=KEY))

    on_ship, on_shore = _revisions(ship_mariadb, ship), _revisions(shore_mariadb, shore)
    assert len(on_ship) == 40 and all(on_ship.values())
    assert {key for key in on_ship if on_ship[key] != on_shore[key]} == {("s1", 7)}
    # No business column changed, the ON UPDATE column included.
    assert run_sql(ship_mariadb, ship, "SELECT * FROM stock ORDER BY site, item") == before


def test_an_interrupted_backfill_continues_and_ends_as_an_uninterrupted_one(
        ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
        two_sides: tuple[str, str]) -> None:
    ship, shore = two_sides
    calls: list[tuple[int, int]] = []

    def interrupt(done: int, total: int) -> None:
        calls.append((done, total))
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _enable(ship_mariadb, ship, "ship-1",
                BackfillOptions(revision_key=KEY, chunk_rows=7, progress=interrupt))
    assert sum(1 for value in _revisions(ship_mariadb, ship).values() if value) == 21
    progress: list[tuple[int, int]] = []
    actions = _enable(ship_mariadb, ship, "ship-1", BackfillOptions(
        revision_key=KEY, chunk_rows=7, progress=lambda d, t: progress.append((d, t))))
    assert progress[-1] == (19, 19)
    assert any(action.startswith("back-filled 19 rows with content-derived revisions")
               for action in actions)
    _enable(shore_mariadb, shore, "shore", BackfillOptions(revision_key=KEY))
    on_ship, on_shore = _revisions(ship_mariadb, ship), _revisions(shore_mariadb, shore)
    assert {key for key in on_ship if on_ship[key] != on_shore[key]} == {("s1", 7)}


def test_mariadb_and_sqlite_agree_on_integer_and_text_rows(
        shore_mariadb: MariaDBInstance, make_mariadb_database: Callable[[MariaDBInstance], str],
        tmp_path: Path) -> None:
    rows: list[tuple[Any, ...]] = [(n, f"crew {n}", None if n % 3 else n * 7) for n in range(30)]
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, "CREATE TABLE stock (id BIGINT PRIMARY KEY,"
            " name VARCHAR(20) NOT NULL, rank INT NULL)")
    connection = shore_mariadb.connect(database, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO stock VALUES (%s, %s, %s)", rows)
    finally:
        connection.close()
    _enable(shore_mariadb, database, "shore", BackfillOptions(revision_key=KEY))
    path = tmp_path / "ship.sqlite"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as lite:
        lite.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, name TEXT NOT NULL, rank INT)")
        lite.executemany("INSERT INTO stock VALUES (?, ?, ?)", rows)
        enable_sqlite_table(lite, "stock", "ship-1", backfill=BackfillOptions(revision_key=KEY))
        on_sqlite = dict(lite.execute("SELECT id, _sync_revision FROM stock"))
    on_mariadb = dict(run_sql(shore_mariadb, database, "SELECT id, _sync_revision FROM stock"))
    assert on_mariadb == on_sqlite
