"""Every column encoding of SEMANTICS.md §5 decoded exactly, with and without schemas.

Expected values are worked out by hand from the documented encodings, not by re-running the
decoder: "AdTA" = 0x01D4C0 = 120000, at scale 2 = 1200.00.
"""

from __future__ import annotations

import datetime as dt
from decimal import Context, Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.debezium_records import (
    compact,
    envelope,
    envelope_schema,
    field,
    normalize,
    normalizer,
    source_block,
    unscaled_base64,
    with_schema,
)
from tidesync.cdc.column_types import MySQLColumnType
from tidesync.cdc.debezium import DebeziumNormalizer
from tidesync.cdc.debezium_values import DecimalHandling
from tidesync.cdc.outcomes import Block, BlockReason, Normalized, Outcome
from tidesync.domain.values import BitString, JsonText, Value, value_to_json

DECIMAL = "org.apache.kafka.connect.data.Decimal"
UTC = dt.UTC


def decode_one(column: dict[str, Any], raw: Any, *, using: DebeziumNormalizer | None = None,
               op: str = "c", snapshot: str = "false") -> Outcome:
    """Normalize an insert of one row holding `raw` in `column` (plus the id)."""
    schema = envelope_schema([field("id", "int64", optional=False), column])
    payload = envelope(op=op, after={"id": 1, column["field"]: raw},
                       source=source_block(snapshot=snapshot))
    return normalize(with_schema(schema, payload), using=using)


def value_of(column: dict[str, Any], raw: Any, **kwargs: Any) -> Value:
    outcome = decode_one(column, raw, **kwargs)
    assert isinstance(outcome, Normalized), outcome
    assert outcome.event.after is not None
    return outcome.event.after[column["field"]]


def blocked(column: dict[str, Any], raw: Any, **kwargs: Any) -> Block:
    outcome = decode_one(column, raw, **kwargs)
    assert isinstance(outcome, Block), outcome
    return outcome


def exactly(value: Value, expected: Value) -> None:
    """Equal and of the same type (1 == True == 1.0 would hide a wrong decoding)."""
    assert type(value) is type(expected), (value, expected)
    assert value == expected
    if isinstance(value, Decimal) and isinstance(expected, Decimal):
        assert value.as_tuple() == expected.as_tuple()  # same scale too


# --- with schemas -------------------------------------------------------------------------


@pytest.mark.parametrize("encoded, scale, expected", [
    ("AdTA", "2", Decimal("1200.00")),
    ("/itA", "2", Decimal("-1200.00")),  # 0xFE2B40 = -120000
    ("/w==", "2", Decimal("-0.01")),
    ("AA==", "3", Decimal("0.000")),
    ("MDk=", "0", Decimal("12345")),
    ("AIAAAAAAAAAA", "4", Decimal("922337203685477.5808")),  # 2**63 needs a leading 0 byte
])
def test_decimal_bytes_decode_exactly(encoded, scale, expected):
    column = field("price", "bytes", DECIMAL,
                   {"scale": scale, "connect.decimal.precision": "20"})
    exactly(value_of(column, encoded), expected)
    assert value_to_json(value_of(column, encoded)) == str(expected)


def test_decimal_of_65_digits_keeps_every_digit():
    unscaled = int("9" * 65)
    column = field("amount", "bytes", DECIMAL, {"scale": "30"})

    value = value_of(column, unscaled_base64(unscaled))

    assert str(value) == "9" * 35 + "." + "9" * 30


def test_decimal_without_scale_blocks():
    column = field("price", "bytes", DECIMAL, {"connect.decimal.precision": "10"})
    outcome = blocked(column, "AdTA")
    assert outcome.reason is BlockReason.DECIMAL_SCALE_MISSING
    assert "price" in outcome.detail


@pytest.mark.parametrize("kind, raw, expected", [
    ("int8", -128, -128), ("int16", 32767, 32767), ("int32", -2147483648, -2147483648),
    ("int64", 9223372036854775807, 9223372036854775807),
    ("float", 99.99, 99.99), ("double", -1.5e300, -1.5e300), ("double", 3, 3.0),
    ("boolean", True, True), ("boolean", False, False),
    ("string", "Grüße 🚢", "Grüße 🚢"), ("bytes", "AQID", b"\x01\x02\x03"), ("bytes", "", b""),
])
def test_plain_connect_types(kind, raw, expected):
    exactly(value_of(field("c", kind), raw), expected)


