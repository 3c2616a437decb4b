"""Every published Debezium MySQL record in the shared fixtures, through the normalizer.

Each file has one expected outcome (operation, key, exact row values, capture time, or the
skip/block reason); a fixture added to the folder without an expectation here fails the run.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import pytest

from tests.unit.debezium_records import fixtures_dir
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Block, BlockReason, Normalized, Outcome, Skip, SkipReason
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    SourceCoordinates,
    event_id_for,
)

FIXTURES = fixtures_dir()
TOPIC = "mysql-server-1.inventory.customers"

# The customers table as the schema-change fixture describes it (after its ALTER).
CUSTOMERS_TYPES = InMemoryColumnTypes.from_json({"inventory.customers": {
    "id": "int", "first_name": "varchar(255)", "middle_name": "varchar(255)",
    "last_name": "varchar(255)", "email": "varchar(255)",
}, "s1.a": {"pk": "varchar(16)", "aa": "varchar(16)"}})

ANNE = {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
        "email": "annek@noanswer.org"}
ANNE_MARIE = {**ANNE, "first_name": "Anne Marie"}
KEY_1004 = b'{"id":1004}'


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def run(value: bytes | None, key: bytes | None = None, *, topic: str = TOPIC, offset: int = 7,
        types: InMemoryColumnTypes | None = CUSTOMERS_TYPES,
        headers: tuple[tuple[str, bytes | None], ...] = ()) -> Outcome:
    normalizer = DebeziumNormalizer(NormalizerSettings(
        origin_node_id="ship-7", source_connector_id="inventory-connector", column_types=types,
    ))
    return normalizer.normalize(KafkaRecord(topic, 0, offset, key, value, headers))


def event_of(outcome: Outcome) -> ChangeEvent:
    assert isinstance(outcome, Normalized), outcome
    return outcome.event


def assert_block(outcome: Outcome, reason: BlockReason, detail_part: str = "") -> None:
    assert isinstance(outcome, Block), outcome
    assert outcome.reason is reason, outcome
    assert detail_part in outcome.detail


def assert_skip(outcome: Outcome, reason: SkipReason) -> Skip:
    assert isinstance(outcome, Skip), outcome
    assert outcome.reason is reason
    return outcome


# --- files whose outcome is a change event ------------------------------------------------


def test_core_test_create_with_schema_is_an_insert_with_exact_values():
    event = event_of(run(fixture("mysql_create_value_with_schema__core_test.json"), KEY_1004))

    assert event.operation is Operation.INSERT
    assert (event.database, event.schema, event.table) == ("inventory", None, "customers")
    assert event.record.primary_key == (("id", 1004),)
    assert event.before is None
    assert dict(event.after or {}) == ANNE
    assert type(event.after and event.after["id"]) is int
    assert event.captured_at == utc("2016-06-09T16:56:51.815")  # envelope ts_ms
    assert (event.source_topic, event.source_partition, event.source_position) == (TOPIC, 0, 7)
    assert event.base_revision is None and event.result_revision is None
    assert event.transaction_id is None and event.transaction_order is None
    assert dict(event.source_details) == {
        "connector": "mysql", "server_name": "mysql-server-1",
        "debezium_version": "0.10.0.Final", "server_id": 0, "binlog_file": "mysql-bin.000003",
        "binlog_position": 154, "binlog_row": 0, "thread": 7, "source_ts_ms": 0,
        "snapshot": "false",
    }


def test_event_id_comes_from_the_record_coordinates():
    event = event_of(run(fixture("mysql_create_value_with_schema__core_test.json"), KEY_1004))

    coordinates = SourceCoordinates("ship-7", 0, TOPIC, 0, 7)
    assert event.event_id == event_id_for(coordinates, event.record, Operation.INSERT)
    assert event.event_id == event.expected_event_id()
    again = event_of(run(fixture("mysql_create_value_with_schema__core_test.json"), KEY_1004))
    assert again.event_id == event.event_id
    moved = event_of(run(fixture("mysql_create_value_with_schema__core_test.json"), KEY_1004,
                         offset=8))
    assert moved.event_id != event.event_id


@pytest.mark.parametrize("name", ["mysql_create_value_with_schema__docs.json",
                                  "mysql_create_value_with_schema__docs_modern.json"])
def test_docs_create_with_its_matching_key_is_an_insert(name):
    event = event_of(run(fixture(name), KEY_1004))

    assert event.operation is Operation.INSERT
    assert event.primary_key == {"id": 1004}
    assert dict(event.after or {}) == ANNE
    assert event.captured_at == utc("2016-06-09T16:56:51.815")
    assert event.source_details["debezium_version"] == "{debezium-version}"
    assert "query" not in event.source_details  # the SQL text can hold business values


@pytest.mark.parametrize("value, key", [
    ("mysql_create_value_with_schema__docs.json", "mysql_key_with_schema__docs.json"),
    ("mysql_create_value_with_schema__docs_modern.json",
     "mysql_key_with_schema__docs_modern.json"),
])
def test_docs_key_fixture_disagrees_with_the_docs_row_and_blocks(value, key):
    """The docs illustrate the key with id 1001 but the create event with id 1004."""
    assert json.loads(fixture(key))["payload"] == {"id": 1001}

    assert_block(run(fixture(value), fixture(key)), BlockReason.KEY_MISMATCH, "'id'")


@pytest.mark.parametrize("key", ["mysql_key_with_schema__docs.json",
                                 "mysql_key_with_schema__docs_modern.json"])
def test_docs_key_with_schema_names_the_primary_key(key):
    document = json.loads(fixture("mysql_create_value_with_schema__docs.json"))
    document["payload"]["after"]["id"] = 1001

    event = event_of(run(json.dumps(document).encode(), fixture(key)))

    assert event.record.primary_key == (("id", 1001),)


def test_legacy_v1_snapshot_row_emitted_as_create_is_a_snapshot():
    event = event_of(run(
        fixture("mysql_legacy_v1source_snapshot_as_create_value_with_schema__tutorial.json"),
        fixture("mysql_legacy_v1source_snapshot_key_with_schema__tutorial.json"),
        topic="dbserver1.inventory.customers",
    ))

    assert event.operation is Operation.SNAPSHOT
    assert event.primary_key == {"id": 1004}
    assert event.before is None
    assert dict(event.after or {}) == ANNE
    # ts_sec is 0 in this legacy source block; the envelope ts_ms is the capture time.
    assert event.captured_at == utc("2017-03-27T17:08:57.160")
    assert event.source_details["snapshot"] == "true"
    assert event.source_details["source_ts_sec"] == 0
    assert event.source_details["server_name"] == "dbserver1"
    assert "connector" not in event.source_details


@pytest.mark.parametrize("name, captured", [
    ("mysql_update_payload__docs.json", "2016-06-10T17:50:29.523"),
    ("mysql_update_payload__docs_modern.json", "2016-06-10T17:50:29.523"),
])
def test_docs_update_payload_only_with_column_types_is_an_update(name, captured):
    event = event_of(run(fixture(name), KEY_1004))

    assert event.operation is Operation.UPDATE
    assert event.primary_key == {"id": 1004}
    assert dict(event.before or {}) == ANNE
    assert dict(event.after or {}) == ANNE_MARIE
    assert event.changed_columns() == ("first_name",)
    assert event.captured_at == utc(captured)
    assert event.source_details["binlog_position"] == 484
    assert event.source_details["source_ts_ms"] == 1465581029100


@pytest.mark.parametrize("name", ["mysql_delete_payload__docs.json",
                                  "mysql_delete_payload__docs_modern.json"])
def test_docs_delete_payload_only_with_column_types_is_a_delete(name):
    event = event_of(run(fixture(name), KEY_1004))

    assert event.operation is Operation.DELETE
    assert event.primary_key == {"id": 1004}
    assert dict(event.before or {}) == ANNE_MARIE
    assert event.after is None
    assert event.captured_at == utc("2016-06-10T18:05:02.461")
    assert event.source_details["binlog_position"] == 805
    assert event.source_details["server_id"] == 223344


def test_core_test_update_without_schemas_is_an_update():
    event = event_of(run(fixture("mysql_update_value_no_schema__core_test.json"), KEY_1004))

    assert event.operation is Operation.UPDATE
    assert dict(event.before or {}) == {**ANNE, "first_name": "Anne-Marie"}
    assert dict(event.after or {}) == ANNE
    assert event.captured_at == utc("2016-06-09T16:56:51.815")


@pytest.mark.parametrize("name", [
    "mysql_update_payload__docs.json", "mysql_update_payload__docs_modern.json",
    "mysql_delete_payload__docs.json", "mysql_delete_payload__docs_modern.json",
    "mysql_update_value_no_schema__core_test.json",
])
def test_payload_only_fixtures_block_without_column_types(name):
    assert_block(run(fixture(name), KEY_1004, types=None), BlockReason.TYPE_INFO_MISSING)


def test_payload_only_fixture_blocks_without_a_key():
    assert_block(run(fixture("mysql_update_payload__docs.json"), None),
                 BlockReason.MISSING_PRIMARY_KEY)


def test_transaction_enriched_docs_example_has_an_empty_source_and_blocks():
    """The docs elide the source block as `{}`; without db/table the row has no address."""
    value = fixture("mysql_transaction_enriched_create_payload__docs.json")

    assert_block(run(value, b'{"pk":"2"}'), BlockReason.MALFORMED_ENVELOPE, "source.db")


def test_transaction_block_with_quoted_numbers_gives_id_and_order():
    """The same docs example with its source block filled in: quoted int64s are accepted."""
    document = json.loads(fixture("mysql_transaction_enriched_create_payload__docs.json"))
    document["source"] = json.loads(fixture("mysql_update_payload__docs.json"))["source"]
    document["source"].update(db="s1", table="a")

    event = event_of(run(json.dumps(document).encode(), b'{"pk":"2"}', topic="s1.a"))

    assert event.operation is Operation.INSERT
    assert event.primary_key == {"pk": "2"}
    assert dict(event.after or {}) == {"pk": "2", "aa": "1"}
    assert event.transaction_id == "0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10"
    assert event.transaction_order == 1
    assert event.source_details["transaction_data_collection_order"] == 1
    assert event.captured_at == utc("2020-01-30T13:28:04.335")  # "ts_ms": "1580390884335"


# --- files whose outcome is a skip or a block -----------------------------------------------


@pytest.mark.parametrize("name", ["mysql_tombstone_value__null.json",
                                  "mysql_legacy_tombstone_value_schema_null_payload_null__tutorial.json"])
def test_tombstones_are_skipped(name):
    assert_skip(run(fixture(name), KEY_1004), SkipReason.TOMBSTONE)


def test_kafka_null_value_is_a_tombstone():
    assert_skip(run(None, KEY_1004), SkipReason.TOMBSTONE)
    assert_skip(run(b"", KEY_1004), SkipReason.TOMBSTONE)


def test_schema_change_names_the_changed_table():
    skip = assert_skip(run(fixture("mysql_schema_change_topic_value__docs.json"),
                           b'{"databaseName":"inventory"}', topic="mysql"),
                       SkipReason.SCHEMA_CHANGE)

    assert skip.tables == (("inventory", "customers"),)
    assert "inventory.customers" in skip.detail
    assert "ALTER" not in skip.detail  # the DDL text is not repeated


@pytest.mark.parametrize("name, detail", [
    ("mysql_transaction_topic_begin__docs.json",
     "transaction BEGIN 0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10"),
    ("mysql_transaction_topic_end__docs.json",
     "transaction END 0e4d5dcd-a33b-11ea-80f1-02010a22a99e:10 (2 events)"),
])
def test_transaction_topic_records_are_boundaries(name, detail):
    skip = assert_skip(run(fixture(name), None, topic="mysql-server-1.transaction"),
                       SkipReason.TRANSACTION_BOUNDARY)
    assert skip.detail == detail


@pytest.mark.parametrize("name", ["mysql_truncate_payload__docs.json",
                                  "mysql_truncate_payload__docs_modern.json"])
def test_truncate_blocks_instead_of_being_skipped(name):
    """A truncate has a null key; a table-wide delete has no row events to carry it."""
    assert_block(run(fixture(name), None), BlockReason.TRUNCATE_NOT_SYNCED,
                 "inventory.customers")


@pytest.mark.parametrize("name", [
    "mysql_key_with_schema__docs.json", "mysql_key_with_schema__docs_modern.json",
    "mysql_legacy_v1source_snapshot_key_with_schema__tutorial.json",
])
def test_key_fixtures_read_as_values_are_not_change_events(name):
    assert_block(run(fixture(name), None), BlockReason.MALFORMED_ENVELOPE, "no op")


# --- the Kafka Connect offsets file ---------------------------------------------------------

OFFSETS = "mysql_connect_offsets_topic_records__thirdparty.txt"


def connect_offset_records() -> list[tuple[bytes, bytes]]:
    """(key, value) pairs of the kcat lines in the offsets file."""
    records = []
    text = fixture(OFFSETS).decode()
    for match in re.finditer(r"^Partition\(0\) (\[.*?\]) (\{.*\})$", text, re.MULTILINE):
        records.append((match[1].encode(), match[2].encode()))
    key = re.search(r"^Key: (.*)$", text, re.MULTILINE)
    value = re.search(r"^Value: (.*)$", text, re.MULTILINE)
    assert key and value
    records.append((key[1].encode(), value[1].encode()))
    return records


def test_connect_offset_records_are_not_mistaken_for_row_changes():
    """Connect's offsets topic holds connector positions, not changes: the ship must never
    consume it, and a record from it blocks (visibly) rather than becoming or skipping a row."""
    records = connect_offset_records()
    assert len(records) == 5

    for key, value in records:
        assert_block(run(value, key, topic="connect-offsets"), BlockReason.NOT_A_CHANGE_EVENT,
                     "Kafka Connect source offset")


def test_debezium_server_offset_log_line_is_not_json():
    line = fixture(OFFSETS).decode().splitlines()[-1]
    assert line.startswith("4 records sent")

    assert_block(run(line.encode(), None), BlockReason.MALFORMED_JSON)


# --- every file is covered ------------------------------------------------------------------

COVERED = {
    "mysql_connect_offsets_topic_records__thirdparty.txt",
    "mysql_create_value_with_schema__core_test.json",
    "mysql_create_value_with_schema__docs.json",
    "mysql_create_value_with_schema__docs_modern.json",
    "mysql_delete_payload__docs.json",
    "mysql_delete_payload__docs_modern.json",
    "mysql_key_with_schema__docs.json",
    "mysql_key_with_schema__docs_modern.json",
    "mysql_legacy_tombstone_value_schema_null_payload_null__tutorial.json",
    "mysql_legacy_v1source_snapshot_as_create_value_with_schema__tutorial.json",
    "mysql_legacy_v1source_snapshot_key_with_schema__tutorial.json",
    "mysql_schema_change_topic_value__docs.json",
    "mysql_tombstone_value__null.json",
    "mysql_transaction_enriched_create_payload__docs.json",
    "mysql_transaction_topic_begin__docs.json",
    "mysql_transaction_topic_end__docs.json",
    "mysql_truncate_payload__docs.json",
    "mysql_truncate_payload__docs_modern.json",
    "mysql_update_payload__docs.json",
    "mysql_update_payload__docs_modern.json",
    "mysql_update_value_no_schema__core_test.json",
}


def test_every_fixture_file_has_an_expected_outcome_here():
    present = {path.name for path in FIXTURES.iterdir()
               if path.is_file() and path.suffix in (".json", ".txt")}
    assert present == COVERED


@pytest.mark.parametrize("name", sorted(n for n in COVERED if n.endswith(".json")))
def test_no_fixture_raises_with_or_without_key_and_types(name):
    for key in (None, KEY_1004, b"not json"):
        for types in (None, CUSTOMERS_TYPES):
            outcome = run(fixture(name), key, types=types)
            assert isinstance(outcome, Normalized | Skip | Block)
            if isinstance(outcome, Normalized):
                assert isinstance(outcome.event.event_id, uuid.UUID)
