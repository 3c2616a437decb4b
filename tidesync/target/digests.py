"""Key-range digests of an enabled table, computed in the database (SQLAlchemy Core; MySQL,
MariaDB and SQLite give the same numbers for the same rows).

A row's hash covers its primary key and its revision: rows that sync made equal carry equal
revisions (content-derived ones at `target enable`, the event's revision on every apply), so
equal hashes mean equal rows without reading a business column. The text hashed is
`len:key1,len:key2,…|revision` (each key column as text with its length in characters, the
revision as 32 lower-case hex digits whether stored as UUID text or 16 bytes); the hash is the
MD5 of that text, read as two 32-bit numbers. A range's digest is its row count and the two
sums of those numbers: order does not matter, and a 32-bit number summed over fewer than 2^31
rows fits SQLite's 64-bit integers exactly.

MySQL computes MD5 itself; on SQLite `prepare_connection` registers a deterministic function
that does the same. The rule's filter is pushed down as a WHERE (`filter_sql.filter_clause`).

Ranges are half-open intervals of the primary key (`lower` ≤ key < `upper`, None for
unbounded) compared column by column in each database's own order. Both sides therefore agree
on what a range holds when their key columns sort the same way: integer keys always, text keys
when both use the same collation (MySQL's case-insensitive collations do not sort as SQLite).
Key values agree as text for integers and text; other key types are compared within one kind
of database.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.filter import RowFilter
from tidesync.domain.sync_columns import REVISION_COLUMN
from tidesync.domain.values import Value
from tidesync.target.filter_sql import filter_clause

Key = tuple[Value, ...]

MAX_FAN_OUT = 256
_RANGES_PER_QUERY = 64
"""Ranges one digest query covers (SQLite takes at most 500 SELECTs in one statement)."""
_SQLITE_FUNCTION = "tidesync_md5_part"
_MD5_PARTS = ((1, 8), (9, 8))
"""The two 32-bit numbers a row hash is read as: MD5 hex digits 1-8 and 9-16."""


class DigestError(TidesyncError):
    """The table cannot be digested (missing, no primary key, not enabled, bad filter)."""

    code = ErrorCode.SCHEMA_INVALID


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Primary keys from `lower` (included) to `upper` (excluded); None: unbounded."""

    lower: Key | None = None
    upper: Key | None = None


@dataclass(frozen=True, slots=True)
class RangeDigest:
    """What one side holds in a range: its row count and the digest of its rows."""

    key_range: KeyRange
    count: int
    digest: str

    def same_rows(self, other: RangeDigest) -> bool:
        return self.count == other.count and self.digest == other.digest


@dataclass(frozen=True, slots=True)
class RowHash:
    """One row of a small range: its key and the hash of key + revision (no business value)."""

    key: Key
    hash: str


@dataclass(frozen=True)
class DigestTable:
    """An enabled table as the digests read it, with the rule's filter when there is one."""

    table: sa.Table
    key: tuple[sa.Column[Any], ...]
    revision: sa.Column[Any]
    where: sa.ColumnElement[bool] | None = None

    @property
    def name(self) -> str:
        return f"{self.table.schema}.{self.table.name}" if self.table.schema else self.table.name


def prepare_connection(connection: sa.Connection) -> None:
    """Register the row-hash function on a SQLite connection (nothing to do on MySQL)."""
    if connection.dialect.name != "sqlite":
        return
    raw = connection.connection.driver_connection
    if isinstance(raw, sqlite3.Connection):
        raw.create_function(_SQLITE_FUNCTION, 3, _md5_part, deterministic=True)


def _md5_part(text: object, start: int, length: int) -> int | None:
    if text is None:
        return None
    data = text if isinstance(text, bytes) else str(text).encode()
    digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
    return int(digest[start - 1:start - 1 + length], 16)


