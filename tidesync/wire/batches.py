"""Upload batches (POST /sync/v1/batches): built, serialized with their integrity trailer and
compressed; opened under hard caps and verified, each event decoded or rejected on its own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from tidesync.domain.change_event import ChangeEvent
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.bodies import DEFAULT_LEVEL, compress_bytes, decompress_bytes, parse_message
from tidesync.wire.columns import NameTable, epoch_micros, moment_from_micros
from tidesync.wire.dictionaries import DictionaryLookup, named_dictionary
from tidesync.wire.events import event_from_wire, event_to_wire, uuid_from_wire
from tidesync.wire.protocol import (
    PROTOCOL_VERSION,
    ChecksumMismatch,
    MalformedPayload,
    NulInString,
    ShapeTooLarge,
    UnknownDictionary,
    UnsupportedProtocol,
    WireError,
    WireReason,
    check_protocol_version,
    check_schema_version,
)
from tidesync.wire.v2_decode import DecodedV2, decode_events
from tidesync.wire.v2_encode import BeforeValues, build_batch_v2

MAX_NAMES = 32_768
"""Most entries of a batch's `strings` table (distinct topics, tables, columns, nodes)."""
MAX_NAME_BYTES = 1024
"""Longest name, node id or protocol version text in a batch header."""
MAX_COLUMNS = 1 << 18
"""Most columns (key, images, source details) of all events of a batch together: what decoding
a batch in Python may cost is bounded by this, not only by its bytes."""
DEFAULT_MAX_EVENTS = 10_000
_HEADER_TEXT_FIELDS = frozenset({1, 2, 6})  # protocol_version, node_id, strings
_EVENTS_FIELD, _STRINGS_FIELD = 5, 6


def build_batch(
    events: Sequence[ChangeEvent], *, node_id: str, batch_id: uuid.UUID,
    created_at: dt.datetime, include_before: bool = True,
) -> pb.UploadBatch:
    """The UploadBatch message of `events` (without its integrity trailer)."""
    names = NameTable()
    batch = pb.UploadBatch(
        protocol_version=PROTOCOL_VERSION, node_id=node_id, batch_id=batch_id.bytes,
        created_at_micros=epoch_micros(created_at),
    )
    for event in events:
        event_to_wire(event, names, include_before=include_before, out=batch.events.add())
    batch.strings.extend(names.names)
    return batch


def serialize_batch(batch: pb.UploadBatch | pb.UploadBatchV2) -> bytes:
    """The batch's bytes followed by its trailer: uncompressed_bytes, then the SHA-256
    checksum of the bytes before the trailer (see UploadBatch in sync.proto)."""
    content = batch
    if batch.uncompressed_bytes or batch.checksum:
        content = type(batch)()
        content.CopyFrom(batch)  # type: ignore[arg-type]
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
    wire_version: int = 1, before_values: BeforeValues | None = None,
) -> bytes:
    """The zstd-compressed body of POST /sync/v1/batches for `events`: an UploadBatch
    (`wire_version` 1) or an UploadBatchV2 (2, whose before values follow `before_values`,
    by default all of them or none as `include_before` says)."""
    return compress_bytes(serialize_batch(build_any_batch(
        events, node_id=node_id, batch_id=batch_id, created_at=created_at,
        include_before=include_before, wire_version=wire_version,
        before_values=before_values)), level)


