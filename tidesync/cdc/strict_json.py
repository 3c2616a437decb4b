"""Strict JSON for Debezium records: no NaN or Infinity, UTF-8 only, failures as Blocked.

Shared by the record parser (`debezium_schemas`) and the column decoders (`debezium_values`).

Two parsers give one verdict. The strict parser (the standard library's, refusing NaN and
Infinity) is the reference; the fast one (msgspec) is tried first and only answers when it
accepts, which it does for a subset of what the strict parser accepts, with equal values.
Anything it refuses (lone surrogates, numbers out of float range, malformed text) goes to the
strict parser, so errors, and what is accepted, are exactly the strict parser's.
Duplicate keys are accepted by both, the last one winning, as the JSON converter never writes
them.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from tidesync.cdc.outcomes import Blocked, BlockReason


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


# NaN and Infinity are not JSON; Python's decoder would accept them.
STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
JSON_ERRORS = (ValueError, RecursionError)

NOT_FAST: Final = object()
"""What `fast_json` returns when the strict parser must decide."""
_FAST = msgspec.json.Decoder()
_FAST_ERRORS = (msgspec.MsgspecError, ValueError, RecursionError)
# Nesting no deeper than this is within the strict parser's recursion limit wherever it is
# called from, so the two cannot differ on depth; counting brackets bounds the nesting.
_FAST_MAX_BRACKETS = 256


def fast_json(data: bytes | str) -> Any:
    """The parsed document when the fast parser accepts `data`, else NOT_FAST.

    An accepted document is what the strict parser makes of the same text; the fast parser
    refuses lone surrogates, so an accepted document holds only valid Unicode."""
    # Shorter text cannot hold more brackets than that; counting costs a pass per bracket.
    if len(data) > _FAST_MAX_BRACKETS:
        if isinstance(data, bytes):
            brackets = data.count(b"{") + data.count(b"[")
        else:
            brackets = data.count("{") + data.count("[")
        if brackets > _FAST_MAX_BRACKETS:
            return NOT_FAST
    try:
        return _FAST.decode(data)
    except _FAST_ERRORS:
        return NOT_FAST


def parse_json(text: str, what: str) -> Any:
    try:
        return STRICT_JSON.decode(text)
    except json.JSONDecodeError as error:
        raise Blocked(BlockReason.MALFORMED_JSON, f"{what} is not valid JSON: {error}") from None
    except JSON_ERRORS as error:
        raise Blocked(BlockReason.MALFORMED_JSON, f"{what} is not valid JSON: "
                      f"{type(error).__name__}") from None


def utf8_text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Blocked(BlockReason.MALFORMED_JSON,
                      f"{what} is not UTF-8 (byte {error.start})") from None


def json_kind(raw: object) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "boolean"
    if isinstance(raw, int | float):
        return "number"
    if isinstance(raw, str):
        return "string"
    return "array" if isinstance(raw, list) else "object"
