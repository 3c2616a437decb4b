"""The type rules of row filters: which literals and operators each kind of column takes.

They are strict on purpose: within them, the Python evaluator and the compiled SQL (MySQL,
MariaDB, SQLite) give the same answer for every row, so the ship and the shore agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from decimal import Decimal

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.rules.filter_ast import (
    And,
    Between,
    BusinessTime,
    Compare,
    Condition,
    InList,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    Predicate,
    StartsWith,
    render_operand,
)

INTEGER_RANGE = (-(2**63), 2**64 - 1)
"""Integer literals compared with integer columns: BIGINT, signed or unsigned."""

ORDERED_KINDS = frozenset({ColumnKind.INTEGER, ColumnKind.DECIMAL, ColumnKind.FLOAT,
                           ColumnKind.TEXT, ColumnKind.DATETIME, ColumnKind.DATE})
"""Kinds that take = <> < <= > >=, IN and BETWEEN; BOOL takes = and <> only."""

_LITERAL_NAMES = {
    ColumnKind.INTEGER: "an integer", ColumnKind.DECIMAL: "a number",
    ColumnKind.FLOAT: "a number", ColumnKind.TEXT: "a string literal",
    ColumnKind.DATETIME: "a TIMESTAMP literal", ColumnKind.DATE: "a DATE literal",
    ColumnKind.BOOL: "TRUE or FALSE",
}


def type_problems(root: Condition, columns: Mapping[str, ColumnKind]) -> list[str]:
    """What in the filter does not fit the table's columns; empty when everything does."""
    kinds = {name.lower(): kind for name, kind in columns.items()}
    problems: list[str] = []
    for predicate in predicates(root):
        operand = predicate.operand
        kind = (ColumnKind.DATETIME if isinstance(operand, BusinessTime)
                else kinds.get(operand.name.lower()))
        if kind is None:
            problems.append(f"no column {render_operand(operand)}"
                            f"{_at(operand.position)}")
        else:
            problems.extend(_predicate_problems(predicate, kind))
    return problems


def predicates(condition: Condition) -> Iterator[Predicate]:
    """Every comparison in the tree, left to right."""
    if isinstance(condition, And | Or):
        for item in condition.items:
            yield from predicates(item)
    elif isinstance(condition, Not):
        yield from predicates(condition.item)
    else:
        yield condition


def _predicate_problems(predicate: Predicate, kind: ColumnKind) -> list[str]:
    subject = f"{render_operand(predicate.operand)} ({kind.value})"
    if isinstance(predicate, IsNull):
        return []
    if isinstance(predicate, Like | StartsWith):
        if kind is ColumnKind.TEXT:
            return []
        what = "LIKE" if isinstance(predicate, Like) else "STARTS WITH"
        return [f"{subject} is not text, so it takes no {what}{_at(predicate.operand.position)}"]
    allowed = kind in ORDERED_KINDS or (
        kind is ColumnKind.BOOL and isinstance(predicate, Compare)
        and predicate.operator in ("=", "<>"))
    if not allowed:
        return [f"{subject} cannot be compared this way{_at(predicate.operand.position)}; "
                f"{_what_kind_takes(kind)}"]
    return [f"{subject}: {problem}" for problem in _literal_problems(predicate, kind)]


def _what_kind_takes(kind: ColumnKind) -> str:
    if kind is ColumnKind.BOOL:
        return "a boolean column takes = and <> with TRUE or FALSE, and IS NULL"
    return f"a {kind.value} column takes only IS NULL and IS NOT NULL"


def _literal_problems(predicate: Compare | InList | Between, kind: ColumnKind) -> Iterator[str]:
    literals: tuple[Literal, ...]
    if isinstance(predicate, Compare):
        literals, nulls_allowed = (predicate.literal,), False
    elif isinstance(predicate, Between):
        literals, nulls_allowed = (predicate.low, predicate.high), False
    else:
        literals, nulls_allowed = predicate.items, True
    for literal in literals:
        if literal.value is None:
            if not nulls_allowed:
                yield f"a comparison with NULL is never true; use IS NULL{_at(literal.position)}"
        elif not _fits(literal, kind):
            yield f"compare it with {_LITERAL_NAMES[kind]}{_at(literal.position)}"


def _fits(literal: Literal, kind: ColumnKind) -> bool:
    value = literal.value
    # bool before int (a subclass), datetime before date (a subclass).
    if isinstance(value, bool):
        return kind is ColumnKind.BOOL
    if isinstance(value, int):
        low, high = INTEGER_RANGE
        return (kind in (ColumnKind.DECIMAL, ColumnKind.FLOAT)
                or (kind is ColumnKind.INTEGER and low <= value <= high))
    if isinstance(value, Decimal):
        return kind in (ColumnKind.DECIMAL, ColumnKind.FLOAT)
    if isinstance(value, str):
        return kind is ColumnKind.TEXT
    if isinstance(value, dt.datetime):
        return kind is ColumnKind.DATETIME
    return kind is ColumnKind.DATE


def _at(position: int) -> str:
    return f" (at character {position})"
