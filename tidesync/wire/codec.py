"""The wire codec: encodes ChangeEvents and /sync/v1 messages for the link, decodes them with hard
limits. Bodies are zstd frames of the `sync.proto` messages; every decoding failure is a WireError.

This module gathers the codec's public names for its many callers (`codec.compress(...)`); the
code lives in `protocol` (versions, errors), `columns` (values, names, record keys), `events`,
`batches` (upload batches), `v2_*` (column-wise upload batches of major 2) and `bodies`
(zstd frames).
"""

from __future__ import annotations

from tidesync.wire.batches import (
    DecodedBatch,
    RejectedEvent,
    build_any_batch,
    build_batch,
    decode_batch,
    encode_batch,
    open_batch,
    serialize_batch,
)
from tidesync.wire.bodies import (
    DEFAULT_LEVEL,
    M,
    compress,
    compress_bytes,
    decompress_bytes,
    decompress_message,
    parse_message,
)
from tidesync.wire.columns import (
    EventRevisions,
    NameTable,
    columns_from_wire,
    columns_to_wire,
    record_key_from_wire,
    record_key_to_wire,
    value_from_wire,
    value_to_wire,
)
from tidesync.wire.events import as_received, event_from_wire, event_to_wire
from tidesync.wire.protocol import (
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_HEADER,
    SUPPORTED_MAJORS,
    SUPPORTED_PROTOCOL_VERSIONS,
    UPLOAD_V2_VERSION,
    ChecksumMismatch,
    DecompressedTooLarge,
    EventIdMismatch,
    MalformedPayload,
    PayloadTooLarge,
    UnsupportedProtocol,
    WireError,
    WireReason,
    check_protocol_version,
    error_response,
)
from tidesync.wire.v2_encode import BeforeValues, build_batch_v2

__all__ = [
    "DEFAULT_LEVEL",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSION_HEADER",
    "SUPPORTED_MAJORS",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "UPLOAD_V2_VERSION",
    "BeforeValues",
    "ChecksumMismatch",
    "DecodedBatch",
    "DecompressedTooLarge",
    "EventIdMismatch",
    "EventRevisions",
    "M",
    "MalformedPayload",
    "NameTable",
    "PayloadTooLarge",
    "RejectedEvent",
    "UnsupportedProtocol",
    "WireError",
    "WireReason",
    "as_received",
    "build_any_batch",
    "build_batch",
    "build_batch_v2",
    "check_protocol_version",
    "columns_from_wire",
    "columns_to_wire",
    "compress",
    "compress_bytes",
    "decode_batch",
    "decompress_bytes",
    "decompress_message",
    "encode_batch",
    "error_response",
    "event_from_wire",
    "event_to_wire",
    "open_batch",
    "parse_message",
    "record_key_from_wire",
    "record_key_to_wire",
    "serialize_batch",
    "value_from_wire",
    "value_to_wire",
]
