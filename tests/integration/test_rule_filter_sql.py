"""Row filters compiled to SQL give the rows `RowFilter.matches` gives, on SQLite and on a real
MariaDB whose text column has the usual case-insensitive, space-padding collation: examples
at the known differences, then generated rows and filters compared row by row."""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql

from tests.filter_strategies import KINDS, rows, table_filter, table_predicate
from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.rules.filter import Condition, FilterError, RowFilter, parse_filter, render
from tidesync.domain.values import Value
from tidesync.localservices import MariaDBInstance
from tidesync.target.filter_sql import column_kind, filter_clause
from tidesync.target.mysql_values import mysql_param
from tidesync.target.sqlite import sqlite_param

UTC = dt.UTC
COLUMNS = ("id", "i", "d", "f", "t", "b", "ts", "dd", "bt")
SQLITE_DDL = ("CREATE TABLE t (id INTEGER PRIMARY KEY, i BIGINT, d DECIMAL(12,2), f DOUBLE,"
              " t VARCHAR(40) COLLATE NOCASE, b BOOLEAN, ts DATETIME(6), dd DATE,"
              " bt DATETIME(6))")
MARIADB_DDL = ("CREATE TABLE t (id INT PRIMARY KEY, i BIGINT, d DECIMAL(12,2), f DOUBLE,"
               " t VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci, b BOOLEAN,"
               " ts DATETIME(6), dd DATE, bt DATETIME(6)) ENGINE=InnoDB")
TABLE = sa.Table(
    "t", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("i", sa.BigInteger), sa.Column("d", sa.Numeric(12, 2)), sa.Column("f", sa.Double),
    sa.Column("t", sa.String(40)), sa.Column("b", sa.Boolean), sa.Column("ts", sa.DateTime),
    sa.Column("dd", sa.Date), sa.Column("bt", sa.DateTime),
)


@dataclass
class FilterTable:
    """The test table on one database: load rows, then ask which ids a filter passes."""

    engine: sa.Engine
    encode: Callable[[Value], object]
    placeholder: str

    def load(self, sample: Sequence[Mapping[str, Value]]) -> None:
        marks = ", ".join([self.placeholder] * len(COLUMNS))
        with self.engine.begin() as connection:
            connection.exec_driver_sql("DELETE FROM t")
            connection.exec_driver_sql(
                f"INSERT INTO t ({', '.join(COLUMNS)}) VALUES ({marks})",
                [tuple(self.encode(row.get(name)) for name in COLUMNS) for row in sample])

    def passing(self, row_filter: RowFilter, business_time: str = "bt") -> set[int]:
        where = filter_clause(row_filter, TABLE, business_time=TABLE.c[business_time])
        with self.engine.connect() as connection:
            return set(connection.scalars(sa.select(TABLE.c.id).where(where)))


def _sqlite_table() -> Iterator[FilterTable]:
    engine = sa.create_engine("sqlite://", poolclass=sa.StaticPool)
    with engine.begin() as connection:
        connection.exec_driver_sql(SQLITE_DDL)
    yield FilterTable(engine, sqlite_param, "?")
    engine.dispose()


def _mariadb_table(instance: MariaDBInstance) -> Iterator[FilterTable]:
    database = instance.create_database(f"t_{secrets.token_hex(6)}")
    url = sa.URL.create("mysql+pymysql", username=instance.user, password=instance.password,
                        host=instance.host, port=instance.port, database=database,
                        query={"charset": "utf8mb4"})
    engine = sa.create_engine(url, poolclass=sa.StaticPool)
    with engine.begin() as connection:
        connection.exec_driver_sql(MARIADB_DDL)
    try:
        yield FilterTable(engine, mysql_param, "%s")
    finally:
        with engine.begin() as connection:
            connection.exec_driver_sql(f"DROP DATABASE `{database}`")
        engine.dispose()


@pytest.fixture(scope="module")
def sqlite_table() -> Iterator[FilterTable]:
    yield from _sqlite_table()


@pytest.fixture(scope="module")
def mariadb_table(shore_mariadb: MariaDBInstance) -> Iterator[FilterTable]:
    yield from _mariadb_table(shore_mariadb)


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.services)])
def table(request: pytest.FixtureRequest) -> FilterTable:
    return request.getfixturevalue(f"{request.param}_table")  # type: ignore[no-any-return]


def _row(id_: int, **values: Value) -> dict[str, Value]:
    return {"id": id_, **values}


