"""The /sync/v1 protocol version this code speaks, and the errors a body or message is refused
with (each carries the stable reason code to answer with).
"""

from __future__ import annotations

import enum
import functools
import re

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.wire import sync_pb2 as pb

PROTOCOL_VERSION = "1.0"
"""The /sync/v1 protocol version this code speaks, "major.minor"."""

UPLOAD_V2_VERSION = "2.0"
"""The version of column-wise upload batches (UploadBatchV2). Major 2 is major 1 plus those
batches: every other message is the same, and ships keep sending them as "1.0"."""
SUPPORTED_PROTOCOL_VERSIONS = (PROTOCOL_VERSION, UPLOAD_V2_VERSION)
"""Newest version of each major this code accepts (any minor of these majors is accepted)."""
SCHEMA_MAJORS = frozenset({1})
"""Majors of a ChangeEvent's schema_version this code reads."""
SUPPORTED_MAJORS = frozenset(int(version.split(".")[0]) for version in SUPPORTED_PROTOCOL_VERSIONS)
PROTOCOL_VERSION_HEADER = "Tidesync-Protocol-Version"
"""Carries protocol_version on GET requests, which have no body."""

_VERSION_PATTERN = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})")


# ----------------------------------------------------------------------------- errors


class WireReason(enum.StrEnum):
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    DECOMPRESSED_TOO_LARGE = "DECOMPRESSED_TOO_LARGE"
    MALFORMED_PAYLOAD = "MALFORMED_PAYLOAD"
    UNSUPPORTED_PROTOCOL = "UNSUPPORTED_PROTOCOL"
    MALFORMED_PROTOCOL_VERSION = "MALFORMED_PROTOCOL_VERSION"
    CHECKSUM_MISMATCH = "CHECKSUM_MISMATCH"
    TOO_MANY_NAMES = "TOO_MANY_NAMES"
    FIELD_TOO_LONG = "FIELD_TOO_LONG"
    TOO_MANY_EVENTS = "TOO_MANY_EVENTS"
    TOO_MANY_COLUMNS = "TOO_MANY_COLUMNS"
    NUL_IN_STRING = "NUL_IN_STRING"
    EVENT_ID_MISMATCH = "EVENT_ID_MISMATCH"
    UNKNOWN_DICTIONARY = "UNKNOWN_DICTIONARY"
    BAD_DICTIONARY = "BAD_DICTIONARY"


class WireError(TidesyncError):
    """A body or message that cannot be accepted; `reason` is the stable code to answer with."""

    code = ErrorCode.WIRE_INVALID

    reason: WireReason = WireReason.MALFORMED_PAYLOAD

    def __init__(self, message: str, reason: WireReason | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class PayloadTooLarge(WireError):
    code = ErrorCode.LIMIT_EXCEEDED
    reason = WireReason.PAYLOAD_TOO_LARGE


class DecompressedTooLarge(WireError):
    code = ErrorCode.LIMIT_EXCEEDED
    reason = WireReason.DECOMPRESSED_TOO_LARGE


class MalformedPayload(WireError):
    reason = WireReason.MALFORMED_PAYLOAD


class UnsupportedProtocol(WireError):
    """An unknown protocol major (UNSUPPORTED_PROTOCOL) or unreadable version text
    (MALFORMED_PROTOCOL_VERSION). Not retryable."""

    reason = WireReason.UNSUPPORTED_PROTOCOL
    supported: tuple[str, ...] = SUPPORTED_PROTOCOL_VERSIONS
    """The versions the refusing side names as the ones it accepts."""


class ChecksumMismatch(WireError):
    reason = WireReason.CHECKSUM_MISMATCH


class ShapeTooLarge(WireError):
    """A message with more names, events or longer names than its caps allow (checked on the
    raw bytes before the message is parsed); `reason` says which cap."""

    code = ErrorCode.LIMIT_EXCEEDED


class EventIdMismatch(WireError):
    """A v2 batch whose event ids, derived from their source coordinates, are not the ids its
    sender recorded (their digest differs)."""

    reason = WireReason.EVENT_ID_MISMATCH


class UnknownDictionary(WireError):
    """A body compressed with a zstd dictionary the receiver does not hold for its sender:
    retryable once the sender has sent the dictionary again."""

    reason = WireReason.UNKNOWN_DICTIONARY


class BadDictionary(WireError):
    """Something sent as a zstd dictionary that is not one, or is larger than allowed."""

    reason = WireReason.BAD_DICTIONARY


class NulInString(WireError):
    """A text field holding a NUL character (no database text column can store it)."""

    reason = WireReason.NUL_IN_STRING


def error_response(error: WireError, request_id: str = "") -> pb.ErrorResponse:
    """The ErrorResponse body answering a WireError."""
    return pb.ErrorResponse(
        reason_code=error.reason.value, message=str(error), request_id=request_id,
        supported_protocol_versions=(error.supported if isinstance(error, UnsupportedProtocol)
                                     else SUPPORTED_PROTOCOL_VERSIONS),
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


@functools.lru_cache(maxsize=64)
def check_schema_version(version: str) -> tuple[int, int]:
    """Parse an event's schema_version "major.minor" and refuse a major this code cannot read."""
    match = _VERSION_PATTERN.fullmatch(version)
    if match is None:
        raise UnsupportedProtocol(
            "schema version must be major.minor", WireReason.MALFORMED_PROTOCOL_VERSION
        )
    major, minor = int(match.group(1)), int(match.group(2))
    if major not in SCHEMA_MAJORS:
        raise UnsupportedProtocol(f"schema major {major} is not supported")
    return major, minor
