"""The normalizer's caches change no outcome: records decoded through cached schemas, row
layouts and plans give exactly what a normalizer meeting each record for the first time gives.

Covers schemas that change mid-stream (a column added, then the old schema again), schema bytes
that differ only in spacing or key order, records with JSON space around their parts, and the
exact DECIMAL arithmetic the decoders use.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.normalize import KEY_SCHEMA, VALUE_SCHEMA, _normalizer
from benchmarks.normalize import make_records as benchmark_records
from tidesync.cdc.debezium import KafkaRecord
from tidesync.cdc.debezium_values import _unscaled_decimal
from tidesync.cdc.outcomes import Normalized, Outcome

TOPIC = "ship7.fleet.orders"


def compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def widened_schema() -> dict[str, Any]:
    """The benchmark's value schema with a `discount` column added to both row images."""
    schema = copy.deepcopy(VALUE_SCHEMA)
    for field in schema["fields"][:2]:
        field["fields"] = [*field["fields"],
                           {"type": "int32", "optional": True, "field": "discount"}]
    return schema


def payloads(count: int) -> list[tuple[bytes, dict[str, Any]]]:
    """(key bytes, value payload) of the benchmark's records with schemas."""
    return [(record.key or b"", json.loads(record.value or b"")["payload"])
            for record in benchmark_records(count, schemas=True)]


def with_discount(payload: dict[str, Any], discount: int) -> dict[str, Any]:
    payload = copy.deepcopy(payload)
    for image in ("before", "after"):
        if payload[image] is not None:
            payload[image]["discount"] = discount
    return payload


def mixed_stream() -> list[tuple[bytes, bytes]]:
    """Records whose schema changes mid-stream: old, widened, old again, then alternating."""
    records = payloads(40)
    stream = []
    for index, (key, payload) in enumerate(records):
        widened = 10 <= index < 20 or (index >= 30 and index % 2 == 0)
        schema = widened_schema() if widened else VALUE_SCHEMA
        body = with_discount(payload, index) if widened else payload
        stream.append((key, compact({"schema": schema, "payload": body})))
    return stream


def cached_and_fresh(stream: list[tuple[bytes, bytes]]) -> tuple[list[Outcome], list[Outcome]]:
    """Outcomes of one normalizer over the stream, and of a new normalizer for each record."""
    shared = _normalizer()
    cached, fresh = [], []
    for offset, (key, value) in enumerate(stream):
        record = KafkaRecord(TOPIC, 0, offset, key, value, timestamp_ms=1_747_052_000_000)
        cached.append(shared.normalize(record))
        fresh.append(_normalizer().normalize(record))
    return cached, fresh


def test_cached_decoding_equals_first_time_decoding_as_the_schema_changes():
    cached, fresh = cached_and_fresh(mixed_stream())
    assert all(isinstance(outcome, Normalized) for outcome in cached)
    assert cached == fresh
    widened = [o.event for o in cached if isinstance(o, Normalized)
               and "discount" in (o.event.after or o.event.before or {})]
    assert len(widened) == 15


def test_cached_decoding_equals_first_time_decoding_of_payload_only_records():
    stream = [(r.key or b"", r.value or b"") for r in benchmark_records(30, schemas=False)]
    cached, fresh = cached_and_fresh(stream)
    assert all(isinstance(outcome, Normalized) for outcome in cached)
    assert cached == fresh


def reordered(document: Any) -> Any:
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(document, dict):
        return {name: reordered(document[name]) for name in reversed(document)}
    if isinstance(document, list):
        return [reordered(item) for item in document]
    return document


def test_schema_bytes_that_differ_only_in_space_or_key_order_normalize_alike():
    stream = payloads(12)
    variants = [
        lambda payload: compact({"schema": VALUE_SCHEMA, "payload": payload}),
        lambda payload: compact({"schema": reordered(VALUE_SCHEMA), "payload": payload}),
        lambda payload: b'{"schema":' + json.dumps(VALUE_SCHEMA, indent=1).encode()
        + b',"payload":' + compact(payload) + b"}",
        lambda payload: json.dumps({"schema": VALUE_SCHEMA, "payload": payload}).encode(),
        lambda payload: compact({"schema": VALUE_SCHEMA, "payload": payload}) + b"\n",
        lambda payload: compact({"schema": VALUE_SCHEMA, "payload": payload})[:-1] + b" }\r\n",
    ]
    shared = _normalizer()
    for offset, (key, payload) in enumerate(stream):
        outcomes = []
        for variant in variants:
            record = KafkaRecord(TOPIC, 0, offset, key, variant(payload))
            outcomes.append(shared.normalize(record))
            outcomes.append(_normalizer().normalize(record))
        assert isinstance(outcomes[0], Normalized)
        assert all(outcome == outcomes[0] for outcome in outcomes), offset


def test_key_schema_bytes_in_another_order_give_the_same_key():
    key, payload = payloads(1)[0]
    value = compact({"schema": VALUE_SCHEMA, "payload": payload})
    other_key = compact({"schema": reordered(KEY_SCHEMA), "payload": json.loads(key)["payload"]})
    shared = _normalizer()
    first = shared.normalize(KafkaRecord(TOPIC, 0, 0, key, value))
    again = shared.normalize(KafkaRecord(TOPIC, 0, 0, other_key, value))
    assert isinstance(first, Normalized)
    assert first == again == _normalizer().normalize(KafkaRecord(TOPIC, 0, 0, other_key, value))


def test_a_row_whose_value_types_change_is_decoded_again_in_full():
    # The same columns in the same order, but a value that was null, then present, then of a
    # type the column refuses: each layout of value types is decided on its own.
    key, payload = payloads(1)[0]
    image = "after" if payload["after"] is not None else "before"
    shared, outcomes = _normalizer(), []
    for notes in (None, "fragile", 7, None):
        body = copy.deepcopy(payload)
        body[image]["notes"] = notes
        record = KafkaRecord(TOPIC, 0, 0, key, compact({"schema": VALUE_SCHEMA, "payload": body}))
        outcomes.append((shared.normalize(record), _normalizer().normalize(record)))
    assert all(cached == fresh for cached, fresh in outcomes)
    assert [type(cached).__name__ for cached, _ in outcomes] == [
        "Normalized", "Normalized", "Block", "Normalized"]



@given(st.integers(-(2**600), 2**600), st.integers(-1000, 1000))
def test_decimal_from_unscaled_bytes_is_the_exact_decimal_of_its_text(unscaled, scale):
    data = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    decimal = _unscaled_decimal(data, scale)
    expected = Decimal(f"{unscaled}E{-scale}")
    assert decimal.as_tuple() == expected.as_tuple()
    assert str(decimal) == str(expected)
