"""Row filters compiled to SQLAlchemy Core conditions that MySQL, MariaDB and SQLite evaluate
exactly as `RowFilter.matches` does, NULLs and three-valued logic included.

Where the databases differ from the Python evaluator by default, the compiled SQL says what it
means: text compares as UTF-8 bytes (code point order, case and trailing spaces significant;
MySQL's usual collations ignore both), LIKE runs under a binary collation on MySQL and as GLOB
on SQLite (whose LIKE ignores ASCII case), numbers bind as doubles against FLOAT/DOUBLE columns
(what MySQL compares them as) and exactly otherwise, and times bind in the form the target
stores them (naive UTC on MySQL, `YYYY-MM-DD HH:MM:SS.ffffff` text on SQLite). SQLite keeps 15
significant digits of a DECIMAL, so there exact agreement holds up to that precision.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.rules.filter import (
    And,
    Between,
    BusinessTime,
    Compare,
    Condition,
    FilterError,
    InList,
    IsNull,
    Like,
    LiteralValue,
    Not,
    Operand,
    Or,
    RowFilter,
    StartsWith,
)
from tidesync.domain.rules.filter_like import Segment

_INT64_MAX = 2**63 - 1
_MYSQL = ("mysql", "mariadb")
_COMPARISONS: dict[str, Callable[[Any, Any], sa.ColumnElement[bool]]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}


def filter_clause(row_filter: RowFilter, table: sa.Table, *,
                  business_time: sa.ColumnElement[Any] | None = None) -> sa.ColumnElement[bool]:
    """The filter as a WHERE condition on `table`: TRUE exactly for the rows it matches.

    `business_time` is the expression `$business_time` stands for (a DATETIME or DATE column,
    usually). FilterError when the filter does not fit the table's columns.
    """
    columns = {column.name.lower(): column for column in table.columns}
    problems = row_filter.type_problems({column.name: column_kind(column.type)
                                         for column in table.columns})
    if row_filter.uses_business_time and business_time is None:
        problems.append("the filter uses $business_time, but the table has no business time")
    if problems:
        raise FilterError(f"the filter does not fit table {table.name}: {'; '.join(problems)}")
    return _Compiler(columns, business_time).condition(row_filter.root)


def column_kind(column_type: sa.types.TypeEngine[Any]) -> ColumnKind:
    """The kind of values a SQLAlchemy column type holds (reflected MySQL types included)."""
    if isinstance(column_type, sa.Boolean) or (
            isinstance(column_type, mysql.TINYINT) and column_type.display_width == 1) or (
            isinstance(column_type, mysql.BIT) and (column_type.length or 1) == 1):
        return ColumnKind.BOOL
    for sql_type, kind in _KINDS:
        if isinstance(column_type, sql_type):
            return kind
    return ColumnKind.OTHER


# Subclasses before their bases: Float is a Numeric, DateTime is not a Date.
_KINDS: tuple[tuple[type[sa.types.TypeEngine[Any]], ColumnKind], ...] = (
    (sa.Integer, ColumnKind.INTEGER), (sa.Float, ColumnKind.FLOAT),
    (sa.Numeric, ColumnKind.DECIMAL), (sa.String, ColumnKind.TEXT),
    (sa.DateTime, ColumnKind.DATETIME), (sa.Date, ColumnKind.DATE), (sa.Time, ColumnKind.TIME),
    (sa.LargeBinary, ColumnKind.BYTES), (sa.BINARY, ColumnKind.BYTES),
    (sa.VARBINARY, ColumnKind.BYTES),
    (sa.JSON, ColumnKind.JSON),
)


class _Compiler:
    def __init__(self, columns: dict[str, sa.Column[Any]],
                 business_time: sa.ColumnElement[Any] | None) -> None:
        self._columns = columns
        self._business_time = business_time

    def condition(self, node: Condition) -> sa.ColumnElement[bool]:
        if isinstance(node, And):
            return sa.and_(*(self.condition(item) for item in node.items))
        if isinstance(node, Or):
            return sa.or_(*(self.condition(item) for item in node.items))
        if isinstance(node, Not):
            return sa.not_(self.condition(node.item))
        if isinstance(node, IsNull):
            column = self._operand(node.operand)
            return column.is_not(None) if node.negated else column.is_(None)
        clause = self._predicate(node)
        return sa.not_(clause) if not isinstance(node, Compare) and node.negated else clause

    def _predicate(self, node: Compare | InList | Between | Like | StartsWith,
                   ) -> sa.ColumnElement[bool]:
        """The predicate without its NOT."""
        kind, operand = self._kind(node.operand), self._operand(node.operand)
        if isinstance(node, Like | StartsWith):
            segments = (node.pattern.segments if isinstance(node, Like)
                        else (Segment(node.prefix), Segment("")))
            return _PatternMatch(operand, sa.literal(segments, _PatternType()))
        if kind is ColumnKind.BOOL and isinstance(node, Compare):
            return _bool_compare(operand, node.operator, node.literal.value)
        left = _BinaryText(operand) if kind is ColumnKind.TEXT else operand
        if isinstance(node, Compare):
            return _COMPARISONS[node.operator](left, _bound(node.literal.value, kind))
        if isinstance(node, Between):
            return sa.and_(left >= _bound(node.low.value, kind),
                           left <= _bound(node.high.value, kind))
        return left.in_([_bound(item.value, kind) for item in node.items])

    def _operand(self, operand: Operand) -> sa.ColumnElement[Any]:
        if isinstance(operand, BusinessTime):
            if self._business_time is None:  # refused with the type problems already
                raise FilterError("the filter uses $business_time, but the table has none")
            if isinstance(self._business_time.type, sa.Date) and not isinstance(
                    self._business_time.type, sa.DateTime):
                return _DateAsDatetime(self._business_time)
            return self._business_time
        return self._columns[operand.name.lower()]

    def _kind(self, operand: Operand) -> ColumnKind:
        if isinstance(operand, BusinessTime):
            return ColumnKind.DATETIME
        return column_kind(self._columns[operand.name.lower()].type)


def _bool_compare(column: sa.ColumnElement[Any], operator_: str,
                  literal: LiteralValue) -> sa.ColumnElement[bool]:
    # Any non-zero value is TRUE, as in Python (a TINYINT(1) can hold 2).
    zero = sa.literal(0, sa.Integer())
    return column != zero if (operator_ == "=") == bool(literal) else column == zero


def _bound(value: LiteralValue, kind: ColumnKind) -> sa.ColumnElement[Any]:
    """A literal bound the way `kind`'s column compares with it on every dialect (the type
    rules have matched the literal with the kind already)."""
    if value is None:
        return sa.null()
    if isinstance(value, str):
        return _BinaryText(sa.literal(value, sa.String()))
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        if kind is ColumnKind.FLOAT:
            return sa.literal(float(value), sa.Double())
        if kind is ColumnKind.DECIMAL:
            return sa.literal(Decimal(value), _ExactDecimal())
        return sa.literal(value, _WideInteger())
    if isinstance(value, dt.datetime):
        return sa.literal(value, _UtcDatetime())
    return sa.literal(value, _IsoDate())


# --- literals bound per dialect ----------------------------------------------------------------


class _WideInteger(sa.TypeDecorator[int]):
    """An integer literal; beyond SQLite's int64 it binds as a double, which every stored
    integer is still exactly smaller than."""

    impl = sa.BigInteger
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Dialect) -> Any:
        if value is not None and value > _INT64_MAX and dialect.name == "sqlite":
            return float(value)
        return value


class _ExactDecimal(sa.TypeDecorator[Decimal]):
    """A decimal literal: exact on MySQL; on SQLite text, which the column's NUMERIC affinity
    converts the same way it converted the stored values."""

    impl = sa.Numeric
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(sa.String() if dialect.name == "sqlite" else sa.Numeric())

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        return str(value) if value is not None and dialect.name == "sqlite" else value


class _UtcDatetime(sa.TypeDecorator[dt.datetime]):
    """A TIMESTAMP literal: naive UTC on MySQL (sessions run in UTC), the stored text on SQLite."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(sa.String() if dialect.name == "sqlite" else sa.DateTime())

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return utc.strftime("%Y-%m-%d %H:%M:%S.%f") if dialect.name == "sqlite" else utc