def _python_passing(row_filter: RowFilter, sample: Sequence[Mapping[str, Value]],
                    business_time: str = "bt") -> set[int]:
    def moment(row: Mapping[str, Value]) -> Any:
        value = row.get(business_time)
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return dt.datetime.combine(value, dt.time(), UTC)
        return value

    return {row["id"] for row in sample  # type: ignore[misc]
            if row_filter.matches(row, moment(row))}


def _both(table: FilterTable, text: str, sample: Sequence[Mapping[str, Value]],
          business_time: str = "bt") -> set[int]:
    """The ids the database passes, after checking Python passes the same."""
    row_filter = parse_filter(text)
    table.load(sample)
    passing = table.passing(row_filter, business_time)
    assert passing == _python_passing(row_filter, sample, business_time), text
    return passing


# --- examples at the known differences ------------------------------------------------------


TEXTS = [_row(1, t="abc"), _row(2, t="ABC"), _row(3, t="abc "), _row(4, t="ab"),
         _row(5, t=None), _row(6, t="a\U0001f600c"), _row(7, t="[x]*?"), _row(8, t="!a%_\\")]


@pytest.mark.parametrize(("text", "expected"), [
    ("t = 'abc'", {1}),  # neither case nor trailing spaces are ignored
    ("t <> 'abc'", {2, 3, 4, 6, 7, 8}),
    ("t > 'abc'", {3, 6}),
    ("t IN ('ABC', 'ab', NULL)", {2, 4}),
    ("t NOT IN ('ABC', 'ab', NULL)", set()),
    ("t NOT IN ('ABC', 'ab')", {1, 3, 6, 7, 8}),
    ("t BETWEEN 'a' AND 'abc'", {1, 4}),
    ("t LIKE 'a_c'", {1, 6}),
    ("t LIKE 'A%'", {2}),
    ("t LIKE 'abc'", {1}),
    ("t NOT LIKE '%c'", {2, 3, 4, 7, 8}),
    ("t LIKE '[x]*?'", {7}),  # GLOB's special characters are literal
    ("t LIKE '!a%\\'", {8}),  # so are the MySQL escape and backslash
    ("t STARTS WITH '!a%_'", {8}),
    ("t STARTS WITH 'a_'", set()),
    ("t IS NULL", {5}),
])
def test_text_compares_by_code_point_in_every_database(table: FilterTable, text: str,
                                                      expected: set[int]):
    assert _both(table, text, TEXTS) == expected


NUMBERS = [_row(1, i=2**63 - 1, d=Decimal("0.10"), f=0.1),
           _row(2, i=-(2**63), d=Decimal("-0.00"), f=-0.0),
           _row(3, i=0, d=Decimal("9999999999.99"), f=9007199254740992.0),
           _row(4, i=None, d=None, f=None)]


@pytest.mark.parametrize(("text", "expected"), [
    ("i < 18446744073709551615", {1, 2, 3}),
    ("i >= 9223372036854775808", set()),
    ("i = 9223372036854775807", {1}),
    ("i NOT IN (0, NULL)", set()),
    ("i NOT IN (0)", {1, 2}),
    ("d = 0.1", {1}),
    ("d = 0", {2}),
    ("d > 9999999999.985", {3}),
    ("d BETWEEN -0.001 AND 0.001", {2}),
    ("f = 0.1", {1}),  # a double compares with the literal as a double
    ("f = 0", {2}),
    ("f = 9007199254740993", {3}),
    ("f < 0.30000000000000001", {1, 2}),
    ("NOT f > 1", {1, 2}),
])
def test_numbers_compare_alike_in_every_database(table: FilterTable, text: str,
                                                 expected: set[int]):
    assert _both(table, text, NUMBERS) == expected


MOMENT = dt.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
TIMES = [_row(1, ts=MOMENT, dd=dt.date(2031, 5, 6), bt=MOMENT, b=True),
         _row(2, ts=MOMENT.replace(microsecond=0), dd=dt.date(1000, 1, 1), bt=None, b=False),
         _row(3, ts=None, dd=None, bt=MOMENT + dt.timedelta(days=1), b=None)]


