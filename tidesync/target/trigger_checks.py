"""Which written columns a business trigger changed: the values an applier wrote compared with
the row it reads back in the same transaction.

The comparison forgives what the column type does to any value on its way in (fewer fractional
digits of a time, single-precision floats, the padding of CHAR and BINARY, JSON normalized by
MySQL), so only a real change by a trigger is reported.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal

from tidesync.domain.values import JsonText, Value

_FLOAT_TOLERANCE = 1e-6
_DECIMAL_DIGITS = 15  # SQLite keeps DECIMAL with NUMERIC affinity, to 15 significant digits


def changed_columns(columns: Sequence[str], written: Sequence[Value],
                    stored: Mapping[str, Value] | None) -> list[str]:
    """The columns of `columns` whose stored value is not what was written (all of them when
    the row is gone)."""
    if stored is None:
        return list(columns)
    return [column for column, value in zip(columns, written, strict=True)
            if not same_value(value, stored.get(column))]


def same_value(written: Value, stored: Value) -> bool:
    """Whether `stored` is `written` as the column keeps it."""
    if written == stored and type(written) is type(stored):
        return True
    if written is None or stored is None:
        return False
    if isinstance(written, dt.datetime) and isinstance(stored, dt.datetime):
        return _same_up_to_digits(written, stored)
    if isinstance(written, dt.time) and isinstance(stored, dt.time):
        return _same_up_to_digits(written, stored)
    if isinstance(written, bool | int | float | Decimal) and isinstance(
            stored, bool | int | float | Decimal):
        return _same_number(written, stored)
    if isinstance(written, str) and isinstance(stored, str):
        return written.rstrip(" ") == stored.rstrip(" ")
    if isinstance(written, bytes) and isinstance(stored, bytes):
        return written.rstrip(b"\0") == stored.rstrip(b"\0")
    if isinstance(written, JsonText | str) and isinstance(stored, JsonText | str):
        return _same_json(written, stored)
    return written == stored


def _same_up_to_digits(written: dt.datetime | dt.time, stored: dt.datetime | dt.time) -> bool:
    """A column with fewer fractional digits truncates (MariaDB) or rounds (MySQL) the
    microseconds: the stored value is the written one at some precision."""
    if stored.microsecond == written.microsecond:
        return stored == written
    for digits in range(6):
        step = 10 ** (6 - digits)
        truncated = written.microsecond // step * step
        if stored.microsecond == truncated and stored == written.replace(microsecond=truncated):
            return True
        if isinstance(written, dt.datetime) and isinstance(stored, dt.datetime):
            rounded = written.replace(microsecond=truncated) + dt.timedelta(
                microseconds=step if written.microsecond - truncated >= step // 2 else 0)
            if stored == rounded:
                return True
    return False


def _same_number(written: bool | int | float | Decimal, stored: bool | int | float | Decimal
                 ) -> bool:
    if isinstance(written, float) or isinstance(stored, float):
        return math.isclose(float(written), float(stored), rel_tol=_FLOAT_TOLERANCE)
    if Decimal(written) == Decimal(stored):
        return True
    # At most the last of 15 significant digits may differ (SQLite's NUMERIC affinity).
    scale = abs(Decimal(written)).adjusted() - _DECIMAL_DIGITS + 1
    return abs(Decimal(written) - Decimal(stored)) <= Decimal(1).scaleb(scale)


def _same_json(written: JsonText | str, stored: JsonText | str) -> bool:
    try:
        return bool(json.loads(_text(written)) == json.loads(_text(stored)))
    except ValueError:
        return _text(written) == _text(stored)


def _text(value: JsonText | str) -> str:
    return value.text if isinstance(value, JsonText) else value
