"""Column values, interned names, revisions and record keys as `sync.proto` messages.

Lossless for every domain value type; decoding raises MalformedPayload for anything unreadable.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from tidesync.domain.change_event import RecordKey, Revision
from tidesync.domain.values import BitString, JsonText, Value, require_utc
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.protocol import MalformedPayload

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_MICROS_PER_DAY = 86_400_000_000
_INT64 = range(-(2**63), 2**63)
CONVERSION_ERRORS = (ValueError, TypeError, OverflowError, InvalidOperation)


# ----------------------------------------------------------------------------- names


class NameTable:
    """The per-message table of interned names that `*_ref` fields index."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = list(names)
        self._refs = {name: ref for ref, name in enumerate(self.names)}

    def ref(self, name: str) -> int:
        ref = self._refs.get(name)
        if ref is None:
            ref = self._refs[name] = len(self.names)
            self.names.append(name)
        return ref

    def name(self, ref: int) -> str:
        if ref >= len(self.names):
            raise MalformedPayload(f"name reference {ref} outside the table")
        return self.names[ref]


# ----------------------------------------------------------------------------- values


def value_to_wire(value: Value, out: pb.Value) -> None:
    """Fill `out` with one column value (lossless for every domain value type)."""
    # bool before int (subclass); datetime before date (subclass).
    if value is None:
        out.is_null = True
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        _int_to_wire(value, out)
    elif isinstance(value, float):
        out.float_value = value
    elif isinstance(value, Decimal):
        out.decimal = str(value)
    elif isinstance(value, str):
        out.text = value
    elif isinstance(value, bytes):
        out.blob = value
    else:
        _temporal_or_special_to_wire(value, out)


def _int_to_wire(value: int, out: pb.Value) -> None:
    if value in _INT64:
        out.int_value = value
    else:
        out.big_int = str(value)


def _temporal_or_special_to_wire(value: Value, out: pb.Value) -> None:
    if isinstance(value, dt.datetime):
        out.timestamp_micros = epoch_micros(value)
    elif isinstance(value, dt.date):
        out.date_days = value.toordinal() - _EPOCH_ORDINAL
    elif isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise ValueError("a time value carries no zone")
        out.time_micros = _time_micros(value)
    elif isinstance(value, JsonText):
        out.json = value.text
    elif isinstance(value, BitString):
        out.bits.length, out.bits.value = value.length, value.value
    else:
        raise TypeError(f"unsupported value type {type(value).__name__}")


def value_from_wire(wire: pb.Value, revisions: EventRevisions | None = None) -> Value:
    """The domain value of a wire value; raises MalformedPayload for anything unreadable."""
    kind = wire.WhichOneof("kind")
    # The common kinds first, without a table lookup: this runs for every column received.
    if kind == "int_value":
        return wire.int_value
    if kind == "text":
        return wire.text
    if kind is None:
        raise MalformedPayload("value without a kind")
    if kind == "event_revision":
        if revisions is None:
            raise MalformedPayload("revision reference outside a change event")
        return revisions.value_of(wire.event_revision)
    try:
        return _VALUE_READERS[kind](wire)
    except CONVERSION_ERRORS as error:
        raise MalformedPayload(f"bad {kind} value") from error


_VALUE_READERS: dict[str, Callable[[pb.Value], Value]] = {
    "is_null": lambda w: None,
    "bool_value": lambda w: w.bool_value,
    "int_value": lambda w: w.int_value,
    "big_int": lambda w: int(w.big_int),
    "float_value": lambda w: w.float_value,
    "decimal": lambda w: Decimal(w.decimal),
    "text": lambda w: w.text,
    "blob": lambda w: w.blob,
    "timestamp_micros": lambda w: _EPOCH + dt.timedelta(microseconds=w.timestamp_micros),
    "date_days": lambda w: dt.date.fromordinal(w.date_days + _EPOCH_ORDINAL),
    "time_micros": lambda w: _time_of_day(w.time_micros),
    "json": lambda w: JsonText(w.json),
    "bits": lambda w: BitString(w.bits.length, w.bits.value),
}


def epoch_micros(moment: dt.datetime) -> int:
    return (require_utc(moment) - _EPOCH) // dt.timedelta(microseconds=1)