@pytest.mark.parametrize("logical, kind, raw, expected", [
    ("io.debezium.time.Date", "int32", 17702, dt.date(2018, 6, 20)),
    ("io.debezium.time.Date", "int32", -1, dt.date(1969, 12, 31)),
    ("org.apache.kafka.connect.data.Date", "int32", 0, dt.date(1970, 1, 1)),
    ("io.debezium.time.Time", "int32", 3723004, dt.time(1, 2, 3, 4000)),
    ("org.apache.kafka.connect.data.Time", "int32", 3723004, dt.time(1, 2, 3, 4000)),
    ("io.debezium.time.MicroTime", "int64", 3723000004, dt.time(1, 2, 3, 4)),
    ("io.debezium.time.MicroTime", "int64", 86399999999, dt.time(23, 59, 59, 999999)),
    ("io.debezium.time.NanoTime", "int64", 3723000004000, dt.time(1, 2, 3, 4)),
    ("io.debezium.time.Timestamp", "int64", 1529476623000,
     dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=UTC)),
    ("io.debezium.time.Timestamp", "int64", 1747051999000,
     dt.datetime(2025, 5, 12, 12, 13, 19, tzinfo=UTC)),
    ("org.apache.kafka.connect.data.Timestamp", "int64", 1529476623123,
     dt.datetime(2018, 6, 20, 6, 37, 3, 123000, tzinfo=UTC)),
    ("io.debezium.time.MicroTimestamp", "int64", 1529476623123456,
     dt.datetime(2018, 6, 20, 6, 37, 3, 123456, tzinfo=UTC)),
    ("io.debezium.time.NanoTimestamp", "int64", 1529476623123456000,
     dt.datetime(2018, 6, 20, 6, 37, 3, 123456, tzinfo=UTC)),
    ("io.debezium.time.Timestamp", "int64", 0, dt.datetime(1970, 1, 1, tzinfo=UTC)),
    ("io.debezium.time.ZonedTimestamp", "string", "2025-02-12T10:10:04Z",
     dt.datetime(2025, 2, 12, 10, 10, 4, tzinfo=UTC)),
    ("io.debezium.time.ZonedTimestamp", "string", "2025-02-12T12:10:04.5+02:00",
     dt.datetime(2025, 2, 12, 10, 10, 4, 500000, tzinfo=UTC)),
    ("io.debezium.time.Year", "int32", 2024, 2024),
    ("io.debezium.data.Enum", "string", "shipped", "shipped"),
    ("io.debezium.data.EnumSet", "string", "fragile,urgent", "fragile,urgent"),
    ("io.debezium.data.Json", "string", '{"deck": [1, 2]}', JsonText('{"deck": [1, 2]}')),
])
def test_logical_types(logical, kind, raw, expected):
    value = value_of(field("c", kind, logical), raw)
    exactly(value, expected)
    if isinstance(value, dt.datetime):
        assert value.utcoffset() == dt.timedelta(0)


def test_datetime_prints_as_iso_utc_with_z():
    value = value_of(field("c", "int64", "io.debezium.time.Timestamp"), 1529476623000)
    assert value_to_json(value) == "2018-06-20T06:37:03Z"


@pytest.mark.parametrize("length, encoded, expected_bits", [
    ("5", "Fg==", "10110"),  # 0x16, one byte
    ("16", "AgE=", "0000000100000010"),  # little-endian [0x02, 0x01] = 0x0102
    ("64", "//////////8=", "1" * 64),
])
def test_bits_are_little_endian(length, encoded, expected_bits):
    value = value_of(field("flags", "bytes", "io.debezium.data.Bits", {"length": length}),
                     encoded)
    assert value == BitString(int(length), int(expected_bits, 2))
    assert isinstance(value, BitString) and value.text() == expected_bits


def test_bit_1_arrives_as_boolean():
    exactly(value_of(field("on_board", "boolean"), True), True)


