"""Reading a reconciliation message that crossed the link, and the errors of reconciliation:
light enough for the ship client to import without a database toolkit.
"""

from __future__ import annotations

import zstandard

from tidesync.domain.errors import ErrorCode, TidesyncError

MAX_LINK_MESSAGE_BYTES = 8 * 1024 * 1024
"""The largest message (as JSON) sent as a downlink command or a ship's answer: an exchange
whose next message would be larger fails (reconcile a narrower filter, or by files)."""


class ReconcileError(TidesyncError):
    """A reconciliation message is malformed, for another table, or over its limits."""

    code = ErrorCode.INVALID_INPUT


class MessageTooLarge(ReconcileError):
    """A message over the link's limit."""

    code = ErrorCode.LIMIT_EXCEEDED


def unpack(raw: bytes) -> bytes:
    """A message's JSON from the link, refused past the link's limit (however it was
    compressed: a small body cannot unfold into gigabytes)."""
    try:
        with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            data = reader.read(MAX_LINK_MESSAGE_BYTES + 1)
    except zstandard.ZstdError as error:
        raise ReconcileError("not a zstd-compressed reconciliation message") from error
    if len(data) > MAX_LINK_MESSAGE_BYTES:
        raise MessageTooLarge(f"a message over the link is at most {MAX_LINK_MESSAGE_BYTES}"
                              " bytes")
    return bytes(data)
