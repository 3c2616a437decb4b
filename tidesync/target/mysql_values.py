"""Values to and from pymysql: parameters as the driver sends them (session time zone UTC), and
values read back as the Value their column's type means.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tidesync.domain.column_kinds import ColumnKind, ColumnType
from tidesync.domain.values import BitString, JsonText, Value


def _naive_utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None)


_ENCODE: dict[type, Callable[[Any], object]] = {
    bool: int,
    dt.datetime: _naive_utc,
    JsonText: lambda value: value.text,
    BitString: lambda value: value.value,
}


def mysql_param(value: Value) -> object:
    """A Value as pymysql sends it (the session time zone is UTC)."""
    encode = _ENCODE.get(type(value))
    return value if encode is None else encode(value)


def decode_mysql_value(value: object, column: ColumnType) -> Value:
    """A value pymysql read back, as the Value the column's type means."""
    if value is None:
        return None
    kind = column.kind
    if kind is ColumnKind.BOOL:
        return bool(int.from_bytes(value, "big") if isinstance(value, bytes) else value)
    if kind is ColumnKind.BITS and isinstance(value, bytes):
        return BitString(column.size or 64, int.from_bytes(value, "big"))
    if kind is ColumnKind.DATETIME and isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC)
    if kind is ColumnKind.TIME and isinstance(value, dt.timedelta):
        if dt.timedelta(0) <= value < dt.timedelta(days=1):
            return (dt.datetime.min + value).time()
        return str(value)
    if kind is ColumnKind.JSON and isinstance(value, str | bytes):
        return JsonText(value if isinstance(value, str) else value.decode())
    if isinstance(value, bool | int | float | Decimal | str | bytes | dt.date | dt.time):
        return value
    return str(value)
