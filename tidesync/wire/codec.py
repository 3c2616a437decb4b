"""Encodes ChangeEvents and /sync/v1 messages for the link, and decodes them with hard limits.

Bodies are zstd frames of the `sync.proto` messages; every decoding failure is a WireError.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import hashlib
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import TypeVar

import zstandard
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import DecodeError, Message

from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.errors import TidesyncError
from tidesync.domain.values import BitString, JsonText, Row, Value, canonical_value, require_utc
from tidesync.wire import sync_pb2 as pb

PROTOCOL_VERSION = "1.0"
"""The /sync/v1 protocol version this code speaks, "major.minor"."""

SUPPORTED_PROTOCOL_VERSIONS = (PROTOCOL_VERSION,)
"""Newest version of each major this code accepts (any minor of these majors is accepted)."""
SUPPORTED_MAJORS = frozenset(int(version.split(".")[0]) for version in SUPPORTED_PROTOCOL_VERSIONS)
PROTOCOL_VERSION_HEADER = "Tidesync-Protocol-Version"
"""Carries protocol_version on GET requests, which have no body."""

DEFAULT_LEVEL = 3
_VERSION_PATTERN = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_MICROS_PER_DAY = 86_400_000_000
_INT64 = range(-(2**63), 2**63)
_CONVERSION_ERRORS = (ValueError, TypeError, OverflowError, InvalidOperation)
_MAX_EXPANSION = 32_768
"""Most output one input byte of a zstd frame can produce (a 4-byte RLE block gives 128 KiB)."""

M = TypeVar("M", bound=Message)


# ----------------------------------------------------------------------------- errors


class WireReason(enum.StrEnum):
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    DECOMPRESSED_TOO_LARGE = "DECOMPRESSED_TOO_LARGE"
    MALFORMED_PAYLOAD = "MALFORMED_PAYLOAD"
    UNSUPPORTED_PROTOCOL = "UNSUPPORTED_PROTOCOL"
    MALFORMED_PROTOCOL_VERSION = "MALFORMED_PROTOCOL_VERSION"
    CHECKSUM_MISMATCH = "CHECKSUM_MISMATCH"


class WireError(TidesyncError):
    """A body or message that cannot be accepted; `reason` is the stable code to answer with."""

    reason: WireReason = WireReason.MALFORMED_PAYLOAD

    def __init__(self, message: str, reason: WireReason | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class PayloadTooLarge(WireError):
    reason = WireReason.PAYLOAD_TOO_LARGE


class DecompressedTooLarge(WireError):
    reason = WireReason.DECOMPRESSED_TOO_LARGE


class MalformedPayload(WireError):
    reason = WireReason.MALFORMED_PAYLOAD


class UnsupportedProtocol(WireError):
    """An unknown protocol major (UNSUPPORTED_PROTOCOL) or unreadable version text
    (MALFORMED_PROTOCOL_VERSION). Not retryable."""

    reason = WireReason.UNSUPPORTED_PROTOCOL


class ChecksumMismatch(WireError):
    reason = WireReason.CHECKSUM_MISMATCH


def error_response(error: WireError, request_id: str = "") -> pb.ErrorResponse:
    """The ErrorResponse body answering a WireError."""
    return pb.ErrorResponse(
        reason_code=error.reason.value, message=str(error), request_id=request_id,
        supported_protocol_versions=SUPPORTED_PROTOCOL_VERSIONS,
    )


# ----------------------------------------------------------------------------- versions


@functools.lru_cache(maxsize=64)
def check_protocol_version(version: str) -> tuple[int, int]:
    """Parse "major.minor" and refuse an unknown major; any minor of a known major is fine.

    Cached: every decoded event checks its version (a refusal raises again each time)."""
    match = _VERSION_PATTERN.fullmatch(version)
    if match is None:
        raise UnsupportedProtocol(
            "protocol version must be major.minor", WireReason.MALFORMED_PROTOCOL_VERSION
        )
    major, minor = int(match.group(1)), int(match.group(2))
    if major not in SUPPORTED_MAJORS:
        raise UnsupportedProtocol(f"protocol major {major} is not supported")
    return major, minor


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
        out.timestamp_micros = _micros(value)
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
    except _CONVERSION_ERRORS as error:
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


def _micros(moment: dt.datetime) -> int:
    return (require_utc(moment) - _EPOCH) // dt.timedelta(microseconds=1)


def _moment(micros: int) -> dt.datetime:
    try:  # (not `with _malformed_on_error`: this runs for every decoded event)
        return _EPOCH + dt.timedelta(microseconds=micros)
    except _CONVERSION_ERRORS as error:
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
    except _CONVERSION_ERRORS as error:
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


def _revision_bytes(revision: Revision | None) -> bytes:
    return b"" if revision is None else revision.value


def _revision_from(raw: bytes, what: str) -> Revision | None:
    if not raw:
        return None
    if len(raw) != 16:
        raise MalformedPayload(f"{what} must be 16 bytes")
    return Revision(raw)


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
    except _CONVERSION_ERRORS as error:
        raise MalformedPayload("bad record key") from error


# ----------------------------------------------------------------------------- events


def event_to_wire(
    event: ChangeEvent, names: NameTable, *, include_before: bool = True,
    batch_version: str = PROTOCOL_VERSION, out: pb.ChangeEvent | None = None,
) -> pb.ChangeEvent:
    """One ChangeEvent for an UploadBatch whose name table is `names` (filled into `out`,
    a fresh element of the batch, when given).

    Images leave out the key columns; an UPDATE sends only its changed columns, and their
    before values only with `include_before` (a DELETE likewise sends its before image only
    with `include_before`). Raises ValueError for an image that disagrees with the key.
    """
    wire = pb.ChangeEvent() if out is None else out
    wire.event_id = event.event_id.bytes
    wire.origin_node_ref = names.ref(event.origin_node_id)
    wire.source_connector_ref = names.ref(event.source_connector_id)
    wire.source_topic_ref = names.ref(event.source_topic)
    wire.source_partition = event.source_partition
    wire.source_position = event.source_position
    wire.operation = _WIRE_OPERATIONS[event.operation]
    wire.captured_at_micros = _micros(event.captured_at)
    wire.base_revision = _revision_bytes(event.base_revision)
    wire.result_revision = _revision_bytes(event.result_revision)
    wire.trace_id = event.trace_id
    wire.replay_epoch = event.replay_epoch
    if event.schema_version != batch_version:
        wire.schema_version = event.schema_version
    record_key_to_wire(event.record, names, wire.record)
    _optional_fields_to_wire(event, names, wire)
    _images_to_wire(event, names, wire, include_before)
    return wire


def _optional_fields_to_wire(event: ChangeEvent, names: NameTable, wire: pb.ChangeEvent) -> None:
    if event.source_sequence is not None:
        wire.source_sequence = event.source_sequence
    if event.rule_id is not None:
        wire.rule_id_ref = names.ref(event.rule_id)
    if event.rule_version is not None:
        wire.rule_version = event.rule_version
    if event.transaction_id is not None:
        wire.transaction_id = event.transaction_id
    if event.transaction_order is not None:
        wire.transaction_order = event.transaction_order
    if event.business_occurred_at is not None:
        wire.business_occurred_at_micros = _micros(event.business_occurred_at)
    columns_to_wire(event.source_details.items(), names, wire.source_details)


def _images_to_wire(
    event: ChangeEvent, names: NameTable, wire: pb.ChangeEvent, include_before: bool,
) -> None:
    revisions = EventRevisions(event.base_revision, event.result_revision)
    key_names = _key_names_checked(event)
    before, after = _wire_images(event, key_names)
    columns_to_wire(after, names, wire.after, revisions.after_references())
    if before and not include_before:
        wire.before_omitted = True
    elif before:
        columns_to_wire(before, names, wire.before, revisions.before_references())


def _wire_images(
    event: ChangeEvent, key_names: frozenset[str],
) -> tuple[list[tuple[str, Value]], list[tuple[str, Value]]]:
    """(before, after) pairs to send: no key columns; an UPDATE only its changed columns."""
    before, after = event.before or {}, event.after or {}
    if event.operation is Operation.UPDATE:
        changed = [name for name in event.changed_columns() if name not in key_names]
        return ([(n, before[n]) for n in changed if n in before],
                [(n, after[n]) for n in changed])
    return ([(n, v) for n, v in before.items() if n not in key_names],
            [(n, v) for n, v in after.items() if n not in key_names])


def _key_names_checked(event: ChangeEvent) -> frozenset[str]:
    # The receiver rebuilds images from the key, so each image must agree with the key.
    if event.operation in (Operation.INSERT, Operation.SNAPSHOT) and event.before is not None:
        raise ValueError(f"{event.operation} events carry no before image on the wire")
    for image in (event.before, event.after):
        for name, value in event.record.primary_key:
            if image is not None and (
                name not in image or canonical_value(image[name]) != canonical_value(value)
            ):
                raise ValueError("an image disagrees with the record key")
    return frozenset(name for name, _ in event.record.primary_key)


def event_from_wire(
    wire: pb.ChangeEvent, names: NameTable, *, batch_version: str = PROTOCOL_VERSION,
) -> ChangeEvent:
    """The ChangeEvent a wire event describes (an UPDATE keeps only key + changed columns)."""
    schema_version = wire.schema_version or batch_version
    check_protocol_version(schema_version)
    operation = _operation_from_wire(wire.operation)
    record = record_key_from_wire(wire.record, names)
    revisions = EventRevisions(
        _revision_from(wire.base_revision, "base_revision"),
        _revision_from(wire.result_revision, "result_revision"),
    )
    before, after = _images_from_wire(wire, operation, record, names, revisions)
    has = wire.HasField  # (looked up once: this runs for every event)
    try:  # (as `with _malformed_on_error`, which costs more: this runs for every event)
        return ChangeEvent(
            event_id=_uuid_from(wire.event_id, "event_id"),
            origin_node_id=names.name(wire.origin_node_ref),
            source_connector_id=names.name(wire.source_connector_ref),
            source_topic=names.name(wire.source_topic_ref),
            source_partition=wire.source_partition,
            source_position=wire.source_position,
            record=record, operation=operation,
            captured_at=_moment(wire.captured_at_micros),
            before=before, after=after,
            base_revision=revisions.base, result_revision=revisions.result,
            trace_id=wire.trace_id, replay_epoch=wire.replay_epoch,
            schema_version=schema_version,
            source_details=MappingProxyType(dict(columns_from_wire(wire.source_details, names))),
            source_sequence=wire.source_sequence if has("source_sequence") else None,
            rule_id=names.name(wire.rule_id_ref) if has("rule_id_ref") else None,
            rule_version=wire.rule_version if has("rule_version") else None,
            transaction_id=wire.transaction_id if has("transaction_id") else None,
            transaction_order=wire.transaction_order if has("transaction_order") else None,
            business_occurred_at=_moment(wire.business_occurred_at_micros)
            if has("business_occurred_at_micros") else None,
        )
    except _CONVERSION_ERRORS as error:
        raise MalformedPayload("inconsistent change event") from error


def _images_from_wire(
    wire: pb.ChangeEvent, operation: Operation, record: RecordKey, names: NameTable,
    revisions: EventRevisions,
) -> tuple[Row | None, Row | None]:
    before = columns_from_wire(wire.before, names, revisions)
    after = columns_from_wire(wire.after, names, revisions)
    if operation in (Operation.INSERT, Operation.SNAPSHOT):
        if before or wire.before_omitted:
            raise MalformedPayload(f"{operation} carries no before image")
        return None, _with_key(record, after)
    if operation is Operation.DELETE and after:
        raise MalformedPayload("DELETE carries no after image")
    return (_with_key(record, before),
            None if operation is Operation.DELETE else _with_key(record, after))


def _with_key(record: RecordKey, image: list[tuple[str, Value]]) -> Row:
    """An image with the key columns it left out, handed over frozen (see `frozen_row`:
    nothing else holds the dict)."""
    row = dict(record.primary_key)
    row.update(image)
    # The image's names are distinct, so a shorter row means it named a key column.
    if len(row) != len(record.primary_key) + len(image):
        raise MalformedPayload("an image repeats a key column")
    return MappingProxyType(row)


_WIRE_OPERATIONS: dict[Operation, pb.Operation] = {
    Operation.INSERT: pb.INSERT, Operation.UPDATE: pb.UPDATE, Operation.DELETE: pb.DELETE,
    Operation.SNAPSHOT: pb.SNAPSHOT,
}
_OPERATIONS = {wire: operation for operation, wire in _WIRE_OPERATIONS.items()}


def _operation_from_wire(operation: pb.Operation) -> Operation:
    if operation not in _OPERATIONS:
        raise MalformedPayload("unknown operation")
    return _OPERATIONS[operation]


def _uuid_from(raw: bytes, what: str) -> uuid.UUID:
    if len(raw) != 16:
        raise MalformedPayload(f"{what} must be 16 bytes")
    return uuid.UUID(bytes=raw)


def as_received(event: ChangeEvent, *, include_before: bool = True) -> ChangeEvent:
    """The event as the receiver decodes it: what `event_to_wire` keeps of it."""
    names = NameTable()
    return event_from_wire(
        event_to_wire(event, names, include_before=include_before), names,
    )


# ----------------------------------------------------------------------------- batches


def build_batch(
    events: Sequence[ChangeEvent], *, node_id: str, batch_id: uuid.UUID,
    created_at: dt.datetime, include_before: bool = True,
) -> pb.UploadBatch:
    """The UploadBatch message of `events` (without its integrity trailer)."""
    names = NameTable()
    batch = pb.UploadBatch(
        protocol_version=PROTOCOL_VERSION, node_id=node_id, batch_id=batch_id.bytes,
        created_at_micros=_micros(created_at),
    )
    for event in events:
        event_to_wire(event, names, include_before=include_before, out=batch.events.add())
    batch.strings.extend(names.names)
    return batch


def serialize_batch(batch: pb.UploadBatch) -> bytes:
    """The batch's bytes followed by its trailer: uncompressed_bytes, then the SHA-256
    checksum of the bytes before the trailer (see UploadBatch in sync.proto)."""
    content = batch
    if batch.uncompressed_bytes or batch.checksum:
        content = pb.UploadBatch()
        content.CopyFrom(batch)
        content.ClearField("uncompressed_bytes")
        content.ClearField("checksum")
    body = content.SerializeToString()
    return body + _trailer(len(body), hashlib.sha256(body).digest())


def _trailer(uncompressed_bytes: int, checksum: bytes) -> bytes:
    return pb.UploadBatch(uncompressed_bytes=uncompressed_bytes, checksum=checksum
                          ).SerializeToString()


def encode_batch(
    events: Sequence[ChangeEvent], *, node_id: str, batch_id: uuid.UUID,
    created_at: dt.datetime, include_before: bool = True, level: int = DEFAULT_LEVEL,
) -> bytes:
    """The zstd-compressed body of POST /sync/v1/batches for `events`."""
    batch = build_batch(events, node_id=node_id, batch_id=batch_id, created_at=created_at,
                        include_before=include_before)
    return compress_bytes(serialize_batch(batch), level)


@dataclass(frozen=True, slots=True)
class RejectedEvent:
    """An event of a batch that could not be decoded; the rest of the batch still counts."""

    index: int
    event_id: bytes
    error: WireError


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A verified UploadBatch: header fields plus each event, decoded or rejected, in order."""

    protocol_version: str
    node_id: str
    batch_id: uuid.UUID
    created_at: dt.datetime
    uncompressed_bytes: int
    checksum: bytes
    items: tuple[ChangeEvent | RejectedEvent, ...]

    @property
    def events(self) -> list[ChangeEvent]:
        return [item for item in self.items if isinstance(item, ChangeEvent)]

    @property
    def rejected(self) -> list[RejectedEvent]:
        return [item for item in self.items if isinstance(item, RejectedEvent)]


