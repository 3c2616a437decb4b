"""Column values as tidesync carries them, exactly: no floats for DECIMAL, aware UTC datetimes.

Also the canonical text of a value, used wherever bytes must be stable (event ids, record keys).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class JsonText:
    """A MySQL JSON column value: the document text as captured (already validated as JSON)."""

    text: str

    def parsed(self) -> object:
        return json.loads(self.text)


@dataclass(frozen=True, slots=True)
class BitString:
    """A MySQL BIT(n) value with n > 1: `value` holds the bits as an unsigned integer."""

    length: int
    value: int

    def __post_init__(self) -> None:
        if not 1 <= self.length <= 64:
            raise ValueError(f"BIT length must be 1..64, got {self.length}")
        if not 0 <= self.value < (1 << self.length):
            raise ValueError(f"value does not fit in BIT({self.length})")

    def text(self) -> str:
        return format(self.value, f"0{self.length}b")


Value: TypeAlias = (
    bool | int | float | Decimal | str | bytes | dt.datetime | dt.date | dt.time
    | JsonText | BitString | None
)
"""One column value. datetimes are always timezone-aware UTC; `time` has no zone."""

Row: TypeAlias = Mapping[str, Value]


def frozen_row(items: Mapping[str, Value] | Iterable[tuple[str, Value]]) -> Row:
    """A read-only copy of a row, so value objects holding it stay immutable.

    A mapping proxy is taken as already frozen: whoever made it keeps no handle on its dict
    (decoders hand their fresh dicts over this way, saving a copy per image).
    """
    if type(items) is MappingProxyType:
        return items
    return MappingProxyType(dict(items))


def require_utc(moment: dt.datetime) -> dt.datetime:
    """Refuse naive datetimes; convert aware ones to UTC."""
    if moment.tzinfo is dt.UTC:
        return moment  # already UTC (decoded times are): nothing to convert
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("datetime must be timezone-aware")
    return moment.astimezone(dt.UTC)


def canonical_value(value: Value) -> list[object]:
    """A JSON-able, type-tagged form of a value: equal only when type and value are equal.

    Tags keep 1, "1", 1.0, Decimal("1") and True distinct, and Decimal keeps its exponent
    (1.0 and 1.00 differ) because the column's scale is part of what was captured.
    """
    # bool before int: bool is a subclass of int.
    if value is None:
        return ["null"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", str(value)]
    if isinstance(value, float):
        return ["float", value.hex()]
    if isinstance(value, Decimal):
        return ["decimal", str(value)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytes):
        return ["bytes", base64.b64encode(value).decode("ascii")]
    # datetime before date: datetime is a subclass of date.
    if isinstance(value, dt.datetime):
        return ["datetime", require_utc(value).isoformat()]
    if isinstance(value, dt.date):
        return ["date", value.isoformat()]
    if isinstance(value, dt.time):
        return ["time", value.isoformat()]
    if isinstance(value, JsonText):
        return ["json", value.text]
    if isinstance(value, BitString):
        return ["bits", value.length, str(value.value)]
    raise TypeError(f"unsupported value type {type(value).__name__}")


def canonical_text(pairs: Iterable[tuple[str, Value]]) -> str:
    """Stable text of named values in the given order (column order is significant).

    The JSON of `[[name, canonical_value(value)], …]` without spaces or ASCII escaping. It
    runs for every key of every applied event, so the common pieces are written directly:
    the same text `json.dumps` gives, part by part.
    """
    parts = []
    for name, value in pairs:
        if isinstance(value, str):
            encoded = f'["str",{_json_string(value)}]'
        elif isinstance(value, int) and not isinstance(value, bool):
            encoded = f'["int","{value!s}"]'
        elif value is None:
            encoded = '["null"]'
        else:
            encoded = _CANONICAL_JSON(canonical_value(value))
        label = _json_string(name) if type(name) is str else _CANONICAL_JSON(name)
        parts.append(f"[{label},{encoded}]")
    return f"[{','.join(parts)}]"


_CANONICAL_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_json_string = json.encoder.encode_basestring
"""What that encoder writes for a str (quoted, escaped, non-ASCII kept)."""


def value_to_json(value: Value) -> object:
    """The value as plain JSON for people and tools: exact decimals as strings,
    datetimes as ISO-8601 UTC, bytes as base64, JSON documents parsed, bits as 0/1 text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return require_utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, JsonText):
        return value.parsed()
    if isinstance(value, BitString):
        return value.text()
    raise TypeError(f"unsupported value type {type(value).__name__}")


def row_to_json(row: Row | None) -> dict[str, object] | None:
    return None if row is None else {name: value_to_json(v) for name, v in row.items()}
