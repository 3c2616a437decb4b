"""The values of one column of a v2 upload batch (`V2Column`): typed, delta-encoded, texts sent
once. Lossless for every domain value type: what has no compact form travels as `Value`s.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from itertools import accumulate, pairwise

from tidesync.domain.change_event import Revision
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.columns import (
    CONVERSION_ERRORS,
    epoch_micros,
    moment_from_micros,
    value_from_wire,
    value_to_wire,
)
from tidesync.wire.protocol import MalformedPayload

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MICROS_PER_DAY = 86_400_000_000
_NUMBERED = re.compile(r"(.*?)(0|[1-9][0-9]{0,17})", re.DOTALL)
_MAX_EXPONENT = 400
_UNITS = (6, 3, 0)  # exponents of 10 tried for times, coarsest first

Revisions = Sequence[Revision | None]
"""Per value: the revision of its event that a revision column refers to."""


def _fits(values: Sequence[int]) -> bool:
    return all(_INT64_MIN <= v <= _INT64_MAX for v in values)


def _deltas(numbers: Sequence[int]) -> list[int] | None:
    """Deltas against the previous number (the first against 0), one delta when all are
    equal; None when a delta leaves int64."""
    if not numbers:
        return []
    first = numbers[0]
    if len(numbers) > 1 and all(n == first for n in numbers):
        return [first] if _INT64_MIN <= first <= _INT64_MAX else None
    out = [first]
    out += [b - a for a, b in pairwise(numbers)]
    return out if _fits(out) else None


# ----------------------------------------------------------------------------- encoding


def encode_column(values: Sequence[Value], out: pb.V2Column,
                  revisions: Revisions | None = None) -> None:
    """Fill `out` with `values` (NULLs included) in the most compact kind that is exact."""
    present = [v for v in values if v is not None]
    if not present:
        return  # an empty column: every value NULL
    if len(present) != len(values):
        out.nulls = _bitmap([v is None for v in values])
    if revisions is not None and len(present) == len(values) and _encode_revisions(
            values, revisions, out):
        return
    kind = _kind_of(present)
    encoder = _ENCODERS.get(kind) if kind is not None else None
    if encoder is None or not encoder(present, out):
        out.Clear()
        if len(present) != len(values):
            out.nulls = _bitmap([v is None for v in values])
        _encode_values(present, out)


def _bitmap(flags: Sequence[bool]) -> bytes:
    # Bit i of the little-endian integer is flag i.
    bits = int("".join("1" if flag else "0" for flag in reversed(flags)) or "0", 2)
    return bits.to_bytes((len(flags) + 7) // 8, "little")


def _encode_revisions(values: Sequence[Value], revisions: Revisions,
                      out: pb.V2Column) -> bool:
    if all(r is not None and v == r.text for v, r in zip(values, revisions, strict=True)):
        out.kind = pb.V2_REVISION_TEXT
        return True
    if all(r is not None and v == r.value for v, r in zip(values, revisions, strict=True)):
        out.kind = pb.V2_REVISION_BYTES
        return True
    return False


def _kind_of(present: Sequence[Value]) -> int | None:
    """The column kind all values share (before checking they fit it), or None."""
    kind = _TYPE_KINDS.get(type(present[0]))
    if kind is None or len(set(map(type, present))) != 1:
        return None
    return kind


def _encode_values(present: Sequence[Value], out: pb.V2Column) -> None:
    out.kind = pb.V2_VALUES
    for value in present:
        value_to_wire(value, out.values.add())


def _encode_ints(present: Sequence[Value], out: pb.V2Column) -> bool:
    deltas = _deltas(present)  # type: ignore[arg-type]
    if deltas is None:
        return False
    out.kind = pb.V2_INT
    out.deltas.extend(deltas)
    return True


def _encode_bools(present: Sequence[Value], out: pb.V2Column) -> bool:
    out.kind = pb.V2_BOOL
    first = present[0]
    out.deltas.extend([1 if first else 0] if all(v is first for v in present)
                      else [1 if v else 0 for v in present])
    return True


def _encode_decimals(present: Sequence[Value], out: pb.V2Column) -> bool:
    unscaled, exponents = [], []
    # A decimal's text names its sign, digits and exponent exactly: the parts of each
    # distinct text are taken apart once (columns repeat their values).
    parts: dict[str, tuple[int, int] | None] = {}
    for value in present:
        text = str(value)
        if text in parts:
            part = parts[text]
        else:
            part = parts[text] = _decimal_parts(value)
        if part is None:
            return False
        unscaled.append(part[0])
        exponents.append(part[1])
    deltas = _deltas(unscaled)
    if deltas is None or not all(-_MAX_EXPONENT <= e <= _MAX_EXPONENT for e in exponents):
        return False
    out.kind = pb.V2_DECIMAL
    out.deltas.extend(deltas)
    if all(e == exponents[0] for e in exponents):
        out.exponent = exponents[0]
    else:
        out.exponents.extend(exponents)
    return True


def _decimal_parts(value: Value) -> tuple[int, int] | None:
    """(unscaled integer, exponent), or None for NaN, infinities and negative zero."""
    assert isinstance(value, Decimal)
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or (sign and not any(digits)):
        return None
    number = int("".join(map(str, digits)))
    return (-number if sign else number), exponent


def _encode_floats(present: Sequence[Value], out: pb.V2Column) -> bool:
    scaled = _floats_as_decimals(present)  # type: ignore[arg-type]
    if scaled is not None:
        exponent, deltas = scaled
        out.kind, out.exponent = pb.V2_FLOAT_DECIMAL, exponent
        out.deltas.extend(deltas)
    else:
        out.kind = pb.V2_FLOAT
        out.floats.extend(present)  # type: ignore[arg-type]
    return True


def _floats_as_decimals(present: Sequence[float]) -> tuple[int, list[int]] | None:
    """(exponent, deltas of the unscaled integers) writing each float as its shortest repr,
    when that is exact for every value (no -0.0, NaN or infinity)."""
    parts = []
    for value in present:
        if not math.isfinite(value) or (value == 0 and math.copysign(1, value) < 0):
            return None
        sign, digits, exponent = Decimal(repr(value)).as_tuple()
        assert isinstance(exponent, int)
        parts.append((-1 if sign else 1, int("".join(map(str, digits))), exponent))
    common = min(exponent for _, _, exponent in parts)
    if common < -_MAX_EXPONENT or max(exponent for _, _, exponent in parts) - common > 18:
        return None
    unscaled = [sign * number * 10 ** (exponent - common) for sign, number, exponent in parts]
    deltas = _deltas(unscaled)
    if deltas is None or any(float(f"{n}e{common}") != v
                             for n, v in zip(unscaled, present, strict=True)):
        return None
    return common, deltas


def _encode_texts(present: Sequence[Value], out: pb.V2Column) -> bool:
    texts: Sequence[str] = present  # type: ignore[assignment]
    if len(texts) > 1 and _encode_numbered(texts, out):
        return True
    out.kind = pb.V2_TEXT
    first = texts[0]
    if texts.count(first) == len(texts):  # one text (a column of constants)
        out.blob = raw = first.encode("utf-8")
        out.lengths.append(len(raw))
        return True
    # Distinct texts are distinct in UTF-8: each is encoded once.
    index: dict[str, int] = {}
    picks = [index.setdefault(text, len(index)) for text in texts]
    distinct = [text.encode("utf-8") for text in index]
    out.blob = b"".join(distinct)
    out.lengths.extend(len(item) for item in distinct)
    if len(index) not in (1, len(texts)):
        out.picks.extend(picks)
    return True


def _encode_numbered(texts: Sequence[str], out: pb.V2Column) -> bool:
    first = _NUMBERED.fullmatch(texts[0])
    if first is None or (texts[0] == texts[-1] and all(t == texts[0] for t in texts)):
        return False
    prefix, numbers = first.group(1), []
    for text in texts:
        match = _NUMBERED.fullmatch(text)
        if match is None or match.group(1) != prefix:
            return False
        numbers.append(int(match.group(2)))
    deltas = _deltas(numbers)
    if deltas is None:
        return False
    out.kind, out.blob = pb.V2_TEXT_NUMBERED, prefix.encode("utf-8")
    out.deltas.extend(deltas)
    return True


def _encode_blobs(present: Sequence[Value], out: pb.V2Column) -> bool:
    out.kind = pb.V2_BLOB
    _encode_distinct(present, out)  # type: ignore[arg-type]
    return True


def _encode_json(present: Sequence[Value], out: pb.V2Column) -> bool:
    out.kind = pb.V2_JSON
    _encode_distinct([v.text.encode("utf-8") for v in present], out)  # type: ignore[union-attr]
    return True


def _encode_distinct(raw: Sequence[bytes], out: pb.V2Column) -> None:
    index: dict[bytes, int] = {}
    picks = [index.setdefault(item, len(index)) for item in raw]
    out.blob = b"".join(index)
    out.lengths.extend(len(item) for item in index)
    if len(index) not in (1, len(raw)):
        out.picks.extend(picks)


def _encode_timestamps(present: Sequence[Value], out: pb.V2Column) -> bool:
    return _encode_in_unit([epoch_micros(v) for v in present],  # type: ignore[arg-type]
                           pb.V2_TIMESTAMP, out)


def _encode_times(present: Sequence[Value], out: pb.V2Column) -> bool:
    micros = []
    for value in present:
        assert isinstance(value, dt.time)
        if value.tzinfo is not None:
            return False
        micros.append(((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
                      + value.microsecond)
    return _encode_in_unit(micros, pb.V2_TIME, out)


def _encode_in_unit(micros: list[int], kind: int, out: pb.V2Column) -> bool:
    exponent = next(e for e in _UNITS if all(m % 10**e == 0 for m in micros))
    deltas = _deltas([m // 10**exponent for m in micros])
    if deltas is None:
        return False
    out.kind, out.exponent = kind, exponent  # type: ignore[assignment]
    out.deltas.extend(deltas)
    return True


def _encode_dates(present: Sequence[Value], out: pb.V2Column) -> bool:
    deltas = _deltas([v.toordinal() - _EPOCH_ORDINAL for v in present])  # type: ignore[union-attr]
    assert deltas is not None
    out.kind = pb.V2_DATE
    out.deltas.extend(deltas)
    return True


_TYPE_KINDS: dict[type, int] = {
    bool: pb.V2_BOOL, int: pb.V2_INT, Decimal: pb.V2_DECIMAL, float: pb.V2_FLOAT,
    str: pb.V2_TEXT, bytes: pb.V2_BLOB, JsonText: pb.V2_JSON, dt.datetime: pb.V2_TIMESTAMP,
    dt.date: pb.V2_DATE, dt.time: pb.V2_TIME, BitString: pb.V2_VALUES,
}
_ENCODERS: dict[int, Callable[[Sequence[Value], pb.V2Column], bool]] = {
    pb.V2_INT: _encode_ints, pb.V2_BOOL: _encode_bools, pb.V2_DECIMAL: _encode_decimals,
    pb.V2_FLOAT: _encode_floats, pb.V2_TEXT: _encode_texts, pb.V2_BLOB: _encode_blobs,
    pb.V2_JSON: _encode_json, pb.V2_TIMESTAMP: _encode_timestamps, pb.V2_DATE: _encode_dates,
    pb.V2_TIME: _encode_times,
}


# ----------------------------------------------------------------------------- decoding


def decode_column(column: pb.V2Column, count: int,
                  revisions: Revisions | None = None) -> list[Value]:
    """The `count` values of a column; MalformedPayload if it does not hold exactly that many
    or anything in it is unreadable."""
    kind = column.kind
    if kind == pb.V2_KIND_UNSPECIFIED:
        if column.ByteSize():
            raise MalformedPayload("a column without a kind holds data")
        return [None] * count
    nulls = _null_flags(column.nulls, count)
    present = count - sum(nulls) if nulls is not None else count
    if kind in (pb.V2_REVISION_TEXT, pb.V2_REVISION_BYTES):
        if nulls is not None or revisions is None or len(revisions) != count:
            raise MalformedPayload("a revision column outside an image")
        return _revision_values(kind, revisions)
    if present == 0:
        raise MalformedPayload("a column of NULLs with a kind")
    reader = _READERS.get(kind)
    if reader is None:
        raise MalformedPayload("unknown column kind")
    try:
        values = reader(column, present)
    except CONVERSION_ERRORS as error:
        raise MalformedPayload("unreadable column value") from error
    if len(values) != present:
        raise MalformedPayload("a column holds another number of values than its events")
    if nulls is None:
        return values
    it = iter(values)
    return [None if null else next(it) for null in nulls]


def _null_flags(raw: bytes, count: int) -> list[bool] | None:
    if not raw:
        return None
    if len(raw) != (count + 7) // 8 or (count % 8 and raw[-1] >> (count % 8)):
        raise MalformedPayload("a NULL bitmap does not fit its column")
    return [bool(raw[i >> 3] >> (i & 7) & 1) for i in range(count)]


def _revision_values(kind: int, revisions: Revisions) -> list[Value]:
    out: list[Value] = []
    for revision in revisions:
        if revision is None:
            raise MalformedPayload("column refers to a revision the event does not carry")
        out.append(revision.text if kind == pb.V2_REVISION_TEXT else revision.value)
    return out


def _numbers(column: pb.V2Column, present: int) -> list[int]:
    deltas = column.deltas
    if len(deltas) == 1 and present > 1:
        return [deltas[0]] * present
    if len(deltas) != present:
        raise MalformedPayload("a column holds another number of values than its events")
    return list(accumulate(deltas))


def _read_ints(column: pb.V2Column, present: int) -> list[Value]:
    numbers = _numbers(column, present)
    if not _fits(numbers):
        raise MalformedPayload("an integer column leaves int64")
    return list(numbers)


def _read_bools(column: pb.V2Column, present: int) -> list[Value]:
    deltas = column.deltas
    raw = [deltas[0]] * present if len(deltas) == 1 else list(deltas)
    if any(v not in (0, 1) for v in raw):
        raise MalformedPayload("a boolean column holds another number")
    return [v == 1 for v in raw]


def _read_decimals(column: pb.V2Column, present: int) -> list[Value]:
    numbers = _numbers(column, present)
    exponents = list(column.exponents) or [column.exponent] * present
    if len(exponents) != present or any(abs(e) > _MAX_EXPONENT for e in exponents):
        raise MalformedPayload("decimal exponents do not fit their column")
    return [Decimal((1 if n < 0 else 0, tuple(map(int, str(abs(n)))), e))
            for n, e in zip(numbers, exponents, strict=True)]


def _read_float_decimals(column: pb.V2Column, present: int) -> list[Value]:
    if abs(column.exponent) > _MAX_EXPONENT:
        raise MalformedPayload("float exponent out of range")
    exponent = column.exponent
    return [float(f"{n}e{exponent}") for n in _numbers(column, present)]


def _read_floats(column: pb.V2Column, present: int) -> list[Value]:
    return list(column.floats)


def _distinct(column: pb.V2Column, present: int) -> list[bytes]:
    blob, lengths = column.blob, column.lengths
    if sum(lengths) != len(blob):
        raise MalformedPayload("text lengths do not match their bytes")
    distinct, position = [], 0
    for length in lengths:
        distinct.append(blob[position:position + length])
        position += length
    picks = column.picks
    if not picks:
        if len(distinct) == 1:
            return distinct * present
        return distinct
    if any(pick >= len(distinct) for pick in picks):
        raise MalformedPayload("a text index outside its column")
    return [distinct[pick] for pick in picks]


def _read_texts(column: pb.V2Column, present: int) -> list[Value]:
    return [raw.decode("utf-8") for raw in _distinct(column, present)]


def _read_blobs(column: pb.V2Column, present: int) -> list[Value]:
    return list(_distinct(column, present))


def _read_json(column: pb.V2Column, present: int) -> list[Value]:
    return [JsonText(raw.decode("utf-8")) for raw in _distinct(column, present)]


def _read_numbered(column: pb.V2Column, present: int) -> list[Value]:
    prefix = column.blob.decode("utf-8")
    numbers = _numbers(column, present)
    if any(n < 0 for n in numbers):
        raise MalformedPayload("a numbered text with a negative number")
    return [f"{prefix}{n}" for n in numbers]


def _unit(column: pb.V2Column) -> int:
    if column.exponent not in _UNITS:
        raise MalformedPayload("unknown time unit")
    return int(10**column.exponent)


def _read_timestamps(column: pb.V2Column, present: int) -> list[Value]:
    unit = _unit(column)
    return [moment_from_micros(n * unit) for n in _numbers(column, present)]


def _read_times(column: pb.V2Column, present: int) -> list[Value]:
    unit, out = _unit(column), list[Value]()
    for number in _numbers(column, present):
        micros = number * unit
        if not 0 <= micros < _MICROS_PER_DAY:
            raise MalformedPayload("time of day out of range")
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        out.append(dt.time(minutes // 60, minutes % 60, second, micro))
    return out


def _read_dates(column: pb.V2Column, present: int) -> list[Value]:
    return [dt.date.fromordinal(n + _EPOCH_ORDINAL) for n in _numbers(column, present)]


def _read_values(column: pb.V2Column, present: int) -> list[Value]:
    return [value_from_wire(value) for value in column.values]


_READERS: dict[int, Callable[[pb.V2Column, int], list[Value]]] = {
    pb.V2_INT: _read_ints, pb.V2_BOOL: _read_bools, pb.V2_DECIMAL: _read_decimals,
    pb.V2_FLOAT_DECIMAL: _read_float_decimals, pb.V2_FLOAT: _read_floats,
    pb.V2_TEXT: _read_texts, pb.V2_BLOB: _read_blobs, pb.V2_JSON: _read_json,
    pb.V2_TEXT_NUMBERED: _read_numbered, pb.V2_TIMESTAMP: _read_timestamps,
    pb.V2_DATE: _read_dates, pb.V2_TIME: _read_times, pb.V2_VALUES: _read_values,
}
