"""Checks of a decoded change event's names and values before any target sees it: what the
wire decoder lets through but no business database should be asked to write.

Pure functions; the appliers turn a problem into a REJECTED outcome with the problem's code.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Iterable, Mapping
from decimal import Decimal

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.values import Value

MAX_DECIMAL_DIGITS = 65
"""MySQL's widest DECIMAL; a decimal with more significant digits fits no column."""
MAX_DECIMAL_EXPONENT = 100
"""How far a decimal's point may sit from its digits, both ways: the written literal stays
short (`1E+999999999` would be a 1 GB literal)."""

_METADATA_LOWER = frozenset(name.lower() for name in METADATA_COLUMNS)


class ValueProblem(enum.StrEnum):
    """Why a decoded event cannot be written anywhere (stable reason codes)."""

    INVALID_VALUE = "INVALID_VALUE"
    VALUE_OUT_OF_RANGE = "VALUE_OUT_OF_RANGE"
    INVALID_NAME = "INVALID_NAME"
    DUPLICATE_COLUMN = "DUPLICATE_COLUMN"
    METADATA_COLUMN = "METADATA_COLUMN"


def event_problem(event: ChangeEvent) -> tuple[ValueProblem, str] | None:
    """The first problem of an event's names and values, or None. Details never hold values."""
    names = [event.database, event.table, *event.primary_key]
    if any("\x00" in name for name in names):
        return ValueProblem.INVALID_NAME, "a database, table or key name holds a NUL character"
    for image in (event.before, event.after):
        if image is not None:
            problem = _names_problem(image) or values_problem(image.values())
            if problem:
                return problem
    return values_problem(event.primary_key.values())


def _names_problem(image: Mapping[str, Value]) -> tuple[ValueProblem, str] | None:
    seen: set[str] = set()
    for name in image:
        if "\x00" in name:
            return ValueProblem.INVALID_NAME, "a column name holds a NUL character"
        lowered = name.lower()
        if lowered in seen:
            return ValueProblem.DUPLICATE_COLUMN, f"column {name} appears twice (ignoring case)"
        seen.add(lowered)
        # The metadata columns are the platform's: only their exact spelling passes (and is
        # then left out of every write); any other spelling is a ship trying to set them.
        if lowered in _METADATA_LOWER and name not in METADATA_COLUMNS:
            return ValueProblem.METADATA_COLUMN, f"column {name} names a sync metadata column"
    return None


def values_problem(values: Iterable[Value]) -> tuple[ValueProblem, str] | None:
    """The first value no target can take: a non-finite or unbounded number, a naive time."""
    for value in values:
        problem = _value_problem(value)
        if problem:
            return problem
    return None


def _value_problem(value: Value) -> tuple[ValueProblem, str] | None:
    if isinstance(value, Decimal):
        return _decimal_problem(value)
    if isinstance(value, float) and not math.isfinite(value):
        return ValueProblem.INVALID_VALUE, "a float value is NaN or infinite"
    if isinstance(value, dt.datetime) and value.utcoffset() is None:
        return ValueProblem.INVALID_VALUE, "a datetime value has no time zone"
    return None


def _decimal_problem(value: Decimal) -> tuple[ValueProblem, str] | None:
    if not value.is_finite():
        return ValueProblem.INVALID_VALUE, "a decimal value is NaN or infinite"
    digits, exponent = value.as_tuple()[1:]
    assert isinstance(exponent, int)
    if len(digits) > MAX_DECIMAL_DIGITS:
        return ValueProblem.VALUE_OUT_OF_RANGE, f"a decimal value has over {MAX_DECIMAL_DIGITS}" \
                                                " digits"
    if exponent < -MAX_DECIMAL_EXPONENT or value.adjusted() > MAX_DECIMAL_EXPONENT:
        return ValueProblem.VALUE_OUT_OF_RANGE, "a decimal value's exponent is out of range"
    return None