def moment_from_micros(micros: int) -> dt.datetime:
    try:  # (not `with _malformed_on_error`: this runs for every decoded event)
        return _EPOCH + dt.timedelta(microseconds=micros)
    except CONVERSION_ERRORS as error:
        raise MalformedPayload("timestamp out of range") from error


def _time_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _time_of_day(micros: int) -> dt.time:
    if micros >= _MICROS_PER_DAY:
        raise ValueError("time of day beyond 24h")
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    return dt.time(minutes // 60, minutes % 60, second, micro)


@contextmanager
def _malformed_on_error(what: str) -> Iterator[None]:
    # The one place where conversion errors of received data become MalformedPayload.
    try:
        yield
    except CONVERSION_ERRORS as error:
        raise MalformedPayload(what) from error


# ----------------------------------------------------------------------------- revisions


@dataclass(frozen=True, slots=True)
class EventRevisions:
    """An event's revisions, which its image columns reference instead of repeating them."""

    base: Revision | None
    result: Revision | None

    def before_references(self) -> dict[str | bytes, pb.EventRevision]:
        return _references(self.base, pb.BASE_REVISION_TEXT, pb.BASE_REVISION_BYTES)

    def after_references(self) -> dict[str | bytes, pb.EventRevision]:
        return _references(self.result, pb.RESULT_REVISION_TEXT, pb.RESULT_REVISION_BYTES)

    def value_of(self, reference: pb.EventRevision) -> Value:
        revision, as_text = {
            pb.BASE_REVISION_TEXT: (self.base, True),
            pb.BASE_REVISION_BYTES: (self.base, False),
            pb.RESULT_REVISION_TEXT: (self.result, True),
            pb.RESULT_REVISION_BYTES: (self.result, False),
        }.get(reference, (None, False))
        if revision is None:
            raise MalformedPayload("column refers to a revision the event does not carry")
        return revision.text if as_text else revision.value


def _references(
    revision: Revision | None, as_text: pb.EventRevision, as_bytes: pb.EventRevision,
) -> dict[str | bytes, pb.EventRevision]:
    # Only exact forms qualify (lower-case UUID text or the 16 bytes), so decoding is lossless.
    return {} if revision is None else {revision.text: as_text, revision.value: as_bytes}


# ----------------------------------------------------------------------------- columns


def columns_to_wire(
    pairs: Iterable[tuple[str, Value]], names: NameTable,
    out: RepeatedCompositeFieldContainer[pb.Column],
    references: Mapping[str | bytes, pb.EventRevision] | None = None,
) -> None:
    """Append named values to `out` as Columns whose names are interned in `names`."""
    for name, value in pairs:
        column = out.add(name_ref=names.ref(name))
        reference = references.get(value) if references and isinstance(value, str | bytes) else None
        if reference is not None:
            column.value.event_revision = reference
        else:
            value_to_wire(value, column.value)


def columns_from_wire(
    columns: Iterable[pb.Column], names: NameTable, revisions: EventRevisions | None = None,
) -> list[tuple[str, Value]]:
    if not columns:
        return []
    table = names.names  # (indexed directly, as `names.name` does: this runs per image)
    try:
        pairs = [(table[c.name_ref], value_from_wire(c.value, revisions)) for c in columns]
    except IndexError as error:
        raise MalformedPayload("name reference outside the table") from error
    if len(pairs) > 1 and len({name for name, _ in pairs}) != len(pairs):
        raise MalformedPayload("a column appears twice")
    return pairs


def record_key_to_wire(key: RecordKey, names: NameTable, out: pb.RecordKey) -> None:
    out.database_ref = names.ref(key.database)
    if key.schema is not None:
        out.schema_ref = names.ref(key.schema)
    out.table_ref = names.ref(key.table)
    columns_to_wire(key.primary_key, names, out.primary_key)


def record_key_from_wire(wire: pb.RecordKey, names: NameTable) -> RecordKey:
    try:  # (as `with _malformed_on_error`, which costs more: this runs for every event)
        return RecordKey(
            names.name(wire.database_ref), names.name(wire.table_ref),
            tuple(columns_from_wire(wire.primary_key, names)),
            names.name(wire.schema_ref) if wire.HasField("schema_ref") else None,
        )
    except CONVERSION_ERRORS as error:
        raise MalformedPayload("bad record key") from error