def build_any_batch(
    events: Sequence[ChangeEvent], *, node_id: str, batch_id: uuid.UUID,
    created_at: dt.datetime, include_before: bool = True, wire_version: int = 1,
    before_values: BeforeValues | None = None,
) -> pb.UploadBatch | pb.UploadBatchV2:
    """The upload batch message of `wire_version` (1 or 2) for `events`."""
    if wire_version == 1:
        return build_batch(events, node_id=node_id, batch_id=batch_id, created_at=created_at,
                           include_before=include_before)
    if wire_version != 2:
        raise ValueError(f"wire version {wire_version} is not one this code writes")
    if before_values is None:
        before_values = BeforeValues.ALL if include_before else BeforeValues.NONE
    return build_batch_v2(events, node_id=node_id, batch_id=batch_id, created_at=created_at,
                          before_values=before_values)


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
    body: bytes, max_compressed: int, max_decompressed: int, *,
    max_events: int = DEFAULT_MAX_EVENTS, dictionaries: DictionaryLookup | None = None,
    accept_v2: bool = True,
) -> tuple[bytes, pb.UploadBatch]:
    """Decompress (hard caps), check the shape caps on the raw bytes, parse, check the version
    and verify the trailer checksum, but decode no event: the receiver's fast path.

    Returns the bytes to store (the verified ones, re-serialized without fields this version
    does not know if there were any) and the message. A batch of major 2 is decoded whole
    (its event ids derived and checked) and handed over as the UploadBatch of the same events,
    which is what is stored.

    A body compressed with a zstd dictionary is read with the one `dictionaries` gives for
    its id (UnknownDictionary if none). `accept_v2` False refuses batches of major 2 and
    dictionaries as a receiver of major 1 only does (UnsupportedProtocol)."""
    raw = inflate(body, max_compressed, max_decompressed, dictionaries, accept_v2)
    if _is_v2(check_batch_shape(raw, max_events)):
        if not accept_v2:
            raise _major_1_only()
        return _as_v1(*_open_v2(raw, max_events))
    return _open_v1(raw)


def inflate(body: bytes, max_compressed: int, max_decompressed: int,
            dictionaries: DictionaryLookup | None = None, accept_v2: bool = True) -> bytes:
    """The decompressed body, read with the dictionary it names if it names one."""
    name, frame = named_dictionary(body)
    if name is None:
        return decompress_bytes(body, max_compressed, max_decompressed)
    if not accept_v2:
        raise _major_1_only()
    dictionary = dictionaries(name) if dictionaries is not None else None
    if dictionary is None:
        raise UnknownDictionary("the body is compressed with a dictionary this receiver does"
                                " not hold for its sender: send the dictionary again")
    return decompress_bytes(frame, max_compressed, max_decompressed, dictionary)


def _major_1_only() -> UnsupportedProtocol:
    refusal = UnsupportedProtocol("this receiver takes upload batches of major 1 only")
    refusal.supported = (PROTOCOL_VERSION,)
    return refusal


def _open_v1(raw: bytes) -> tuple[bytes, pb.UploadBatch]:
    batch = parse_message(raw, pb.UploadBatch)
    check_protocol_version(batch.protocol_version)
    _verify_trailer(raw, batch)
    for text in (batch.node_id, batch.protocol_version, *batch.strings):
        if "\x00" in text:
            raise NulInString("a name in the batch holds a NUL character")
    _check_column_count(batch)
    return _without_unknown_fields(raw, batch), batch


def _is_v2(version: bytes | None) -> bool:
    if version is None or not version.startswith(b"2."):
        return False
    try:
        return check_protocol_version(version.decode("utf-8"))[0] == 2
    except (UnicodeDecodeError, WireError):
        return False


def _open_v2(raw: bytes, max_events: int) -> tuple[pb.UploadBatchV2, DecodedV2]:
    batch = parse_message(raw, pb.UploadBatchV2)
    _verify_trailer(raw, batch)
    for text in (batch.node_id, batch.protocol_version, *batch.strings):
        if "\x00" in text:
            raise NulInString("a name in the batch holds a NUL character")
    return batch, decode_events(batch, max_events=max_events, max_columns=MAX_COLUMNS)


def _as_v1(header: pb.UploadBatchV2, decoded: DecodedV2) -> tuple[bytes, pb.UploadBatch]:
    """The UploadBatch carrying what a v2 batch carries, and its bytes with the trailer."""
    names = NameTable()
    batch = pb.UploadBatch(
        protocol_version=PROTOCOL_VERSION, node_id=header.node_id, batch_id=header.batch_id,
        created_at_micros=header.created_at_micros)
    try:
        for index, event in enumerate(decoded.events):
            wire = event_to_wire(event, names, out=batch.events.add())
            wire.before_omitted = index in decoded.before_omitted
    except (ValueError, TypeError) as error:
        raise MalformedPayload("an event of the batch cannot be stored") from error
    batch.strings.extend(names.names)
    return serialize_batch(batch), batch


def _check_column_count(batch: pb.UploadBatch) -> None:
    columns = sum(len(e.before) + len(e.after) + len(e.source_details)
                  + len(e.record.primary_key) for e in batch.events)
    if columns > MAX_COLUMNS:
        raise ShapeTooLarge(f"more than {MAX_COLUMNS} columns in one batch",
                            WireReason.TOO_MANY_COLUMNS)