@pytest.mark.parametrize("column, raw", [
    (field("c", "bytes", "io.debezium.data.Bits", {"length": "3"}), "Fg=="),  # 22 > 0b111
    (field("c", "int64", "io.debezium.time.MicroTime"), 86400000000),
    (field("c", "int64", "io.debezium.time.MicroTime"), -1),
    (field("c", "int64", "io.debezium.time.NanoTime"), 1001),
    (field("c", "string", "io.debezium.time.ZonedTimestamp"), "2025-02-12T10:10:04"),
    (field("c", "string", "io.debezium.data.Json"), "{not json"),
    (field("c", "int64", "io.debezium.time.Timestamp"), 10**20),
    (field("c", "int32", "io.debezium.time.Date"), 10**9),
    (field("c", "int32"), "12"),
    (field("c", "int32"), 1.5),
    (field("c", "int32"), True),
    (field("c", "string"), 5),
    (field("c", "boolean"), 1),
    (field("c", "bytes"), "not base64!"),
    (field("c", "double"), "1.5"),
    (field("c", "bytes", DECIMAL, {"scale": "2"}), ""),
    (field("c", "struct", "io.debezium.data.geometry.Geometry"), {"srid": 4326, "wkb": "AQ=="}),
    (field("c", "string", "io.debezium.data.SomethingNew"), "x"),
    (field("c", "array"), [1.0, 2.0]),
    (field("c", "string", DECIMAL, {"scale": "2"}), "12.00"),
])
def test_values_that_do_not_decode_as_declared_block(column, raw):
    outcome = blocked(column, raw)
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE
    assert "'c'" in outcome.detail


def test_unknown_logical_type_blocks_even_when_null():
    outcome = blocked(field("shape", "struct", "io.debezium.data.geometry.Point"), None)
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE


# --- TINYINT(1) and other columns refined by the ship's column types -------------------------

ORDERS_TYPES = {"fleet.orders": {
    "id": "bigint", "paid": "tinyint(1)", "price": "decimal(10,2)",
    "big": "bigint(20) unsigned", "qty": "smallint",
}}


@pytest.mark.parametrize("kind, raw, op, snapshot", [
    ("int16", 1, "r", "true"),  # snapshot: Debezium sees TINYINT(1)
    ("boolean", True, "c", "false"),  # streaming after a CREATE … BOOLEAN
    ("int8", 1, "c", "last"),
])
def test_tinyint1_is_a_bool_both_ways_with_column_types(kind, raw, op, snapshot):
    value = value_of(field("paid", kind), raw, using=normalizer(ORDERS_TYPES), op=op,
                     snapshot=snapshot)
    exactly(value, True)


def test_tinyint1_keeps_the_declared_type_without_column_types():
    exactly(value_of(field("paid", "int16"), 1, op="r", snapshot="true"), 1)
    exactly(value_of(field("paid", "boolean"), True), True)


def test_tinyint1_holding_another_number_blocks_rather_than_losing_it():
    outcome = blocked(field("paid", "int16"), 5, using=normalizer(ORDERS_TYPES))
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE


def test_other_small_ints_stay_ints_with_column_types():
    exactly(value_of(field("qty", "int16"), 1, using=normalizer(ORDERS_TYPES)), 1)


def test_decimal_in_string_mode_becomes_a_decimal_when_the_column_says_decimal():
    exactly(value_of(field("price", "string"), "1200.00", using=normalizer(ORDERS_TYPES)),
            Decimal("1200.00"))
    exactly(value_of(field("price", "string"), "1200.00"), "1200.00")  # declared: a string


def test_decimal_in_double_mode_blocks_when_the_column_says_decimal():
    outcome = blocked(field("price", "double"), 1200.0, using=normalizer(ORDERS_TYPES))
    assert outcome.reason is BlockReason.IMPRECISE_DECIMAL


def test_bigint_unsigned_is_an_int_in_long_and_precise_modes():
    using = normalizer(ORDERS_TYPES)
    exactly(value_of(field("big", "int64"), 5, using=using), 5)
    exactly(value_of(field("big", "bytes", DECIMAL, {"scale": "0"}), "AP//////////",
                     using=using), 2**64 - 1)
    overflowed = blocked(field("big", "int64"), -1, using=using)
    assert overflowed.reason is BlockReason.UNSUPPORTED_TYPE


# --- payload-only records, decoded from the column types ----------------------------------