class _IsoDate(sa.TypeDecorator[dt.date]):
    impl = sa.Date
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(sa.String() if dialect.name == "sqlite" else sa.Date())

    def process_bind_param(self, value: dt.date | None, dialect: Dialect) -> Any:
        if value is None or dialect.name != "sqlite":
            return value
        return value.isoformat()


class _PatternType(sa.TypeDecorator[str]):
    """A pattern (its segments) as the dialect's matcher reads it: a MySQL LIKE pattern with
    `!` as the escape, or an SQLite GLOB pattern."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        return glob_pattern(value) if dialect.name == "sqlite" else mysql_like_pattern(value)


def mysql_like_pattern(segments: Sequence[Segment]) -> str:
    """The LIKE pattern (for `ESCAPE '!'`) matching what the segments match."""
    return "%".join(_segment_text(segment, "_", lambda char: (
        "!" + char if char in "%_!" else char)) for segment in segments)


def glob_pattern(segments: Sequence[Segment]) -> str:
    """The SQLite GLOB pattern matching what the segments match (GLOB is case-sensitive)."""
    return "*".join(_segment_text(segment, "?", lambda char: (
        f"[{char}]" if char in "*?[" else char)) for segment in segments)


def _segment_text(segment: Segment, any_char: str, literal: Callable[[str], str]) -> str:
    wild = set(segment.any_char)
    return "".join(any_char if index in wild else literal(char)
                   for index, char in enumerate(segment.text))


# --- dialect-specific SQL ----------------------------------------------------------------------


class _BinaryText(FunctionElement[bytes]):
    """Text as its UTF-8 bytes, so comparisons go by code point with nothing ignored."""

    type = sa.LargeBinary()
    inherit_cache = True
    name = "binary_text"


class _PatternMatch(FunctionElement[bool]):
    """(text, pattern): whether the text matches, case-sensitively, character by character."""

    type = sa.Boolean()
    inherit_cache = True
    name = "pattern_match"


class _DateAsDatetime(FunctionElement[dt.datetime]):
    """A DATE as the DATETIME of its midnight (how MySQL compares a date with a timestamp)."""

    type = sa.DateTime()
    inherit_cache = True
    name = "date_as_datetime"


def _unsupported(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    raise sa.exc.CompileError("row filters compile for MySQL, MariaDB and SQLite only")


def _arguments(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> list[str]:
    return [compiler.process(clause, **kw) for clause in element.clauses]


@compiles(_BinaryText, "mysql")
@compiles(_BinaryText, "mariadb")
def _binary_text_mysql(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = _arguments(element, compiler, **kw)
    return f"CAST(CONVERT({text} USING utf8mb4) AS BINARY)"


@compiles(_BinaryText, "sqlite")
def _binary_text_sqlite(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    (text,) = _arguments(element, compiler, **kw)
    return f"({text} COLLATE BINARY)"


@compiles(_PatternMatch, "mysql")
@compiles(_PatternMatch, "mariadb")
def _pattern_match_mysql(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    text, pattern = _arguments(element, compiler, **kw)
    return (f"(CONVERT({text} USING utf8mb4) COLLATE utf8mb4_bin"
            f" LIKE CONVERT({pattern} USING utf8mb4) ESCAPE '!')")


@compiles(_PatternMatch, "sqlite")
def _pattern_match_sqlite(element: FunctionElement[Any], compiler: SQLCompiler, **kw: Any) -> str:
    text, pattern = _arguments(element, compiler, **kw)
    return f"({text} GLOB {pattern})"


@compiles(_DateAsDatetime, "mysql")
@compiles(_DateAsDatetime, "mariadb")
def _date_as_datetime_mysql(element: FunctionElement[Any], compiler: SQLCompiler,
                            **kw: Any) -> str:
    (day,) = _arguments(element, compiler, **kw)
    return f"CAST({day} AS DATETIME(6))"


@compiles(_DateAsDatetime, "sqlite")
def _date_as_datetime_sqlite(element: FunctionElement[Any], compiler: SQLCompiler,
                             **kw: Any) -> str:
    (day,) = _arguments(element, compiler, **kw)
    return f"({day} || ' 00:00:00.000000')"


for _construct in (_BinaryText, _PatternMatch, _DateAsDatetime):
    compiles(_construct)(_unsupported)
