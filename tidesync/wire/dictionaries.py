"""zstd dictionaries for upload bodies: a ship trains one on its own recent batches, sends it
once (POST /sync/v1/dictionaries) and then names it in front of each body compressed with it.

A dictionary's id is the SHA-256 of its bytes, so an id names exactly one dictionary: a body is
never decoded with another one than it was compressed with. A body naming its dictionary is a
zstd skippable frame (magic 0x184D2A5D, 32 bytes: the id) followed by the zstd frame; a
receiver that knows no dictionaries refuses it as malformed (never misreads it), and a body
without it is an ordinary one.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable

import zstandard

from tidesync.wire.bodies import DEFAULT_LEVEL
from tidesync.wire.protocol import BadDictionary, MalformedPayload

MAX_DICTIONARY_BYTES = 64 * 1024
"""Largest dictionary a ship may send (and train)."""
ID_BYTES = 32
FRAME_MAGIC = 0x184D2A5D
_FRAME_HEADER = struct.Struct("<II")
_NAME_BYTES = _FRAME_HEADER.size + ID_BYTES
_MAGIC_BYTES = struct.pack("<I", FRAME_MAGIC)
_DICTIONARY_MAGIC = bytes.fromhex("37a430ec")

DictionaryLookup = Callable[[bytes], zstandard.ZstdCompressionDict | None]
"""The dictionary of an id, among those the body's sender sent; None if there is none."""


def dictionary_id(content: bytes) -> bytes:
    """The id of a dictionary: the SHA-256 of its bytes."""
    return hashlib.sha256(content).digest()


def load_dictionary(content: bytes) -> zstandard.ZstdCompressionDict:
    """The dictionary of `content`; BadDictionary unless it is a zstd dictionary (with its
    header: entropy tables and magic) of at most MAX_DICTIONARY_BYTES."""
    if not 8 < len(content) <= MAX_DICTIONARY_BYTES:
        raise BadDictionary(f"a dictionary must hold 9 to {MAX_DICTIONARY_BYTES} bytes")
    if not content.startswith(_DICTIONARY_MAGIC):
        raise BadDictionary("not a zstd dictionary")
    dictionary = zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_FULLDICT)
    try:
        dictionary.precompute_compress(level=DEFAULT_LEVEL)
    except zstandard.ZstdError as error:
        raise BadDictionary("not a usable zstd dictionary") from error
    return dictionary


def compress_with(raw: bytes, dictionary: zstandard.ZstdCompressionDict, name: bytes,
                  level: int = DEFAULT_LEVEL) -> bytes:
    """The body of `raw` compressed with `dictionary`, named by its id `name`."""
    frame = zstandard.ZstdCompressor(level=level, dict_data=dictionary, write_content_size=True,
                                     write_dict_id=False).compress(raw)
    return _FRAME_HEADER.pack(FRAME_MAGIC, ID_BYTES) + name + frame


def named_dictionary(body: bytes) -> tuple[bytes | None, bytes]:
    """The id of the dictionary a body names (None: it names none) and its zstd frame."""
    if not body.startswith(_MAGIC_BYTES):
        return None, body
    if len(body) < _NAME_BYTES or _FRAME_HEADER.unpack_from(body)[1] != ID_BYTES:
        raise MalformedPayload("a body's dictionary name is not a 32-byte id")
    return body[_FRAME_HEADER.size:_NAME_BYTES], body[_NAME_BYTES:]