ALL_TYPES = {
    "id": "bigint(20)", "price": "decimal(10,2)", "price_text": "decimal(10,2)",
    "created": "datetime(3)", "created_fine": "datetime(6)", "created_plain": "datetime",
    "stamped": "timestamp(6)", "day": "date", "at": "time(6)", "doc": "json",
    "blob": "longblob", "tag": "varbinary(16)", "flags": "bit(5)", "flag": "bit(1)",
    "status": "enum('new','shipped')", "labels": "set('fragile','urgent')", "qty": "int(11)",
    "small": "mediumint unsigned", "big": "bigint unsigned", "name": "varchar(255)",
    "note": "text", "built": "year(4)", "paid": "tinyint(1)", "ratio": "double",
    "weight": "float",
}
ALL_VALUES = {
    "id": 7, "price": "AdTA", "price_text": "-1200.05", "created": 1529476623000,
    "created_fine": 1529476623123456, "created_plain": 1529476623000,
    "stamped": "2025-02-12T10:10:04.000001Z", "day": 17702, "at": 3723000004,
    "doc": '{"a": 1}', "blob": "AQID", "tag": "", "flags": "Fg==", "flag": True,
    "status": "shipped", "labels": "fragile,urgent", "qty": -3, "small": 16777215,
    "big": 18446744073709551615, "name": "Ocean Star", "note": "", "built": 2024, "paid": 0,
    "ratio": 0.25, "weight": 12,
}
ALL_EXPECTED: dict[str, Value] = {
    "id": 7, "price": Decimal("1200.00"), "price_text": Decimal("-1200.05"),
    "created": dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=UTC),
    "created_fine": dt.datetime(2018, 6, 20, 6, 37, 3, 123456, tzinfo=UTC),
    "created_plain": dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=UTC),
    "stamped": dt.datetime(2025, 2, 12, 10, 10, 4, 1, tzinfo=UTC), "day": dt.date(2018, 6, 20),
    "at": dt.time(1, 2, 3, 4), "doc": JsonText('{"a": 1}'), "blob": b"\x01\x02\x03",
    "tag": b"", "flags": BitString(5, 0b10110), "flag": True, "status": "shipped",
    "labels": "fragile,urgent", "qty": -3, "small": 16777215, "big": 18446744073709551615,
    "name": "Ocean Star", "note": "", "built": 2024, "paid": False, "ratio": 0.25,
    "weight": 12.0,
}


def payload_only(after: dict[str, Any], types: dict[str, str] | None = None,
                 **settings: Any) -> Outcome:
    using = normalizer({"fleet.orders": types or ALL_TYPES}, **settings)
    return normalize(compact(envelope(after=after)), b'{"id":7}', using=using)


def test_payload_only_columns_decode_from_the_column_types():
    outcome = payload_only(ALL_VALUES)
    assert isinstance(outcome, Normalized), outcome
    after = outcome.event.after
    assert after is not None
    assert set(after) == set(ALL_EXPECTED)
    for column, expected in ALL_EXPECTED.items():
        exactly(after[column], expected)
    assert outcome.event.primary_key == {"id": 7}


def test_payload_only_and_with_schema_give_the_same_values():
    """The same row, once per converter setting, normalizes to the same images."""
    columns = [
        field("id", "int64", optional=False),
        field("price", "bytes", DECIMAL, {"scale": "2"}),
        field("created", "int64", "io.debezium.time.Timestamp"),
        field("stamped", "string", "io.debezium.time.ZonedTimestamp"),
        field("paid", "int16"),
    ]
    row = {"id": 7, "price": "AdTA", "created": 1529476623000,
           "stamped": "2025-02-12T10:10:04Z", "paid": 1}
    types = {"fleet.orders": {"id": "bigint", "price": "decimal(10,2)",
                              "created": "datetime(3)", "stamped": "timestamp",
                              "paid": "tinyint(1)"}}
    using = normalizer(types)

    schemaful = normalize(with_schema(envelope_schema(columns), envelope(after=row)),
                          b'{"id":7}', using=using)
    schemaless = normalize(compact(envelope(after=row)), b'{"id":7}', using=using)

    assert isinstance(schemaful, Normalized) and isinstance(schemaless, Normalized)
    assert schemaful.event.after == schemaless.event.after
    assert schemaful.event.event_id == schemaless.event.event_id
    assert schemaless.event.after is not None and schemaless.event.after["paid"] is True


@pytest.mark.parametrize("raw, scale, handling, expected", [
    ("AdTA", 2, None, Decimal("1200.00")),
    # Digits only at scale 2 can only be base64 (string mode would write "12.34"):
    # "1234" = 0xD76DF8 = -2658824 as two's complement.
    ("1234", 2, None, Decimal("-26588.24")),
    ("12.34", 2, None, Decimal("12.34")),
    ("-5", 0, None, Decimal("-5")),
    ("123", 0, None, Decimal("123")),  # length not a multiple of 4: not base64
    ("1234", 0, DecimalHandling.STRING, Decimal("1234")),
    ("MDk=", 0, DecimalHandling.PRECISE, Decimal("12345")),
])
def test_payload_only_decimal_forms(raw, scale, handling, expected):
    outcome = payload_only({"id": 7, "price": raw},
                           {"id": "bigint", "price": f"decimal(12,{scale})"},
                           decimal_handling=handling)
    assert isinstance(outcome, Normalized), outcome
    assert outcome.event.after is not None
    exactly(outcome.event.after["price"], expected)


