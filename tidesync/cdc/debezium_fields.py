"""The fields of a Debezium change envelope beyond the row images: source block, snapshot marker,
capture time, transaction block, revisions, and the key read from a row image.

Each reader raises Blocked naming what is wrong; none copies row values into its message.
"""

from __future__ import annotations

import binascii
import datetime as dt
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tidesync.cdc.debezium_values import EPOCH
from tidesync.cdc.outcomes import Blocked, BlockReason
from tidesync.domain.change_event import ChangeEvent, RecordKey, Revision
from tidesync.domain.slots import slot_builder
from tidesync.domain.values import Value

# Newest Debezium major whose record layout this module has been checked against
# (SEMANTICS.md §1, §3).
MAX_DEBEZIUM_MAJOR = 3

_SNAPSHOT_MARKERS = frozenset({"true", "first", "first_in_data_collection",
                               "last_in_data_collection", "last", "false", "incremental"})
_SOURCE_DETAILS = (
    ("connector", "connector"), ("name", "server_name"), ("version", "debezium_version"),
    ("server_id", "server_id"), ("gtid", "gtid"), ("file", "binlog_file"),
    ("pos", "binlog_position"), ("row", "binlog_row"), ("thread", "thread"),
    ("ts_ms", "source_ts_ms"), ("ts_sec", "source_ts_sec"), ("sequence", "sequence"),
)
_DETAIL_TYPES = frozenset({str, int})
_DEBEZIUM_MAJOR = re.compile(r"([0-9]+)\.")


def same_value(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def key_from_image(database: str, table: str, image: Mapping[str, Value],
                   key_columns: Sequence[str]) -> RecordKey:
    for column in key_columns:
        if image.get(column) is None:
            raise Blocked(BlockReason.MISSING_PRIMARY_KEY,
                          f"key column {column!r} is absent or null in the row image")
    try:
        return RecordKey(database, table, tuple((column, image[column]) for column in key_columns))
    except ValueError as error:
        raise Blocked(BlockReason.MISSING_PRIMARY_KEY, str(error)) from None


def revision_in_image(image: Mapping[str, Value] | None, image_name: str, column: str) -> Revision:
    raw = None if image is None else image.get(column)
    if raw is None:
        raise Blocked(BlockReason.MISSING_REVISION,
                      f"{column} is absent or null in the {image_name} image")
    try:
        if isinstance(raw, bytes):
            return Revision.parse(raw)
        if isinstance(raw, str):
            if len(raw) == 24:  # BINARY(16) under binary.handling.mode=base64
                return Revision(binascii.a2b_base64(raw, strict_mode=True))
            canonical = _canonical_uuid_bytes(raw)
            return _REVISION(canonical) if canonical is not None else Revision.parse(raw)
    except ValueError:
        pass
    raise Blocked(BlockReason.INVALID_REVISION,
                  f"{column} in the {image_name} image is not a 16-byte revision")


_REVISION = slot_builder(Revision, ["value"])
"""Revision(value) of 16 bytes already counted (one or two per two-way event)."""


def _canonical_uuid_bytes(text: str) -> bytes | None:
    """The 16 bytes of UUID text in its canonical 8-4-4-4-12 form (what CHAR(36) revisions
    hold), without building a UUID; None for any other form, which `Revision.parse` reads."""
    if len(text) != 36 or text[8] != "-" or text[13] != "-" or text[18] != "-" or (
            text[23] != "-"):
        return None
    try:
        # Sixteen bytes need all 32 other characters to be hex digits, so removing any other
        # dash cannot turn a refused text into a revision.
        value = bytes.fromhex(text.replace("-", ""))
    except ValueError:
        return None
    return value if len(value) == 16 else None


def check_source(source: Mapping[str, Any]) -> None:
    connector = source.get("connector")
    if connector is not None and connector not in ("mysql", "mariadb"):
        raise Blocked(BlockReason.UNSUPPORTED_CONNECTOR,
                      f"source.connector {str(connector)[:40]!r} is not MySQL or MariaDB")
    version = source.get("version")
    if version is None:
        return
    if type(version) is not str:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, "source.version is not a string")
    major = _debezium_major(version)
    if major is not None and major > MAX_DEBEZIUM_MAJOR:
        raise Blocked(BlockReason.UNSUPPORTED_SCHEMA_VERSION,
                      f"Debezium {version[:40]} is newer than {MAX_DEBEZIUM_MAJOR}.x")