def digest_table(connection: sa.Connection, table: str, *, database: str | None = None,
                 row_filter: RowFilter | None = None) -> DigestTable:
    """Reflect an enabled table (its primary key and revision column) for digesting.

    `database` is the MySQL schema (None on SQLite). DigestError when the table is missing,
    has no primary key or no revision column, or the filter does not fit it.
    """
    try:
        reflected = sa.Table(table, sa.MetaData(), schema=database, autoload_with=connection)
    except sa.exc.NoSuchTableError as error:
        raise DigestError(f"table {database + '.' if database else ''}{table} does not"
                          " exist") from error
    key = tuple(reflected.primary_key.columns)
    if not key:
        raise DigestError(f"table {table} has no primary key")
    if REVISION_COLUMN not in reflected.c:
        raise DigestError(f"table {table} is not enabled (no {REVISION_COLUMN} column):"
                          " run `tidesync target enable` first")
    where = None
    if row_filter is not None:
        try:
            where = filter_clause(row_filter, reflected)
        except TidesyncError as error:
            raise DigestError(str(error)) from error
    return DigestTable(reflected, key, reflected.c[REVISION_COLUMN], where)


# --- the SQL -----------------------------------------------------------------------------------


class _Md5Part(FunctionElement[int]):
    """(text, start, length): hex digits start..start+length-1 of MD5(text) as a number."""

    type = sa.BigInteger()
    inherit_cache = True
    name = "md5_part"


