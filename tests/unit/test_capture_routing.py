"""Built-in capture records for tables related by foreign keys: one topic per database in
partition 0 with the router's key field, the transaction block, and the foreign key checks
flag, read back by the normalizer into the event."""

from __future__ import annotations

import datetime as dt

from tidesync.capture.change_records import RowChange, change_records
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
    TransactionInfo,
)
from tidesync.capture.settings import CaptureConfig, TopicRouting
from tidesync.cdc.debezium import (
    FOREIGN_KEY_CHECKS_HEADER,
    DebeziumNormalizer,
    KafkaRecord,
    NormalizerSettings,
)
from tidesync.cdc.outcomes import Normalized

STORE = TableDefinition("sakila", "store", (
    ColumnDefinition.parse("store_id", "tinyint unsigned", nullable=False),
    ColumnDefinition.parse("manager_staff_id", "tinyint unsigned", nullable=False),
), ("store_id",))
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def source(**fields: object) -> SourceInfo:
    return SourceInfo(server_id=1, file="bin.000001", pos=4, ts_ms=0, **fields)  # type: ignore[arg-type]


def normalized(record, headers=()) -> Normalized:
    outcome = DebeziumNormalizer(NormalizerSettings("ship-1", "c")).normalize(KafkaRecord(
        record.topic, 0, 0, record.key_bytes(), record.value_bytes(), tuple(headers)))
    assert isinstance(outcome, Normalized), outcome
    return outcome


def test_table_routing_stays_the_default_and_unchanged():
    assert CaptureConfig().topic_routing is TopicRouting.TABLE
    record = DebeziumEnvelopeWriter("sync.cdc.ship1").change(
        STORE, EnvelopeOp.CREATE, before=None, after={"store_id": 1, "manager_staff_id": 1},
        source=source(), processed_at=AT)
    assert record.topic == "sync.cdc.ship1.sakila.store" and record.partition is None
    assert record.key is not None and record.key["payload"] == {"store_id": 1}
    assert record.value is not None and record.value["payload"]["transaction"] is None


def test_database_routing_writes_one_topic_partition_zero_with_distinct_keys():
    writer = DebeziumEnvelopeWriter("sync.cdc.ship1", routing=TopicRouting.DATABASE)
    record = writer.change(STORE, EnvelopeOp.CREATE, before=None,
                           after={"store_id": 1, "manager_staff_id": 1}, source=source(),
                           processed_at=AT)
    assert record.topic == "sync.cdc.ship1.sakila" and record.partition == 0
    assert record.key is not None and record.key["payload"] == {
        "store_id": 1, "__dbz__physicalTableIdentifier": "sync.cdc.ship1.sakila.store"}
    tombstone = writer.tombstone(STORE, {"store_id": 1, "manager_staff_id": 1})
    assert tombstone.topic == record.topic and tombstone.partition == 0
    # The router's key field is not a column: the event's key is the table's primary key.
    event = normalized(record).event
    assert event.record.table == "store" and event.record.primary_key == (("store_id", 1),)


def test_the_transaction_block_and_the_checks_flag_reach_the_event():
    writer = DebeziumEnvelopeWriter("sync.cdc.ship1", routing=TopicRouting.DATABASE)
    change = RowChange(STORE, EnvelopeOp.CREATE, None, {"store_id": 1, "manager_staff_id": 9},
                       source(transaction=TransactionInfo("0-1-42", 3, 2),
                              foreign_key_checks=False))
    [(record, headers)] = change_records(writer, change, AT, tombstones=True)
    assert record.value is not None and record.value["payload"]["transaction"] == {
        "id": "0-1-42", "total_order": 3, "data_collection_order": 2}
    assert (FOREIGN_KEY_CHECKS_HEADER, b"0") in headers
    event = normalized(record, headers).event
    assert (event.transaction_id, event.transaction_order) == ("0-1-42", 3)
    assert event.source_details["fk_checks"] is False
    assert event.source_details["transaction_data_collection_order"] == 2


def test_checks_on_add_no_header_and_a_delete_tombstone_never_carries_it():
    writer = DebeziumEnvelopeWriter("p")
    on = RowChange(STORE, EnvelopeOp.CREATE, None, {"store_id": 1, "manager_staff_id": 9},
                   source())
    [(record, headers)] = change_records(writer, on, AT, tombstones=True)
    assert headers == () and "fk_checks" not in normalized(record).event.source_details
    off = RowChange(STORE, EnvelopeOp.DELETE, {"store_id": 1, "manager_staff_id": 9}, None,
                    source(foreign_key_checks=False))
    (_, delete_headers), (tombstone, tombstone_headers) = change_records(
        writer, off, AT, tombstones=True)
    assert delete_headers == ((FOREIGN_KEY_CHECKS_HEADER, b"0"),)
    assert tombstone.value is None and tombstone_headers == ()
