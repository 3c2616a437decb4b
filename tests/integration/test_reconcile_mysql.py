"""Digests on MariaDB: the same rows give the same digests as on SQLite, range by range, and a
reconciliation between two MariaDB databases finds exactly the rows that differ."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import sqlalchemy as sa

from tests.integration.shore_support import run_sql
from tidesync.domain.rules.filter import parse_filter
from tidesync.localservices import MariaDBInstance
from tidesync.target import digests, reconciliation
from tidesync.target.backfill import BackfillOptions
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.target.sqlite_schema import enable_sqlite_table

KEY = b"m" * 32
NOW = dt.datetime.now(dt.UTC)
ROWS = [(n % 5, f"item-{n:04d}", n * 2) for n in range(1_500)]


def _mariadb(instance: MariaDBInstance, database: str,
             rows: list[tuple[int, str, int]]) -> None:
    run_sql(instance, database, "CREATE TABLE stock (site INT NOT NULL, item VARCHAR(20) NOT NULL,"
            " qty INT, PRIMARY KEY (site, item)) ENGINE=InnoDB")
    connection = instance.connect(database)
    try:
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO stock VALUES (%s, %s, %s)", rows)
        connection.commit()
        enable_mysql_table(connection, database, "stock", "node",
                           backfill=BackfillOptions(revision_key=KEY))
    finally:
        connection.close()


@contextlib.contextmanager
def _mariadb_side(instance: MariaDBInstance, database: str, row_filter: str | None = None,
                  ) -> Iterator[tuple[sa.Connection, digests.DigestTable]]:
    url = sa.URL.create("mysql+pymysql", username=instance.user, password=instance.password,
                        host=instance.host, port=instance.port, database=database,
                        query={"charset": "utf8mb4"})
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with engine.connect() as connection:
        yield connection, digests.digest_table(
            connection, "stock", database=database,
            row_filter=parse_filter(row_filter) if row_filter else None)
    engine.dispose()


@contextlib.contextmanager
def _sqlite_side(path: Path, row_filter: str | None = None,
                 ) -> Iterator[tuple[sa.Connection, digests.DigestTable]]:
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.NullPool)
    with engine.connect() as connection:
        digests.prepare_connection(connection)
        yield connection, digests.digest_table(
            connection, "stock", row_filter=parse_filter(row_filter) if row_filter else None)
    engine.dispose()


def _sqlite(path: Path, rows: list[tuple[int, str, int]]) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE stock (site INTEGER NOT NULL, item TEXT NOT NULL,"
                           " qty INT, PRIMARY KEY (site, item))")
        connection.execute("BEGIN")
        connection.executemany("INSERT INTO stock VALUES (?, ?, ?)", rows)
        connection.execute("COMMIT")
        enable_sqlite_table(connection, "stock", "node",
                            backfill=BackfillOptions(revision_key=KEY))


def test_mariadb_and_sqlite_give_the_same_digests_and_splits(
        shore_mariadb: MariaDBInstance, make_mariadb_database: Callable[[MariaDBInstance], str],
        tmp_path: Path) -> None:
    database = make_mariadb_database(shore_mariadb)
    _mariadb(shore_mariadb, database, ROWS)
    _sqlite(tmp_path / "ship.sqlite", ROWS)
    with _mariadb_side(shore_mariadb, database, "qty > 100") as (maria, maria_table), \
            _sqlite_side(tmp_path / "ship.sqlite", "qty > 100") as (lite, lite_table):
        whole = digests.KeyRange()
        (on_maria,) = digests.range_digests(maria, maria_table, [whole])
        (on_lite,) = digests.range_digests(lite, lite_table, [whole])
        assert on_maria == on_lite and on_maria.count == sum(1 for r in ROWS if r[2] > 100)
        parts = digests.split_range(maria, maria_table, whole, on_maria.count, 7)
        assert parts == digests.split_range(lite, lite_table, whole, on_lite.count, 7)
        assert digests.range_digests(maria, maria_table, parts) == digests.range_digests(
            lite, lite_table, parts)
        assert digests.range_rows(maria, maria_table, parts[3]) == digests.range_rows(
            lite, lite_table, parts[3])
        result = reconciliation.reconcile_locally((maria, maria_table), (lite, lite_table),
                                                  "rule:r", NOW)
    assert result.differing == () and result.round == 2


def test_two_mariadb_sides_find_the_differing_keys(
        ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
        make_mariadb_database: Callable[[MariaDBInstance], str]) -> None:
    ship, shore = make_mariadb_database(ship_mariadb), make_mariadb_database(shore_mariadb)
    changed = {(row[0], row[1]) for row in ROWS[::97]}
    _mariadb(ship_mariadb, ship, [*ROWS, (9, "ship-only", 1)])
    _mariadb(shore_mariadb, shore, [(site, item, qty + 1 if (site, item) in changed else qty)
                                    for site, item, qty in ROWS[1:]])
    with _mariadb_side(ship_mariadb, ship) as on_ship, \
            _mariadb_side(shore_mariadb, shore) as on_shore:
        result = reconciliation.reconcile_locally(on_shore, on_ship, "table:db.stock", NOW)
        reconciliation.record_result(on_shore[0], shore, result, NOW)
        (kept,) = reconciliation.last_results(on_shore[0], shore)
    expected = changed | {(9, "ship-only"), (ROWS[0][0], ROWS[0][1])}
    assert set(result.differing) == expected
    assert kept.differing == len(expected) and kept.subject == "table:db.stock"
