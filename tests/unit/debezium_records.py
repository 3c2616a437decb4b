"""Builders of Debezium MySQL records shaped like those of a Debezium 3.x connector.

They write the layout the JSON converter produces (compact `{"schema":…,"payload":…}`, or the
payload alone with schemas.enable=false), so tests can cover encodings no fixture carries.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Outcome

TOPIC = "ship7.fleet.orders"


def fixtures_dir() -> Path:
    """The shared Debezium fixtures: beside the repository, or under $TIDESYNC_SHARED_DIR.

    Missing fixtures fail the run: they are the evidence that real records are accepted.
    """
    candidates = [Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "debezium"]
    if os.environ.get("TIDESYNC_SHARED_DIR"):
        candidates.append(Path(os.environ["TIDESYNC_SHARED_DIR"]) / "fixtures" / "debezium")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    pytest.fail(f"Debezium fixtures not found in {[str(c) for c in candidates]}; "
                "set TIDESYNC_SHARED_DIR to the shared folder")

SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source",
    "version": 1, "field": "source",
    "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": "true,first,first_in_data_collection,"
                                   "last_in_data_collection,last,false,incremental"},
         "default": "false", "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
        {"type": "string", "optional": True, "field": "table"},
        {"type": "int64", "optional": False, "field": "server_id"},
        {"type": "string", "optional": True, "field": "gtid"},
        {"type": "string", "optional": False, "field": "file"},
        {"type": "int64", "optional": False, "field": "pos"},
        {"type": "int32", "optional": False, "field": "row"},
        {"type": "int64", "optional": True, "field": "thread"},
        {"type": "string", "optional": True, "field": "query"},
    ],
}


def source_block(database: str = "fleet", table: str = "orders", snapshot: Any = "false",
                 **overrides: Any) -> dict[str, Any]:
    block = {
        "version": "3.1.1.Final", "connector": "mysql", "name": "ship7", "ts_ms": 1747051999000,
        "snapshot": snapshot, "db": database, "sequence": None, "ts_us": 1747051999000000,
        "ts_ns": 1747051999000000000, "table": table, "server_id": 223344,
        "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23", "file": "mysql-bin.000007",
        "pos": 1002, "row": 0, "thread": 12, "query": None,
    }
    block.update(overrides)
    return block


def field(name: str, kind: str, logical: str | None = None,
          parameters: dict[str, str] | None = None, optional: bool = True) -> dict[str, Any]:
    """One Kafka Connect field schema, as the JSON converter writes it."""
    schema: dict[str, Any] = {"type": kind, "optional": optional}
    if logical is not None:
        schema["name"] = logical
        schema["version"] = 1
    if parameters is not None:
        schema["parameters"] = parameters
    schema["field"] = name
    return schema


def envelope_schema(columns: list[dict[str, Any]], version: int | None = 2,
                    source_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    row = {"type": "struct", "fields": columns, "optional": True,
           "name": "ship7.fleet.orders.Value"}
    schema: dict[str, Any] = {
        "type": "struct", "optional": False, "name": "ship7.fleet.orders.Envelope",
        "fields": [
            {**row, "field": "before"}, {**row, "field": "after"},
            source_schema or SOURCE_SCHEMA,
            {"type": "struct", "optional": True, "name": "event.block", "version": 1,
             "field": "transaction", "fields": [
                 {"type": "string", "optional": False, "field": "id"},
                 {"type": "int64", "optional": False, "field": "total_order"},
                 {"type": "int64", "optional": False, "field": "data_collection_order"}]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
    }
    if version is not None:
        schema["version"] = version
    return schema


def envelope(op: str = "c", before: dict[str, Any] | None = None,
             after: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
             ts_ms: Any = 1747051999512, transaction: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source or source_block(),
            "transaction": transaction, "op": op, "ts_ms": ts_ms,
            "ts_us": None if ts_ms is None else 1747051999512345,
            "ts_ns": None if ts_ms is None else 1747051999512345678}


def compact(document: Any) -> bytes:
    """JSON as the Kafka JsonConverter writes it: no spaces."""
    return json.dumps(document, separators=(",", ":")).encode()


def with_schema(schema: Any, payload: Any) -> bytes:
    return compact({"schema": schema, "payload": payload})


def key_with_schema(columns: list[dict[str, Any]], payload: dict[str, Any]) -> bytes:
    schema = {"type": "struct", "fields": columns, "optional": False,
              "name": "ship7.fleet.orders.Key"}
    return with_schema(schema, payload)


def unscaled_base64(unscaled: int) -> str:
    """A Kafka Connect Decimal value: big-endian two's complement, shortest form."""
    length = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def normalizer(column_types: dict[str, dict[str, str]] | None = None,
               bidirectional: set[tuple[str, str]] | None = None,
               **settings: Any) -> DebeziumNormalizer:
    types = InMemoryColumnTypes.from_json(column_types) if column_types is not None else None
    return DebeziumNormalizer(NormalizerSettings(
        origin_node_id="ship-7", source_connector_id="ship7-mysql", column_types=types,
        bidirectional_tables=frozenset(bidirectional or ()), **settings,
    ))


def normalize(value: bytes | None, key: bytes | None = b'{"id":1}', *,
              using: DebeziumNormalizer | None = None, topic: str = TOPIC, offset: int = 42,
              headers: tuple[tuple[str, bytes | None], ...] = ()) -> Outcome:
    return (using or normalizer()).normalize(
        KafkaRecord(topic=topic, partition=0, offset=offset, key=key, value=value,
                    headers=headers))