@compiles(_Md5Part, "mysql")
@compiles(_Md5Part, "mariadb")
def _md5_part_mysql(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    text, start, length = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CAST(CONV(SUBSTRING(MD5({text}), {start}, {length}), 16, 10) AS UNSIGNED)"


@compiles(_Md5Part, "sqlite")
def _md5_part_sqlite(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    text, start, length = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"{_SQLITE_FUNCTION}({text}, {start}, {length})"


@compiles(_Md5Part)
def _md5_part_other(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    raise sa.exc.CompileError("digests compute on MySQL, MariaDB and SQLite only")


def _as_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    return sa.cast(column, sa.String())


def _row_text(source: DigestTable) -> sa.ColumnElement[str]:
    parts: list[sa.ColumnElement[Any]] = []
    for index, column in enumerate(source.key):
        text = _as_text(column)
        if index:
            parts.append(sa.literal(","))
        parts += [_as_text(_CharLength(text)), sa.literal(":"), text]
    revision = source.revision
    if isinstance(revision.type, sa.LargeBinary | sa.types.BINARY | sa.types.VARBINARY):
        revision_hex: sa.ColumnElement[Any] = sa.func.lower(sa.func.hex(revision))
    else:
        revision_hex = sa.func.lower(sa.func.replace(revision, "-", ""))
    parts += [sa.literal("|"), revision_hex]
    return _concat(parts)


class _CharLength(FunctionElement[int]):
    type = sa.Integer()
    inherit_cache = True
    name = "char_length_text"


@compiles(_CharLength, "mysql")
@compiles(_CharLength, "mariadb")
def _char_length_mysql(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CHAR_LENGTH({text})"


@compiles(_CharLength, "sqlite")
def _char_length_sqlite(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"length({text})"


def _concat(parts: Sequence[sa.ColumnElement[Any]]) -> sa.ColumnElement[str]:
    joined = _as_text(parts[0])
    for part in parts[1:]:
        joined = joined.concat(part)
    return joined


def _hash_parts(source: DigestTable) -> tuple[sa.ColumnElement[int], sa.ColumnElement[int]]:
    text = _row_text(source)
    high, low = (_Md5Part(text, sa.literal_column(str(start)), sa.literal_column(str(length)))
                 for start, length in _MD5_PARTS)
    return high, low


def _bound(value: Value) -> object:
    """A key value as the drivers bind it (MySQL DATETIME columns hold naive UTC)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _key_after(columns: Sequence[sa.ColumnElement[Any]], key: Key,
               inclusive: bool) -> sa.ColumnElement[bool]:
    """Rows whose key sorts after `key` (or equals it when `inclusive`), as `(a > x) OR (a = x
    AND b > y) …`, which MySQL and SQLite both read as an index range."""
    if len(key) != len(columns):
        raise DigestError(f"a range bound has {len(key)} values; the key has {len(columns)}")
    terms = []
    for index, column in enumerate(columns):
        equal = [columns[i] == _bound(key[i]) for i in range(index)]
        last = index == len(columns) - 1
        compare = column >= _bound(key[index]) if (last and inclusive) else (
            column > _bound(key[index]))
        terms.append(sa.and_(*equal, compare))
    return sa.or_(*terms)


def _in_range(source: DigestTable, key_range: KeyRange) -> sa.ColumnElement[bool]:
    conditions: list[sa.ColumnElement[bool]] = []
    if source.where is not None:
        conditions.append(source.where)
    if key_range.lower is not None:
        conditions.append(_key_after(source.key, key_range.lower, inclusive=True))
    if key_range.upper is not None:
        conditions.append(sa.not_(_key_after(source.key, key_range.upper, inclusive=True)))
    return sa.and_(sa.true(), *conditions)


# --- what the callers use ----------------------------------------------------------------------


def range_digests(connection: sa.Connection, source: DigestTable,
                  ranges: Sequence[KeyRange]) -> list[RangeDigest]:
    """The count and digest of each range: one query per `_RANGES_PER_QUERY` ranges (a
    UNION ALL of one aggregate per range), so a fan-out costs one round trip, not one each."""
    high, low = _hash_parts(source)
    found = []
    for start in range(0, len(ranges), _RANGES_PER_QUERY):
        part = ranges[start:start + _RANGES_PER_QUERY]
        selects: list[sa.Select[Any, int, int, int]] = [
            sa.select(sa.literal_column(str(index)), sa.func.count(), sa.func.sum(high),
                      sa.func.sum(low)).select_from(source.table).where(
                          _in_range(source, key_range))
            for index, key_range in enumerate(part)]
        statement: sa.Executable = selects[0] if len(selects) == 1 else sa.union_all(*selects)
        rows = {int(row[0]): row[1:] for row in connection.execute(statement)}
        for index, key_range in enumerate(part):
            count, high_sum, low_sum = rows[index]
            found.append(RangeDigest(key_range, int(count),
                                     f"{int(high_sum or 0):x}.{int(low_sum or 0):x}"))
    return found


def split_range(connection: sa.Connection, source: DigestTable, key_range: KeyRange,
                count: int, parts: int) -> list[KeyRange]:
    """`key_range` cut into about `parts` ranges of equal row counts (fewer when it holds
    fewer rows), at the keys of every (count/parts)-th row in key order: one query."""
    if not 2 <= parts <= MAX_FAN_OUT:
        raise DigestError(f"a range splits into 2..{MAX_FAN_OUT} parts")
    step = max(1, -(-count // parts))
    if count <= 1:
        return [key_range]
    number = sa.func.row_number().over(order_by=source.key).label("row_number")
    inner = sa.select(*source.key, number).select_from(source.table).where(
        _in_range(source, key_range)).subquery()
    key_columns = [inner.c[column.name] for column in source.key]
    statement = sa.select(*key_columns).where(
        (inner.c.row_number - 1) % step == 0, inner.c.row_number > 1).order_by(*key_columns)
    cuts: list[Key] = [tuple(row) for row in connection.execute(statement)]
    bounds: list[Key | None] = [key_range.lower, *cuts, key_range.upper]
    return [KeyRange(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def range_rows(connection: sa.Connection, source: DigestTable,
               key_range: KeyRange) -> list[RowHash]:
    """Each row of a range: key and row hash, in key order (for ranges a leaf holds)."""
    high, low = _hash_parts(source)
    statement = sa.select(*source.key, high, low).select_from(source.table).where(
        _in_range(source, key_range)).order_by(*source.key)
    width = len(source.key)
    return [RowHash(tuple(row[:width]), f"{int(row[width]):08x}{int(row[width + 1]):08x}")
            for row in connection.execute(statement)]