def open_batch(
    body: bytes, max_compressed: int, max_decompressed: int,
) -> tuple[bytes, pb.UploadBatch]:
    """Decompress (hard caps), parse, check the version and verify the trailer checksum, but
    decode no event: the receiver's fast path. Returns the verified bytes and the message."""
    raw = decompress_bytes(body, max_compressed, max_decompressed)
    batch = parse_message(raw, pb.UploadBatch)
    check_protocol_version(batch.protocol_version)
    _verify_trailer(raw, batch)
    return raw, batch


def decode_batch(body: bytes, max_compressed: int, max_decompressed: int) -> DecodedBatch:
    """Decompress (hard caps), verify the trailer checksum and version, decode each event."""
    _, batch = open_batch(body, max_compressed, max_decompressed)
    names = NameTable(batch.strings)
    return DecodedBatch(
        protocol_version=batch.protocol_version,
        node_id=batch.node_id,
        batch_id=_uuid_from(batch.batch_id, "batch_id"),
        created_at=_moment(batch.created_at_micros),
        uncompressed_bytes=batch.uncompressed_bytes,
        checksum=batch.checksum,
        items=tuple(_decode_item(index, wire, names, batch.protocol_version)
                    for index, wire in enumerate(batch.events)),
    )


def _verify_trailer(raw: bytes, batch: pb.UploadBatch) -> None:
    trailer = _trailer(batch.uncompressed_bytes, batch.checksum)
    covered = batch.uncompressed_bytes
    if len(batch.checksum) != 32 or not raw.endswith(trailer) or (
        covered + len(trailer) != len(raw)
    ):
        raise ChecksumMismatch("batch trailer missing or misplaced")
    if hashlib.sha256(memoryview(raw)[:covered]).digest() != batch.checksum:
        raise ChecksumMismatch("batch checksum does not match its bytes")