def check_batch_shape(raw: bytes, max_events: int) -> bytes | None:
    """Count events and names, and measure header texts, on the serialized UploadBatch: a
    batch past a cap is refused before the parser allocates a message per entry. Returns the
    raw protocol_version (None if absent)."""
    version: bytes | None = None
    counts = {_EVENTS_FIELD: 0, _STRINGS_FIELD: 0}
    caps = {_EVENTS_FIELD: (max_events, WireReason.TOO_MANY_EVENTS),
            _STRINGS_FIELD: (MAX_NAMES, WireReason.TOO_MANY_NAMES)}
    position = 0
    while position < len(raw):
        key, position = _varint(raw, position)
        field_number, wire_type = key >> 3, key & 7
        if wire_type != 2:
            position = _skip_scalar(raw, position, wire_type)
            continue
        length, position = _varint(raw, position)
        if field_number == 1:
            version = raw[position:position + length]
        position += length
        if field_number in _HEADER_TEXT_FIELDS and length > MAX_NAME_BYTES:
            raise ShapeTooLarge(f"a name is longer than {MAX_NAME_BYTES} bytes",
                                WireReason.FIELD_TOO_LONG)
        if field_number in counts:
            counts[field_number] += 1
            cap, reason = caps[field_number]
            if counts[field_number] > cap:
                raise ShapeTooLarge(f"more than {cap} entries of field {field_number}", reason)
    if position != len(raw):
        raise MalformedPayload("not a valid UploadBatch")
    return version


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(raw) and shift < 64:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
    raise MalformedPayload("not a valid UploadBatch")


def _skip_scalar(raw: bytes, position: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(raw, position)[1]
    if wire_type in (1, 5):
        return position + (8 if wire_type == 1 else 4)
    raise MalformedPayload("not a valid UploadBatch")


def _without_unknown_fields(raw: bytes, batch: pb.UploadBatch) -> bytes:
    """The bytes to store: fields a newer client added are dropped (nothing here reads them),
    so the stored body holds only what this version understood and checked."""
    batch.DiscardUnknownFields()
    if batch.ByteSize() == len(raw):
        return raw
    return serialize_batch(batch)


def decode_batch(body: bytes, max_compressed: int, max_decompressed: int,
                 max_events: int = DEFAULT_MAX_EVENTS,
                 dictionaries: DictionaryLookup | None = None) -> DecodedBatch:
    """Decompress (hard caps), verify the trailer checksum and version, decode each event."""
    raw = inflate(body, max_compressed, max_decompressed, dictionaries)
    if _is_v2(check_batch_shape(raw, max_events)):
        return _decoded_v2(*_open_v2(raw, max_events))
    _, batch = _open_v1(raw)
    names = NameTable(batch.strings)
    return DecodedBatch(
        protocol_version=batch.protocol_version,
        node_id=batch.node_id,
        batch_id=uuid_from_wire(batch.batch_id, "batch_id"),
        created_at=moment_from_micros(batch.created_at_micros),
        uncompressed_bytes=batch.uncompressed_bytes,
        checksum=batch.checksum,
        items=tuple(_decode_item(index, wire, names, batch.protocol_version)
                    for index, wire in enumerate(batch.events)),
    )


def _verify_trailer(raw: bytes, batch: pb.UploadBatch | pb.UploadBatchV2) -> None:
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


def _decoded_v2(batch: pb.UploadBatchV2, decoded: DecodedV2) -> DecodedBatch:
    items: list[ChangeEvent | RejectedEvent] = []
    for index, event in enumerate(decoded.events):
        try:
            check_schema_version(event.schema_version)
        except WireError as error:
            items.append(RejectedEvent(index, event.event_id.bytes, error))
            continue
        items.append(event)
    return DecodedBatch(
        protocol_version=batch.protocol_version, node_id=batch.node_id,
        batch_id=uuid_from_wire(batch.batch_id, "batch_id"),
        created_at=moment_from_micros(batch.created_at_micros),
        uncompressed_bytes=batch.uncompressed_bytes, checksum=batch.checksum,
        items=tuple(items))