def test_payload_only_decimal_text_that_could_be_base64_blocks_unless_configured():
    outcome = payload_only({"id": 7, "price": "1234"}, {"id": "bigint", "price": "decimal(12)"})
    assert isinstance(outcome, Block)
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE
    assert "decimal handling" in outcome.detail


@pytest.mark.parametrize("raw", [1200.5, 1200])
def test_payload_only_number_for_a_decimal_blocks(raw):
    outcome = payload_only({"id": 7, "price": raw}, {"id": "bigint", "price": "decimal(10,2)"})
    assert isinstance(outcome, Block)
    assert outcome.reason is BlockReason.IMPRECISE_DECIMAL


def test_payload_only_column_without_a_type_blocks():
    outcome = payload_only({"id": 7, "mystery": 1}, {"id": "bigint"})
    assert isinstance(outcome, Block)
    assert outcome.reason is BlockReason.TYPE_INFO_MISSING
    assert "mystery" in outcome.detail


@pytest.mark.parametrize("kind", ["geometry", "point", "vector(3)", "frobnicate"])
def test_payload_only_column_of_an_unsupported_type_blocks(kind):
    outcome = payload_only({"id": 7, "shape": None}, {"id": "bigint", "shape": kind})
    assert isinstance(outcome, Block)
    assert outcome.reason is BlockReason.UNSUPPORTED_TYPE


def test_payload_only_unsupported_column_does_not_block_rows_without_it():
    outcome = payload_only({"id": 7}, {"id": "bigint", "shape": "geometry"})
    assert isinstance(outcome, Normalized)


def test_column_types_refresh_rebuilds_the_decoders():
    using = normalizer({"fleet.orders": {"id": "bigint", "paid": "smallint"}})
    first = normalize(compact(envelope(after={"id": 7, "paid": 1})), b'{"id":7}', using=using)
    assert isinstance(first, Normalized) and first.event.after is not None
    exactly(first.event.after["paid"], 1)

    types = using.settings.column_types
    assert types is not None
    types.set_table("fleet", "orders", {"id": "bigint", "paid": "tinyint(1)"})  # type: ignore[attr-defined]
    second = normalize(compact(envelope(after={"id": 7, "paid": 1})), b'{"id":7}', using=using)
    assert isinstance(second, Normalized) and second.event.after is not None
    exactly(second.event.after["paid"], True)


@pytest.mark.parametrize("text, base, arguments, unsigned", [
    ("decimal(10,2)", "decimal", "10,2", False),
    ("bigint(20) unsigned zerofill", "bigint", "20", True),
    ("enum('a','b')", "enum", "'a','b'", False),
    ("DOUBLE PRECISION", "double precision", None, False),
    ("datetime(3)", "datetime", "3", False),
])
def test_mysql_column_type_text_parses(text, base, arguments, unsigned):
    parsed = MySQLColumnType.parse(text)
    assert (parsed.base, parsed.arguments, parsed.unsigned) == (base, arguments, unsigned)


# --- exact decimals, for any unscaled value and scale ---------------------------------------


@given(unscaled=st.integers(-(10**65) + 1, 10**65 - 1), scale=st.integers(0, 30))
def test_decimal_roundtrip(unscaled, scale):
    column = field("amount", "bytes", DECIMAL, {"scale": str(scale)})

    value = value_of(column, unscaled_base64(unscaled))

    assert isinstance(value, Decimal)
    assert value.as_tuple().exponent == -scale
    assert int(value.scaleb(scale, Context(prec=100))) == unscaled


@given(unscaled=st.integers(-(10**20), 10**20), scale=st.integers(0, 10))
def test_payload_only_decimal_roundtrip(unscaled, scale):
    outcome = payload_only({"id": 7, "amount": unscaled_base64(unscaled)},
                           {"id": "bigint", "amount": f"decimal(30,{scale})"},
                           decimal_handling=DecimalHandling.PRECISE)

    assert isinstance(outcome, Normalized) and outcome.event.after is not None
    value = outcome.event.after["amount"]
    assert isinstance(value, Decimal)
    assert int(value.scaleb(scale, Context(prec=100))) == unscaled
