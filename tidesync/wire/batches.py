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
from tidesync.wire.events import event_from_wire, event_to_wire, uuid_from_wire
from tidesync.wire.protocol import (
    PROTOCOL_VERSION,
    ChecksumMismatch,
    WireError,
    check_protocol_version,
)


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
        batch_id=uuid_from_wire(batch.batch_id, "batch_id"),
        created_at=moment_from_micros(batch.created_at_micros),
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
