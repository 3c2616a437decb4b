"""The fast JSON path gives the strict parser's verdict: it accepts only what the strict parser
accepts, with equal values, and anything else reaches the strict parser.

Checked on generated documents and on mutations of them and of real Debezium records: NaN and
Infinity, numbers beyond float or integer range, lone surrogates, invalid UTF-8, duplicate keys,
deep nesting, stray bytes.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.normalize import _normalizer, make_records
from tests.unit.debezium_records import fixtures_dir
from tidesync.cdc import debezium_schemas, debezium_values
from tidesync.cdc.debezium import KafkaRecord
from tidesync.cdc.debezium_schemas import SchemaCache
from tidesync.cdc.outcomes import Block, Blocked, BlockReason, Normalized
from tidesync.cdc.strict_json import NOT_FAST, STRICT_JSON, fast_json

REFUSED = object()

# Pieces that make JSON invalid, or valid only to one parser or another.
TOKENS = [
    b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"9" * 25,
    b"9" * 4301, b"-0", b"-0.0", b"0.1", b'"\\ud800"', b'"\\udc00"', b'"\\ud83d\\ude00"',
    b"\\ud800", b"\\u0000", b"\\x", b"\xff", b"\xed\xa0\x80", b"\xc3\xa9", b"\x00", b"\x0c",
    b"\xc2\xa0", b"\t", b"\r\n", b" ", b",", b":", b"{", b"}", b"[", b"]", b'"', b"\\",
    b'"a":1,"a":2', b'{"a":1,"a":2}', b"true", b"nul", b"[" * 300 + b"]" * 300,
    b"01", b"1.", b".5", b"+1", b"1E5", b"\xef\xbb\xbf",
]


def strict(data: bytes) -> Any:
    """What the strict parser makes of bytes: the document, or REFUSED."""
    try:
        return STRICT_JSON.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return REFUSED


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


def check_same_verdict(data: bytes) -> None:
    fast, reference = fast_json(data), strict(data)
    if fast is not NOT_FAST:
        assert reference is not REFUSED, data[:200]
        assert same(fast, reference), data[:200]


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 3))
        piece = draw(st.sampled_from(TOKENS))
        data = data[:at] + piece + data[at + cut:]
    return data


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    value = draw(json_values)
    data = json.dumps(value, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))).encode()
    return mutate(data, draw) if draw(st.booleans()) else data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_fast_parser_accepts_only_what_the_strict_one_does_with_equal_values(data):
    check_same_verdict(data)


@pytest.mark.parametrize("data", TOKENS + [b"[" + token + b"]" for token in TOKENS]
                         + [b'{"k":' + token + b"}" for token in TOKENS])
def test_each_troublesome_piece_gets_the_strict_verdict(data):
    check_same_verdict(data)


@pytest.mark.parametrize("data", [b"[NaN]", b"[Infinity]", b"[1e400]", b'["\\ud800"]',
                                  b'["\\udc00"]', b"[" + b"9" * 4301 + b"]", b'["\xff"]',
                                  b"[" * 2000 + b"]" * 2000])
def test_what_the_strict_parser_refuses_or_alone_accepts_is_left_to_it(data):
    assert fast_json(data) is NOT_FAST


def test_duplicate_keys_keep_the_last_value_as_the_strict_parser_does():
    assert fast_json(b'{"a":1,"b":2,"a":3}') == strict(b'{"a":1,"b":2,"a":3}') == {"a": 3,
                                                                                  "b": 2}


def test_text_with_lone_surrogate_characters_is_left_to_the_strict_parser():
    assert fast_json('["\ud800"]') is NOT_FAST
    assert fast_json('{"a": "é"}') == {"a": "é"}


# ----------------------------------------------------------------------------- records


def canonical(schema: Any) -> str:
    return json.dumps(schema, sort_keys=False)


def load_reference(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
        return SchemaCache(canonical).load(text, "value")
    except UnicodeDecodeError:
        return REFUSED
    except Blocked as blocked:
        return blocked.reason


def load_fast(cache: SchemaCache[str], data: bytes) -> Any:
    try:
        entry, payload, _ = cache.load_bytes(data, "value")
    except Blocked as blocked:
        return blocked.reason if blocked.reason is not BlockReason.MALFORMED_JSON or (
            "UTF-8" not in blocked.detail) else REFUSED
    return entry, payload


def record_texts() -> list[bytes]:
    values = [r.value or b"" for r in make_records(6, schemas=True)]
    values += [r.value or b"" for r in make_records(6, schemas=False)]
    values += [r.key or b"" for r in make_records(2, schemas=True)]
    for path in sorted(pathlib.Path(fixtures_dir()).glob("*.json")):
        values.append(path.read_bytes())
    return values


RECORDS = record_texts()


@st.composite
def record_bytes(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(RECORDS))
    return mutate(data, draw) if draw(st.integers(0, 3)) else data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_bytes(), min_size=1, max_size=4))
def test_reading_records_from_bytes_gives_what_reading_their_text_gives(datas):
    cache: SchemaCache[str] = SchemaCache(canonical)  # shared: later records hit the cache
    for data in datas:
        fast, reference = load_fast(cache, data), load_reference(data)
        if reference is REFUSED or isinstance(reference, BlockReason):
            assert fast == reference
        else:
            assert not isinstance(fast, BlockReason) and fast is not REFUSED
            assert fast[0] == reference[0]
            assert same(fast[1], reference[1])


def _strict_only(data: bytes | str) -> Any:
    return NOT_FAST


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(record_bytes(), record_bytes()), min_size=1, max_size=3))
def test_the_normalizer_decides_every_record_as_with_the_strict_parser_alone(monkeypatch,
                                                                               pairs):
    fast_normalizer, strict_normalizer = _normalizer(), _normalizer()
    outcomes = []
    for offset, (key, value) in enumerate(pairs):
        record = KafkaRecord("ship7.fleet.orders", 0, offset, key, value)
        outcomes.append(fast_normalizer.normalize(record))
    with monkeypatch.context() as patched:
        patched.setattr(debezium_schemas, "fast_json", _strict_only)
        patched.setattr(debezium_values, "fast_json", _strict_only)
        for offset, ((key, value), fast) in enumerate(zip(pairs, outcomes, strict=True)):
            record = KafkaRecord("ship7.fleet.orders", 0, offset, key, value)
            assert fast == strict_normalizer.normalize(record)


def test_benchmark_records_normalize_through_the_fast_path_and_schemas_are_parsed_once():
    normalizer = _normalizer()
    records = make_records(20, schemas=True)
    outcomes = [normalizer.normalize(record) for record in records]
    assert all(isinstance(outcome, Normalized) for outcome in outcomes)
    calls = []
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(debezium_schemas.STRICT_JSON, "decode",
                        lambda text: calls.append(text) or json.loads(text))
        again = [normalizer.normalize(record) for record in records]
    assert again == outcomes
    assert calls == []  # neither the schemas nor the payloads went to the strict parser


def test_a_lone_surrogate_still_blocks_through_the_fallback():
    normalizer = _normalizer()
    record = make_records(1, schemas=False)[0]
    value = (record.value or b"").replace(b'"order_no":"PO-', b'"order_no":"\\ud800PO-')
    outcome = normalizer.normalize(KafkaRecord(record.topic, 0, 0, record.key, value))
    assert isinstance(outcome, Block)
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE


@settings(max_examples=500, deadline=None)
@given(st.text("0123456789", min_size=1, max_size=30), st.integers(-400, 400),
       st.booleans())
def test_numbers_in_decimal_text_parse_to_the_same_float(digits, exponent, negative):
    text = f"{'-' if negative else ''}{digits[0]}.{digits[1:] or '0'}e{exponent}"
    check_same_verdict(f"[{text}]".encode())
