"""Evaluating a row filter on one row, with SQL's three-valued logic: a comparison with NULL,
or with a value of a type its literal does not compare with, is UNKNOWN (None here).

The comparisons are the ones the compiled SQL makes (tidesync.target.filter_sql): numbers
exactly (as doubles when the row holds a float, as MySQL does), text by code point, times as
instants. Nothing here raises on a row value.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from tidesync.domain.rules.filter_ast import (
    And,
    Between,
    BusinessTime,
    Compare,
    Condition,
    InList,
    IsNull,
    Like,
    LiteralValue,
    Not,
    Operand,
    Or,
    StartsWith,
)
from tidesync.domain.values import Value

Truth = bool | None
"""TRUE, FALSE or UNKNOWN (None)."""

_CHECKS: dict[str, Callable[[int], bool]] = {
    "=": lambda order: order == 0, "<>": lambda order: order != 0,
    "<": lambda order: order < 0, "<=": lambda order: order <= 0,
    ">": lambda order: order > 0, ">=": lambda order: order >= 0,
}


class RowReader:
    """Column values of one row by name, case-insensitively; a missing column is NULL."""

    def __init__(self, row: Mapping[str, Value], business_time: dt.datetime | None) -> None:
        self._row = row
        self._folded: dict[str, Value] | None = None
        self.business_time = business_time

    def value(self, operand: Operand) -> object:
        if isinstance(operand, BusinessTime):
            return self.business_time
        value = self._row.get(operand.name)
        if value is not None or operand.name in self._row:
            return value
        if self._folded is None:
            self._folded = {str(name).lower(): value for name, value in self._row.items()}
        return self._folded.get(operand.name.lower())


def evaluate(condition: Condition, row: RowReader) -> Truth:
    if isinstance(condition, And):
        return _all(condition, row)
    if isinstance(condition, Or):
        return _any(condition, row)
    if isinstance(condition, Not):
        truth = evaluate(condition.item, row)
        return None if truth is None else not truth
    value = row.value(condition.operand)
    if isinstance(condition, Compare):
        return compare(value, condition.operator, condition.literal.value)
    if isinstance(condition, IsNull):
        return _is_null(value) != condition.negated
    truth = _predicate(condition, value)
    return None if truth is None else truth != condition.negated


def _all(condition: And, row: RowReader) -> Truth:
    result: Truth = True
    for item in condition.items:
        truth = evaluate(item, row)
        if truth is False:
            return False
        if truth is None:
            result = None
    return result


def _any(condition: Or, row: RowReader) -> Truth:
    result: Truth = False
    for item in condition.items:
        truth = evaluate(item, row)
        if truth is True:
            return True
        if truth is None:
            result = None
    return result


def _predicate(condition: InList | Between | Like | StartsWith, value: object) -> Truth:
    """The predicate without its NOT."""
    if isinstance(condition, InList):
        return _in(value, condition)
    if isinstance(condition, Between):
        low = compare(value, ">=", condition.low.value)
        high = compare(value, "<=", condition.high.value)
        return False if False in (low, high) else None if None in (low, high) else True
    if not isinstance(value, str):
        return None
    if isinstance(condition, Like):
        return condition.pattern.matches(value)
    return value.startswith(condition.prefix)


def _in(value: object, condition: InList) -> Truth:
    result: Truth = False
    for item in condition.items:
        truth = compare(value, "=", item.value)
        if truth:
            return True
        if truth is None:
            result = None
    return result


def compare(value: object, operator: str, literal: LiteralValue) -> Truth:
    """`value <operator> literal` in three-valued logic."""
    if _is_null(value) or literal is None:
        return None
    try:
        pair = _comparable(value, literal)
        if pair is None:
            return None
        left, right = pair
        order = int(left > right) - int(left < right)
    except (TypeError, ValueError, ArithmeticError):
        return None  # a value of a type the literal does not compare with: UNKNOWN
    return _CHECKS[operator](order)


def _is_null(value: object) -> bool:
    """NULL, or a NaN (which neither MySQL nor SQLite stores: SQLite reads it as NULL)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, Decimal):
        return value.is_nan()
    return value is None


def _comparable(value: object, literal: LiteralValue) -> tuple[Any, Any] | None:
    """The two sides as Python compares them the way SQL does, or None when they do not
    compare (an UNKNOWN)."""
    # bool before int (a subclass), datetime before date (a subclass).
    if isinstance(literal, bool):
        if isinstance(value, bool | int):
            return value != 0, literal
        return None
    if isinstance(literal, int | Decimal):
        if isinstance(value, bool) or not isinstance(value, int | Decimal | float):
            return None
        return (value, float(literal)) if isinstance(value, float) else (value, literal)
    if isinstance(literal, str):
        return (value, literal) if isinstance(value, str) else None
    if isinstance(literal, dt.datetime):
        if isinstance(value, dt.datetime) and value.utcoffset() is not None:
            return value, literal
        return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value, literal
    return None