def _decode_item(
    index: int, wire: pb.ChangeEvent, names: NameTable, batch_version: str,
) -> ChangeEvent | RejectedEvent:
    try:
        return event_from_wire(wire, names, batch_version=batch_version)
    except WireError as error:
        return RejectedEvent(index, wire.event_id, error)


# ----------------------------------------------------------------------------- bodies


def compress(message: Message, level: int = DEFAULT_LEVEL) -> bytes:
    """The zstd body of any /sync/v1 message (use `encode_batch` for upload batches)."""
    return compress_bytes(message.SerializeToString(), level)


def compress_bytes(raw: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)


def decompress_message(
    body: bytes, cls: type[M], *, max_compressed: int, max_decompressed: int,
) -> M:
    """Decompress and parse a body; refuses an unknown protocol major if the message has one."""
    message = parse_message(decompress_bytes(body, max_compressed, max_decompressed), cls)
    version = getattr(message, "protocol_version", None)
    if isinstance(version, str):
        check_protocol_version(version)
    return message


def parse_message(raw: bytes, cls: type[M]) -> M:
    message = cls()
    try:
        message.ParseFromString(raw)
    except DecodeError as error:
        raise MalformedPayload(f"not a valid {cls.DESCRIPTOR.name}") from error
    return message


def decompress_bytes(body: bytes, max_compressed: int, max_decompressed: int) -> bytes:
    """The content of one complete zstd frame, never holding more than about twice
    `max_decompressed` (the frame's declared size is not trusted)."""
    if len(body) > max_compressed:
        raise PayloadTooLarge(f"body of {len(body)} bytes exceeds {max_compressed}")
    window = min(max(1 << 23, 1 << (max_decompressed - 1).bit_length()), 1 << 27)
    inflater = zstandard.ZstdDecompressor(max_window_size=window).decompressobj()
    output = bytearray()
    view, position = memoryview(body), 0
    try:
        while position < len(body) and not inflater.eof:
            step = _input_step(max_decompressed - len(output))
            output += inflater.decompress(view[position:position + step])
            position += step
            if len(output) > max_decompressed:
                raise DecompressedTooLarge(f"body inflates beyond {max_decompressed} bytes")
    except zstandard.ZstdError as error:
        raise MalformedPayload("not a valid zstd frame") from error
    if not inflater.eof or inflater.unused_data or position < len(body):
        raise MalformedPayload("truncated zstd frame or data after it")
    return bytes(output)


def _input_step(room: int) -> int:
    # Feed little enough input that one step cannot inflate far past the remaining room.
    return max(16, min(1 << 16, room // _MAX_EXPANSION))
