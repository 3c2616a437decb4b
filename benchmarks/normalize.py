"""Debezium normalizer throughput against the raw baseline of `json.loads` on the same bytes.

Records are shaped like a Debezium 3.x MySQL connector's (JSON converter, a 15-column orders
table, inserts, updates and deletes), once with schemas and once payload-only.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.harness import Report, best_of
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Normalized

TOPIC = "ship7.fleet.orders"
COLUMN_TYPES = {
    "id": "bigint(20)", "order_no": "varchar(32)", "customer": "varchar(128)",
    "vessel_id": "int(11)", "status": "enum('new','confirmed','shipped','delivered')",
    "amount": "decimal(12,2)", "quantity": "int(11)", "unit_price": "decimal(10,4)",
    "ordered_at": "datetime(3)", "updated_at": "timestamp", "delivery_date": "date",
    "notes": "text", "paid": "tinyint(1)", "attributes": "json", "_sync_revision": "char(36)",
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _field(name: str, kind: str, logical: str | None = None,
           parameters: dict[str, str] | None = None, optional: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, "optional": optional}
    if logical:
        schema.update(name=logical, version=1)
    if parameters:
        schema["parameters"] = parameters
    schema["field"] = name
    return schema


ROW_FIELDS = [
    _field("id", "int64", optional=False), _field("order_no", "string"),
    _field("customer", "string"), _field("vessel_id", "int32"),
    _field("status", "string", "io.debezium.data.Enum",
           {"allowed": "new,confirmed,shipped,delivered"}),
    _field("amount", "bytes", DECIMAL, {"scale": "2", "connect.decimal.precision": "12"}),
    _field("quantity", "int32"),
    _field("unit_price", "bytes", DECIMAL, {"scale": "4", "connect.decimal.precision": "10"}),
    _field("ordered_at", "int64", "io.debezium.time.Timestamp"),
    _field("updated_at", "string", "io.debezium.time.ZonedTimestamp"),
    _field("delivery_date", "int32", "io.debezium.time.Date"), _field("notes", "string"),
    _field("paid", "int16"), _field("attributes", "string", "io.debezium.data.Json"),
    _field("_sync_revision", "string"),
]
SOURCE_FIELDS = [
    _field("version", "string", optional=False), _field("connector", "string", optional=False),
    _field("name", "string", optional=False), _field("ts_ms", "int64", optional=False),
    _field("snapshot", "string", "io.debezium.data.Enum", {
        "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,"
                   "incremental"}),
    _field("db", "string", optional=False), _field("sequence", "string"),
    _field("ts_us", "int64"), _field("ts_ns", "int64"), _field("table", "string"),
    _field("server_id", "int64", optional=False), _field("gtid", "string"),
    _field("file", "string", optional=False), _field("pos", "int64", optional=False),
    _field("row", "int32", optional=False), _field("thread", "int64"), _field("query", "string"),
]
VALUE_SCHEMA = {
    "type": "struct", "name": "ship7.fleet.orders.Envelope", "optional": False, "version": 2,
    "fields": [
        {"type": "struct", "fields": ROW_FIELDS, "optional": True,
         "name": "ship7.fleet.orders.Value", "field": "before"},
        {"type": "struct", "fields": ROW_FIELDS, "optional": True,
         "name": "ship7.fleet.orders.Value", "field": "after"},
        {"type": "struct", "fields": SOURCE_FIELDS, "optional": False,
         "name": "io.debezium.connector.mysql.Source", "version": 1, "field": "source"},
        {"type": "struct", "optional": True, "name": "event.block", "version": 1,
         "field": "transaction", "fields": [
             _field("id", "string", optional=False),
             _field("total_order", "int64", optional=False),
             _field("data_collection_order", "int64", optional=False)]},
        _field("op", "string", optional=False), _field("ts_ms", "int64"),
        _field("ts_us", "int64"), _field("ts_ns", "int64"),
    ],
}
KEY_SCHEMA = {"type": "struct", "name": "ship7.fleet.orders.Key", "optional": False,
              "fields": [_field("id", "int64", optional=False)]}


def _decimal(unscaled: int) -> str:
    length = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _row(rng: random.Random, order_id: int, moment_ms: int) -> dict[str, Any]:
    quantity = rng.randint(1, 500)
    unit_price = rng.randint(100, 10_000_000)
    return {
        "id": order_id, "order_no": f"PO-{order_id:08d}",
        "customer": rng.choice(["Maersk Line", "Ocean Star Ltd", "北海航运", "Hapag-Lloyd"]),
        "vessel_id": rng.randint(1, 1000),
        "status": rng.choice(["new", "confirmed", "shipped", "delivered"]),
        "amount": _decimal(quantity * unit_price // 100), "quantity": quantity,
        "unit_price": _decimal(unit_price), "ordered_at": moment_ms - rng.randint(0, 10**9),
        "updated_at": dt.datetime.fromtimestamp(moment_ms // 1000, dt.UTC)
        .isoformat().replace("+00:00", "Z"),
        "delivery_date": 19_000 + rng.randint(0, 2000),
        "notes": rng.choice(["", "deliver to port of Rotterdam, gate 4", "fragile; keep dry"]),
        "paid": rng.randint(0, 1),
        "attributes": json.dumps({"deck": rng.randint(1, 9), "hazmat": rng.random() < 0.1}),
        "_sync_revision": str(uuid.UUID(int=rng.getrandbits(128))),
    }


def _envelope(rng: random.Random, offset: int) -> tuple[int, dict[str, Any]]:
    order_id = rng.randint(1, 50_000)
    moment_ms = 1_747_051_999_000 + offset * 1000
    op = rng.choices("cud", weights=(3, 6, 1))[0]
    before = _row(rng, order_id, moment_ms) if op in "ud" else None
    after = _row(rng, order_id, moment_ms) if op in "cu" else None
    source = {
        "version": "3.1.1.Final", "connector": "mysql", "name": "ship7", "ts_ms": moment_ms,
        "snapshot": "false", "db": "fleet", "sequence": None, "ts_us": moment_ms * 1000,
        "ts_ns": moment_ms * 1_000_000, "table": "orders", "server_id": 223344,
        "gtid": f"3e11fa47-71ca-11e1-9e33-c80aa9429562:{offset}", "file": "mysql-bin.000007",
        "pos": 1002 + offset * 317, "row": 0, "thread": 12, "query": None,
    }
    return order_id, {"before": before, "after": after, "source": source, "transaction": None,
                      "op": op, "ts_ms": moment_ms + 512, "ts_us": (moment_ms + 512) * 1000,
                      "ts_ns": (moment_ms + 512) * 1_000_000}


def _compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def make_records(count: int, schemas: bool, seed: int = 7) -> list[KafkaRecord]:
    rng = random.Random(seed)
    records = []
    for offset in range(count):
        order_id, payload = _envelope(rng, offset)
        key: dict[str, Any] = {"id": order_id}
        if schemas:
            value = _compact({"schema": VALUE_SCHEMA, "payload": payload})
            key_bytes = _compact({"schema": KEY_SCHEMA, "payload": key})
        else:
            value, key_bytes = _compact(payload), _compact(key)
        records.append(KafkaRecord(TOPIC, 0, offset, key_bytes, value))
    return records


def _normalizer() -> DebeziumNormalizer:
    return DebeziumNormalizer(NormalizerSettings(
        origin_node_id="ship-7", source_connector_id="ship7-mysql",
        bidirectional_tables=frozenset({("fleet", "orders")}),
        column_types=InMemoryColumnTypes({("fleet", "orders"): COLUMN_TYPES}),
    ))


def _rate(action: Callable[[], None], count: int) -> float:
    start = time.perf_counter()
    action()
    return count / (time.perf_counter() - start)


def _measure(records: list[KafkaRecord], repeats: int) -> tuple[float, float]:
    """(events/s of the normalizer, events/s of json.loads on key + value)."""
    normalizer = _normalizer()
    outcomes = [normalizer.normalize(record) for record in records]  # warm the caches
    refused = [o for o in outcomes if not isinstance(o, Normalized)]
    if refused:
        raise RuntimeError(f"benchmark records did not normalize: {refused[0]}")
    pairs = [(record.key or b"", record.value or b"") for record in records]

    def ours() -> None:
        for record in records:
            normalizer.normalize(record)

    def baseline() -> None:
        for key, value in pairs:
            json.loads(key)
            json.loads(value)

    count = len(records)
    ours_rate = best_of(repeats, lambda: _rate(ours, count))
    baseline_rate = best_of(repeats, lambda: _rate(baseline, count))
    return ours_rate, baseline_rate


def run(report: Report, quick: bool = False) -> None:
    count, repeats = (1_000, 2) if quick else (20_000, 5)
    with_schemas = make_records(count, schemas=True)
    payload_only = make_records(count, schemas=False)
    report.add("records per mode", count, "records")
    report.add("value size with schemas (mean)",
               sum(len(r.value or b"") for r in with_schemas) // count, "bytes")
    report.add("value size payload-only (mean)",
               sum(len(r.value or b"") for r in payload_only) // count, "bytes")

    totals = [0.0, 0.0]
    for label, records in (("with schemas", with_schemas), ("payload-only", payload_only)):
        ours, baseline = _measure(records, repeats)
        report.add(f"{label}: normalize", ours, "events/s")
        report.add(f"{label}: json.loads key+value", baseline, "events/s")
        report.add(f"{label}: ratio", ours / baseline, "×")
        totals[0] += count / ours
        totals[1] += count / baseline
    report.add("mixed: normalize", 2 * count / totals[0], "events/s")
    report.add("mixed: json.loads key+value", 2 * count / totals[1], "events/s")
    report.set_ratio(totals[1] / totals[0],
                     "normalize events/s ÷ json.loads events/s on the same key and value "
                     "bytes, half with schemas and half payload-only (higher is better)")
