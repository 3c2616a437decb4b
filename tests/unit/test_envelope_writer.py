"""The Debezium envelope writer emits what Debezium's MySQL connector emits with the JSON
converter: the published examples' schemas and payloads (Debezium docs, `customers` table; see
fixtures/debezium/mysql_*_docs_modern.json), the 3.x record layout and the type encodings."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
    column_schema,
    connect_value,
)
from tidesync.domain.values import BitString, JsonText

CUSTOMERS = TableDefinition(
    "inventory", "customers",
    (
        ColumnDefinition.parse("id", "int", nullable=False),
        ColumnDefinition.parse("first_name", "varchar(255)", nullable=False),
        ColumnDefinition.parse("last_name", "varchar(255)", nullable=False),
        ColumnDefinition.parse("email", "varchar(255)", nullable=False),
    ),
    ("id",),
)
ANNE = {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
        "email": "annek@noanswer.org"}
SOURCE = SourceInfo(server_id=223344, file="mysql-bin.000003", pos=484, ts_ms=1465581029000,
                    thread=7)
PROCESSED = dt.datetime(2016, 6, 10, 17, 50, 29, 523758, tzinfo=dt.UTC)


# From the Debezium documentation's MySQL examples (key record and the `after` field schema).
PUBLISHED_KEY_SCHEMA = {
    "type": "struct", "name": "mysql-server-1.inventory.customers.Key", "optional": False,
    "fields": [{"field": "id", "type": "int32", "optional": False}],
}
PUBLISHED_ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "first_name"},
    {"type": "string", "optional": False, "field": "last_name"},
    {"type": "string", "optional": False, "field": "email"},
]


def test_key_record_matches_the_published_example() -> None:
    record = DebeziumEnvelopeWriter("mysql-server-1").change(
        CUSTOMERS, EnvelopeOp.CREATE, before=None, after=ANNE, source=SOURCE,
        processed_at=PROCESSED,
    )
    assert record.key == {"schema": PUBLISHED_KEY_SCHEMA, "payload": {"id": 1004}}
    assert record.topic == "mysql-server-1.inventory.customers"


def test_row_schemas_and_images_match_the_published_example() -> None:
    record = DebeziumEnvelopeWriter("mysql-server-1").change(
        CUSTOMERS, EnvelopeOp.CREATE, before=None, after=ANNE, source=SOURCE,
        processed_at=PROCESSED,
    )
    assert record.value is not None
    fields = {f["field"]: f for f in record.value["schema"]["fields"]}
    for image in ("before", "after"):
        assert fields[image] == {
            "type": "struct", "fields": PUBLISHED_ROW_FIELDS, "optional": True,
            "name": "mysql-server-1.inventory.customers.Value", "field": image,
        }
    assert record.value["payload"]["after"] == ANNE
    assert record.value["payload"]["before"] is None


def test_schemas_follow_a_changed_table_definition() -> None:
    writer = DebeziumEnvelopeWriter("srv")
    altered = TableDefinition(
        CUSTOMERS.database, CUSTOMERS.table,
        (*CUSTOMERS.columns, ColumnDefinition.parse("vip", "tinyint(1)")), CUSTOMERS.primary_key,
    )
    for table, row in ((CUSTOMERS, ANNE), (altered, {**ANNE, "vip": 1})):
        record = writer.change(table, EnvelopeOp.CREATE, before=None, after=row,
                               source=SOURCE, processed_at=PROCESSED)
        assert record.value is not None
        after_schema = record.value["schema"]["fields"][1]
        assert [f["field"] for f in after_schema["fields"]] == list(row)


def test_envelope_has_the_debezium_3_layout() -> None:
    record = DebeziumEnvelopeWriter("srv").change(
        CUSTOMERS, EnvelopeOp.UPDATE, before=ANNE, after={**ANNE, "first_name": "Anne Marie"},
        source=SOURCE, processed_at=PROCESSED,
    )
    assert record.value is not None
    schema, payload = record.value["schema"], record.value["payload"]
    assert [f["field"] for f in schema["fields"]] == [
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert schema["name"] == "srv.inventory.customers.Envelope" and schema["version"] == 2
    assert list(payload) == [
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert list(payload["source"]) == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us",
        "ts_ns", "table", "server_id", "gtid", "file", "pos", "row", "thread", "query"]
    assert payload["op"] == "u" and payload["ts_ms"] == 1465581029523
    assert payload["ts_us"] == 1465581029523758
    assert payload["source"]["snapshot"] == "false" and payload["source"]["db"] == "inventory"
    source_schema = next(f for f in schema["fields"] if f["field"] == "source")
    assert [f["field"] for f in source_schema["fields"]] == list(payload["source"])
    assert json.loads(record.value_bytes() or b"") == record.value
    assert b" " not in (record.key_bytes() or b"")


def test_wrong_images_for_the_operation_are_refused() -> None:
    writer = DebeziumEnvelopeWriter("srv")
    with pytest.raises(ValueError, match="images"):
        writer.change(CUSTOMERS, EnvelopeOp.DELETE, before=None, after=ANNE, source=SOURCE,
                      processed_at=PROCESSED)


def test_tombstone_has_the_key_and_no_value() -> None:
    record = DebeziumEnvelopeWriter("srv").tombstone(CUSTOMERS, ANNE)
    assert record.value is None and record.value_bytes() is None
    assert record.key is not None and record.key["payload"] == {"id": 1004}


@pytest.mark.parametrize(("column_type", "value", "encoded"), [
    ("decimal(10,2)", Decimal("1200.00"), "AdTA"),  # the SEMANTICS §5 example
    ("decimal(10,2)", Decimal("-1.5"), base64.b64encode(b"\xff\x6a").decode()),
    ("decimal(10,2)", Decimal("0"), "AA=="),
    ("bit(12)", BitString(12, 0x0A0B), base64.b64encode(b"\x0b\x0a").decode()),
    ("bit(1)", 1, True),
    ("date", dt.date(1970, 1, 11), 10),
    ("time(6)", dt.time(1, 0, 0, 5), 3_600_000_005),
    ("datetime", dt.datetime(2018, 6, 20, 6, 37, 3, tzinfo=dt.UTC), 1529476623000),
    ("datetime(6)", dt.datetime(2018, 6, 20, 6, 37, 3, 7, tzinfo=dt.UTC), 1529476623000007),
    ("timestamp", dt.datetime(2025, 2, 12, 10, 10, 4, tzinfo=dt.UTC), "2025-02-12T10:10:04Z"),
    ("timestamp(3)", dt.datetime(2025, 2, 12, 10, 10, 4, 120000, tzinfo=dt.UTC),
     "2025-02-12T10:10:04.120Z"),
    ("json", JsonText('{"a": 1}'), '{"a": 1}'),
    ("varbinary(4)", b"\x00\xff", "AP8="),
    ("tinyint(1)", True, 1),
    ("enum('A','B')", "B", "B"),
    ("int", None, None),
])
def test_values_use_debeziums_encodings(column_type: str, value: Any, encoded: Any) -> None:
    assert connect_value(ColumnDefinition.parse("c", column_type), value) == encoded


@pytest.mark.parametrize(("column_type", "expected"), [
    ("tinyint", {"type": "int16"}),
    ("smallint unsigned", {"type": "int32"}),
    ("int unsigned", {"type": "int64"}),
    ("bigint unsigned", {"type": "int64"}),
    ("decimal(12,4)", {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                       "version": 1,
                       "parameters": {"scale": "4", "connect.decimal.precision": "12"}}),
    ("datetime(3)", {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}),
    ("datetime(6)", {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}),
    ("timestamp", {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    ("enum('a','it''s')", {"type": "string", "name": "io.debezium.data.Enum", "version": 1,
                           "parameters": {"allowed": "a,it's"}}),
    ("bit(5)", {"type": "bytes", "name": "io.debezium.data.Bits", "version": 1,
                "parameters": {"length": "5"}}),
    ("double", {"type": "double"}),
    ("longtext", {"type": "string"}),
])
def test_column_schemas(column_type: str, expected: dict[str, Any]) -> None:
    schema = column_schema(ColumnDefinition.parse("c", column_type, nullable=False))
    assert schema == {**expected, "optional": False, "field": "c"}
    assert list(schema)[:2] == ["type", "optional"] and list(schema)[-1] == "field"


def test_default_values_are_written_in_the_schema() -> None:
    column = ColumnDefinition.parse("qty", "int", nullable=False, default=0)
    assert column_schema(column) == {"type": "int32", "optional": False, "default": 0,
                                     "field": "qty"}


def test_a_decimal_that_does_not_fit_the_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale"):
        connect_value(ColumnDefinition.parse("c", "decimal(10,2)"), Decimal("1.005"))


def test_wide_decimals_keep_every_digit_through_the_normalizer():
    """DECIMAL(65,30) values exceed Decimal's default 28-digit context; none may be rounded."""
    import json as _json

    from tidesync.capture.envelope_writer import (
        ColumnDefinition,
        DebeziumEnvelopeWriter,
        EnvelopeOp,
        SourceInfo,
        TableDefinition,
    )
    from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
    from tidesync.cdc.outcomes import Normalized

    table = TableDefinition("fleet", "ledger", (
        ColumnDefinition.parse("id", "int", nullable=False),
        ColumnDefinition.parse("amount", "decimal(65,30)", nullable=False),
    ), ("id",))
    wide = Decimal("-12345678901234567890123456789012345.123456789012345678901234567891")
    record = DebeziumEnvelopeWriter("ship1").change(
        table, EnvelopeOp.CREATE, before=None, after={"id": 1, "amount": wide},
        source=SourceInfo(server_id=1, file="bin.000001", pos=4, row=0, ts_ms=0),
        processed_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    outcome = DebeziumNormalizer(NormalizerSettings("ship-1", "c")).normalize(KafkaRecord(
        record.topic, 0, 0, record.key_bytes(), _json.dumps(record.value).encode()))
    assert isinstance(outcome, Normalized)
    assert outcome.event.after["amount"] == wide
    assert str(outcome.event.after["amount"]) == str(wide)