@pytest.mark.parametrize(("text", "expected"), [
    ("ts = TIMESTAMP '2031-05-06 07:08:09.123456'", {1}),
    ("ts > TIMESTAMP '2031-05-06 07:08:09'", {1}),
    ("ts IN (TIMESTAMP '2031-05-06 07:08:09', NULL)", {2}),
    ("dd < DATE '2031-05-06'", {2}),
    ("dd BETWEEN DATE '1000-01-01' AND DATE '2031-05-06'", {1, 2}),
    ("$business_time > TIMESTAMP '2031-05-06 07:08:09.123456'", {3}),
    ("$business_time IS NULL", {2}),
    ("b = TRUE", {1}),
    ("b <> TRUE", {2}),
    ("NOT b = FALSE", {1}),
])
def test_times_and_booleans_compare_alike_in_every_database(table: FilterTable, text: str,
                                                            expected: set[int]):
    assert _both(table, text, TIMES) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("$business_time >= TIMESTAMP '2031-05-06 00:00:00'", {1}),
    ("$business_time > TIMESTAMP '2031-05-06 00:00:00'", set()),
    ("$business_time < TIMESTAMP '1000-01-01 00:00:00.000001'", {2}),
])
def test_a_date_column_as_business_time_is_its_midnight(table: FilterTable, text: str,
                                                        expected: set[int]):
    assert _both(table, text, TIMES, business_time="dd") == expected


def test_a_filter_that_does_not_fit_the_table_is_refused():
    with pytest.raises(FilterError, match="t \\(text\\): compare it with a string literal"):
        filter_clause(parse_filter("t = 5"), TABLE)
    with pytest.raises(FilterError, match="no column nope"):
        filter_clause(parse_filter("nope = 5"), TABLE)
    with pytest.raises(FilterError, match="business time"):
        filter_clause(parse_filter("$business_time IS NULL"), TABLE)


def test_only_the_supported_dialects_compile():
    clause = filter_clause(parse_filter("t = 'a'"), TABLE)
    with pytest.raises(sa.exc.CompileError, match="MySQL, MariaDB and SQLite"):
        str(sa.select(TABLE.c.id).where(clause).compile(dialect=postgresql.dialect()))


def test_reflected_mariadb_columns_have_their_kinds(mariadb_table: FilterTable):
    reflected = sa.Table("t", sa.MetaData(), autoload_with=mariadb_table.engine)
    kinds = {column.name: column_kind(column.type) for column in reflected.columns}
    assert kinds == {"id": ColumnKind.INTEGER, "i": ColumnKind.INTEGER,
                     "d": ColumnKind.DECIMAL, "f": ColumnKind.FLOAT, "t": ColumnKind.TEXT,
                     "b": ColumnKind.BOOL, "ts": ColumnKind.DATETIME, "dd": ColumnKind.DATE,
                     "bt": ColumnKind.DATETIME}
    mariadb_table.load([*TEXTS, _row(9, b=True, t="x")])
    where = filter_clause(parse_filter("b = TRUE OR T = 'abc'"), reflected)
    with mariadb_table.engine.connect() as connection:
        assert set(connection.scalars(sa.select(reflected.c.id).where(where))) == {1, 9}


def test_sqlite_compares_even_where_its_own_defaults_would_not():
    # Without the compiled collation and GLOB, SQLite's NOCASE column and ASCII-blind LIKE
    # would pass row 2 as well.
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        connection.execute(SQLITE_DDL)
        connection.executemany("INSERT INTO t (id, t) VALUES (?, ?)", [(1, "abc"), (2, "ABC")])
        assert connection.execute("SELECT id FROM t WHERE t = 'abc'").fetchall() == [(1,), (2,)]
        assert connection.execute(
            "SELECT id FROM t WHERE t LIKE 'a%'").fetchall() == [(1,), (2,)]


# --- generated rows and filters -------------------------------------------------------------

# A comparison on each column shows a difference plainly; a tree shows NOT, AND and OR over
# UNKNOWN.
_cases = rows().flatmap(lambda sample: st.tuples(st.just(sample), st.tuples(
    *(table_predicate(sample, name) for name in KINDS), table_filter(sample))))


def _agree(table: FilterTable, case: tuple[list[dict[str, Value]], tuple[Condition, ...]],
           ) -> None:
    sample, trees = case
    table.load(sample)
    for tree in trees:
        row_filter = parse_filter(render(tree))
        assert table.passing(row_filter) == _python_passing(row_filter, sample), row_filter.text


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases)
def test_sqlite_passes_the_rows_python_passes(sqlite_table: FilterTable,
                                              case: tuple[list[dict[str, Value]],
                                                          tuple[Condition, ...]]):
    _agree(sqlite_table, case)


@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases)
def test_mariadb_passes_the_rows_python_passes(mariadb_table: FilterTable,
                                               case: tuple[list[dict[str, Value]],
                                                           tuple[Condition, ...]]):
    _agree(mariadb_table, case)
