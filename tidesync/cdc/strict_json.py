"""Strict JSON for Debezium records: no NaN or Infinity, UTF-8 only, failures as Blocked.

Shared by the record parser (`debezium_schemas`) and the column decoders (`debezium_values`).
"""

from __future__ import annotations

import json
from typing import Any

from tidesync.cdc.outcomes import Blocked, BlockReason


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


# NaN and Infinity are not JSON; Python's decoder would accept them.
STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
JSON_ERRORS = (ValueError, RecursionError)


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
