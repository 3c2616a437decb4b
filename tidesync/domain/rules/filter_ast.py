"""The row filter's syntax tree: frozen nodes, the error every filter check raises, and the
canonical text of a tree (what `parse_filter` reads back into the same tree).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeAlias

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.filter_like import LikePattern

BUSINESS_TIME = "$business_time"
"""How a filter names the row's business time (the rule's business time column)."""

RESERVED_WORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "LIKE", "BETWEEN", "TRUE",
                            "FALSE", "STARTS", "WITH"})
"""Words that are never column names unless backquoted."""

LiteralValue: TypeAlias = bool | int | Decimal | str | dt.datetime | dt.date | None
"""A literal as the filter holds it: TIMESTAMP literals are aware UTC datetimes."""


class FilterError(TidesyncError):
    """A row filter that cannot be read, is too large, or does not fit its table.

    `position` is the character offset of the problem in the filter text (0 when the problem
    has no single place).
    """

    code = ErrorCode.RULE_FILTER_INVALID

    def __init__(self, message: str, position: int = 0) -> None:
        super().__init__(f"{message} (at character {position})" if position else message)
        self.position = position


@dataclass(frozen=True, slots=True)
class Column:
    """A column of the row, named as written; matching is case-insensitive like MySQL."""

    name: str
    position: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class BusinessTime:
    """The row's business time, `$business_time` in the text."""

    position: int = field(default=0, compare=False)


Operand: TypeAlias = Column | BusinessTime


@dataclass(frozen=True, slots=True)
class Literal:
    value: LiteralValue
    position: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Compare:
    """`operand <op> literal`; `operator` is one of `= <> < <= > >=` (`!=` reads as `<>`)."""

    operand: Operand
    operator: str
    literal: Literal


@dataclass(frozen=True, slots=True)
class InList:
    operand: Operand
    items: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Between:
    operand: Operand
    low: Literal
    high: Literal
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Operand
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    operand: Operand
    pattern: LikePattern
    negated: bool = False


@dataclass(frozen=True, slots=True)
class StartsWith:
    """`operand STARTS WITH 'prefix'`: the prefix is plain text, `%` and `_` included."""

    operand: Operand
    prefix: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    item: Condition


Predicate: TypeAlias = Compare | InList | Between | IsNull | Like | StartsWith
Condition: TypeAlias = Predicate | And | Or | Not

COMPARE_OPERATORS = ("=", "<>", "<", "<=", ">", ">=")


_IDENTIFIER_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
IDENTIFIER_CHARS = _IDENTIFIER_START | frozenset("0123456789")


def is_identifier(name: str) -> bool:
    """Whether `name` can be written without backquotes: ASCII `[A-Za-z_][A-Za-z0-9_]*`, and
    not a reserved word."""
    return (bool(name) and name[0] in _IDENTIFIER_START
            and all(char in IDENTIFIER_CHARS for char in name)
            and name.upper() not in RESERVED_WORDS)


# --- canonical text -------------------------------------------------------------------------


def render(condition: Condition) -> str:
    """The canonical text of a tree; `parse_filter(render(tree)).root == tree`."""
    if isinstance(condition, And | Or):
        joiner = " AND " if isinstance(condition, And) else " OR "
        return joiner.join(_grouped(item) for item in condition.items)
    if isinstance(condition, Not):
        return f"NOT {_grouped(condition.item)}"
    return _render_predicate(condition)


def _grouped(condition: Condition) -> str:
    text = render(condition)
    return f"({text})" if isinstance(condition, And | Or) else text


def _render_predicate(predicate: Predicate) -> str:
    operand = render_operand(predicate.operand)
    not_ = "NOT " if getattr(predicate, "negated", False) else ""
    if isinstance(predicate, Compare):
        return f"{operand} {predicate.operator} {render_literal(predicate.literal.value)}"
    if isinstance(predicate, InList):
        items = ", ".join(render_literal(item.value) for item in predicate.items)
        return f"{operand} {not_}IN ({items})"
    if isinstance(predicate, Between):
        low, high = render_literal(predicate.low.value), render_literal(predicate.high.value)
        return f"{operand} {not_}BETWEEN {low} AND {high}"
    if isinstance(predicate, IsNull):
        return f"{operand} IS {not_}NULL"
    if isinstance(predicate, Like):
        return f"{operand} {not_}LIKE {render_literal(predicate.pattern.text)}"
    return f"{operand} {not_}STARTS WITH {render_literal(predicate.prefix)}"


def render_operand(operand: Operand) -> str:
    if isinstance(operand, BusinessTime):
        return BUSINESS_TIME
    if is_identifier(operand.name):
        return operand.name
    return "`" + operand.name.replace("`", "``") + "`"


def render_literal(value: LiteralValue) -> str:
    # bool before int (a subclass), datetime before date (a subclass).
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{timestamp_text(value)}'"
    return f"DATE '{value.isoformat()}'"


def timestamp_text(moment: dt.datetime) -> str:
    """`YYYY-MM-DD HH:MM:SS[.ffffff]` in UTC, the form TIMESTAMP literals are written in."""
    utc = moment.astimezone(dt.UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{utc.microsecond:06d}" if utc.microsecond else text