@functools.lru_cache(maxsize=64)
def _debezium_major(version: str) -> int | None:
    """3 for "3.1.1.Final"; None when unparseable (the docs print "{debezium-version}")."""
    match = _DEBEZIUM_MAJOR.match(version)
    return int(match[1]) if match and len(match[1]) < 6 else None


def required_text(source: Mapping[str, Any], name: str) -> str:
    value = source.get(name)
    if type(value) is not str or not value:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, f"source.{name} is missing")
    return value


def table_name(source: Mapping[str, Any]) -> str:
    database, table = source.get("db"), source.get("table")
    return f"{database}.{table}" if isinstance(database, str) and isinstance(table, str) else (
        "an unnamed table")


def snapshot_marker(raw: Any) -> str | None:
    """source.snapshot as its string value; legacy and doc schemas use a boolean."""
    if raw is None:
        return None
    if type(raw) is bool:
        return "true" if raw else "false"
    if type(raw) is str and raw in _SNAPSHOT_MARKERS:
        return raw
    raise Blocked(BlockReason.MALFORMED_ENVELOPE, "source.snapshot has an unknown value")


def _whole_number(raw: Any) -> int | None:
    """An int64 field; the docs quote some of them as strings."""
    if type(raw) is int:
        return raw
    if type(raw) is str and 0 < len(raw) < 20 and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


_timedelta = dt.timedelta
_MAX_MILLIS = (dt.datetime.max.replace(tzinfo=dt.UTC) - EPOCH) // dt.timedelta(milliseconds=1)
"""Milliseconds after the epoch that still make a datetime."""


def captured_at_of(payload: Mapping[str, Any], source: Mapping[str, Any]) -> dt.datetime:
    """Connector processing time (ts_ms), else the source's event time; 0 means unknown."""
    processed = payload.get("ts_ms")
    if type(processed) is int and 0 < processed < _MAX_MILLIS:  # what connectors write
        return EPOCH + _timedelta(0, 0, 0, processed)  # positional: keywords cost more
    for raw, unit in ((payload.get("ts_ms"), 1000), (source.get("ts_ms"), 1000),
                      (source.get("ts_sec"), 1_000_000)):
        number = _whole_number(raw)
        if number is not None and number > 0:
            try:
                return EPOCH + dt.timedelta(microseconds=number * unit)
            except OverflowError:
                continue
    raise Blocked(BlockReason.CAPTURE_TIME_MISSING,
                  "neither ts_ms, source.ts_ms nor source.ts_sec gives a capture time")


def transaction_of(raw: Any) -> tuple[str | None, int | None, int | None]:
    """(transaction id, total order, data collection order) of the transaction block."""
    if raw is None:
        return None, None, None
    if type(raw) is not dict:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction is not an object")
    transaction_id = raw.get("id")
    total_order = _whole_number(raw.get("total_order"))
    table_order = _whole_number(raw.get("data_collection_order"))
    if type(transaction_id) is not str or not transaction_id:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction.id is missing")
    if total_order is None or total_order < 1:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction.total_order is not >= 1")
    return transaction_id, total_order, table_order


def source_details(source: Mapping[str, Any], snapshot: str | None, timestamp_ms: int | None,
                   table_order: int | None) -> dict[str, Value]:
    """Diagnostics of where the change came from. Never source.query: it holds row values."""
    details: dict[str, Value] = {}
    get = source.get
    for name, label in _SOURCE_DETAILS:
        value = get(name)
        if type(value) in _DETAIL_TYPES:
            details[label] = value
    if snapshot is not None:
        details["snapshot"] = snapshot
    if timestamp_ms is not None:
        details["kafka_timestamp_ms"] = timestamp_ms
    if table_order is not None:
        details["transaction_data_collection_order"] = table_order
    return details


def check_unicode(event: ChangeEvent) -> None:
    """Refuse lone surrogates (from JSON escapes): they cannot be stored or sent as UTF-8."""
    texts: list[object] = [event.transaction_id]
    for row in (event.before, event.after, event.source_details, event.primary_key):
        if row is not None:
            texts.extend(row.keys())
            texts.extend(row.values())
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise Blocked(BlockReason.UNSUPPORTED_TYPE,
                              "text holds a lone surrogate, which is not valid Unicode") from None
