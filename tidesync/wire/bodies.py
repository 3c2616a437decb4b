"""Bodies of /sync/v1 requests and answers: zstd frames of `sync.proto` messages, decompressed
under hard limits (the frame's declared size is not trusted).
"""

from __future__ import annotations

from typing import TypeVar

import zstandard
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from tidesync.wire.protocol import (
    DecompressedTooLarge,
    MalformedPayload,
    NulInString,
    PayloadTooLarge,
    check_protocol_version,
)

DEFAULT_LEVEL = 3
_MAX_EXPANSION = 32_768
"""Most output one input byte of a zstd frame can produce (a 4-byte RLE block gives 128 KiB)."""

M = TypeVar("M", bound=Message)


def compress(message: Message, level: int = DEFAULT_LEVEL) -> bytes:
    """The zstd body of any /sync/v1 message (use `encode_batch` for upload batches)."""
    return compress_bytes(message.SerializeToString(), level)


def compress_bytes(raw: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)


def decompress_message(
    body: bytes, cls: type[M], *, max_compressed: int, max_decompressed: int,
) -> M:
    """Decompress and parse a body; refuses an unknown protocol major if the message has one,
    and text holding NUL. For small messages (heartbeats, acks): every field is visited."""
    message = parse_message(decompress_bytes(body, max_compressed, max_decompressed), cls)
    refuse_nul(message)
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


def refuse_nul(message: Message) -> None:
    """NulInString if any text field of `message` or of the messages inside it holds NUL."""
    for descriptor, value in message.ListFields():
        if descriptor.type == FieldDescriptor.TYPE_STRING:
            texts = value if descriptor.is_repeated else (value,)
            if any("\x00" in text for text in texts):
                raise NulInString(f"{descriptor.name} holds a NUL character")
        elif descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            for inner in value if descriptor.is_repeated else (value,):
                refuse_nul(inner)


def decompress_bytes(body: bytes, max_compressed: int, max_decompressed: int,
                     dictionary: zstandard.ZstdCompressionDict | None = None) -> bytes:
    """The content of one complete zstd frame (compressed with `dictionary` if given), never
    holding more than about twice `max_decompressed` (the frame's declared size is not
    trusted)."""
    if len(body) > max_compressed:
        raise PayloadTooLarge(f"body of {len(body)} bytes exceeds {max_compressed}")
    window = min(max(1 << 23, 1 << (max_decompressed - 1).bit_length()), 1 << 27)
    inflater = zstandard.ZstdDecompressor(dict_data=dictionary,
                                          max_window_size=window).decompressobj()
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
