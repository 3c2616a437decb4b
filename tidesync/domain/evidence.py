"""Type-tagged evidence values (`canonical_value`) shown to people and read back from them.

Display text is exact (decimals keep their scale, floats round-trip); parsing checks the text
against the column's type as the evidence shows it, and never guesses a type.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from tidesync.domain.change_event import RecordKey
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.values import BitString, JsonText, Value, require_utc

Tagged = list[object]
"""A canonical value: [tag] or [tag, text] (bits: [tag, length, value])."""


class EvidenceValueError(TidesyncError, ValueError):
    """Display text that is not a value of the column's type."""

    code = ErrorCode.INVALID_INPUT


def value_tag(tagged: object) -> str:
    """The type tag of a canonical value ("?" when it is not one)."""
    return str(tagged[0]) if isinstance(tagged, list | tuple) and tagged else "?"


def display_text(tagged: object) -> str | None:
    """The value as a person reads it; None for SQL NULL."""
    if not isinstance(tagged, list | tuple) or not tagged:
        raise EvidenceValueError("not a type-tagged value")
    tag, rest = str(tagged[0]), list(tagged[1:])
    if tag == "null":
        return None
    if tag == "bool":
        return "true" if rest[0] else "false"
    if tag == "float":
        return repr(float.fromhex(str(rest[0])))
    if tag == "bits":
        return format(int(str(rest[1])), f"0{int(str(rest[0]))}b")
    if tag in ("int", "decimal", "str", "bytes", "datetime", "date", "time", "json"):
        return str(rest[0])
    raise EvidenceValueError(f"unknown value type {tag!r}")


def parse_display(sample: object, text: str | None) -> Tagged:
    """The canonical value of `text` in the type of `sample` (a canonical value of the same
    column); None gives NULL. Raises EvidenceValueError when the text does not fit."""
    if text is None:
        return ["null"]
    tag = value_tag(sample)
    try:
        return _PARSERS[tag](text, sample)
    except KeyError:
        raise EvidenceValueError(f"values of type {tag} cannot be entered") from None
    except EvidenceValueError:
        raise
    except (ValueError, ArithmeticError, binascii.Error) as error:
        raise EvidenceValueError(f"not a {tag} value") from error


def evidence_digest(scope: str, column: str, tagged: object) -> str:
    """A short digest of one evidence value, for comparing sides without seeing values.

    Scoped to one conflict and column, so equal values elsewhere do not correlate.
    """
    body = json.dumps([scope, column, tagged], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _bool(text: str, _: object) -> Tagged:
    lowered = text.strip().lower()
    if lowered not in ("true", "false", "1", "0"):
        raise ValueError("not a boolean")
    return ["bool", lowered in ("true", "1")]


def _int(text: str, _: object) -> Tagged:
    return ["int", str(int(text.strip()))]


def _float(text: str, _: object) -> Tagged:
    return ["float", float(text.strip()).hex()]


def _decimal(text: str, _: object) -> Tagged:
    value = Decimal(text.strip())
    if not value.is_finite():
        raise InvalidOperation("not a finite decimal")
    return ["decimal", str(value)]


def _str(text: str, _: object) -> Tagged:
    return ["str", text]


def _bytes(text: str, _: object) -> Tagged:
    return ["bytes", base64.b64encode(base64.b64decode(text, validate=True)).decode("ascii")]


def _datetime(text: str, _: object) -> Tagged:
    """ISO 8601 with its offset: a time without one is ambiguous and is not guessed."""
    moment = dt.datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        raise EvidenceValueError("a datetime needs its UTC offset, e.g. 2026-01-01T08:00:00+00:00")
    return ["datetime", require_utc(moment).isoformat()]


def _date(text: str, _: object) -> Tagged:
    return ["date", dt.date.fromisoformat(text.strip()).isoformat()]


def _time(text: str, _: object) -> Tagged:
    return ["time", dt.time.fromisoformat(text.strip()).isoformat()]


def _json(text: str, _: object) -> Tagged:
    json.loads(text)
    return ["json", text]


def _bits(text: str, sample: object) -> Tagged:
    length = int(str(sample[1])) if isinstance(sample, list | tuple) and len(sample) > 1 else 0
    bits = text.strip()
    if not 1 <= len(bits) <= length or set(bits) - {"0", "1"}:
        raise ValueError(f"expected up to {length} binary digits")
    return ["bits", length, str(int(bits, 2))]


_PARSERS = {
    "bool": _bool, "int": _int, "float": _float, "decimal": _decimal, "str": _str,
    "bytes": _bytes, "datetime": _datetime, "date": _date, "time": _time, "json": _json,
    "bits": _bits,
}


def decode_value(tagged: object) -> Value:
    """The column value a canonical value stands for (inverse of `canonical_value`)."""
    if not isinstance(tagged, list | tuple) or not tagged:
        raise EvidenceValueError("not a type-tagged value")
    tag, rest = str(tagged[0]), list(tagged[1:])
    try:
        return _decode(tag, rest)
    except (ValueError, IndexError, ArithmeticError, binascii.Error) as error:
        raise EvidenceValueError(f"not a stored {tag} value") from error


def _decode(tag: str, rest: list[object]) -> Value:
    decoders: dict[str, Callable[[], Value]] = {
        "null": lambda: None,
        "bool": lambda: bool(rest[0]),
        "int": lambda: int(str(rest[0])),
        "float": lambda: float.fromhex(str(rest[0])),
        "decimal": lambda: Decimal(str(rest[0])),
        "str": lambda: str(rest[0]),
        "bytes": lambda: base64.b64decode(str(rest[0]), validate=True),
        "datetime": lambda: require_utc(dt.datetime.fromisoformat(str(rest[0]))),
        "date": lambda: dt.date.fromisoformat(str(rest[0])),
        "time": lambda: dt.time.fromisoformat(str(rest[0])),
        "json": lambda: JsonText(str(rest[0])),
        "bits": lambda: BitString(int(str(rest[0])), int(str(rest[1]))),
    }
    if tag not in decoders:
        raise EvidenceValueError(f"unknown value type {tag!r}")
    return decoders[tag]()


def parse_record_key(canonical: str) -> RecordKey:
    """The RecordKey whose `canonical()` text this is."""
    decoder = json.JSONDecoder()
    try:
        names, end = decoder.raw_decode(canonical)
        key, _ = decoder.raw_decode(canonical, end)
        where = {str(name): decode_value(tagged) for name, tagged in names}
        pairs = tuple((str(name), decode_value(tagged)) for name, tagged in key)
        record = RecordKey(str(where["database"]), str(where["table"]), pairs,
                           None if where.get("schema") is None else str(where["schema"]))
    except (ValueError, TypeError, KeyError) as error:
        raise EvidenceValueError("not a canonical record key") from error
    if record.canonical() != canonical:
        raise EvidenceValueError("not a canonical record key")
    return record
