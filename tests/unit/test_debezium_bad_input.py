"""Broken, unexpected and hostile records: each blocks with its own reason and none raises.

Also the envelope rules a well-formed record must meet: keys, revisions of bidirectional
tables, versions, snapshots, primary key changes and heartbeats.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.debezium_records import (
    TOPIC,
    compact,
    envelope,
    envelope_schema,
    field,
    key_with_schema,
    normalize,
    normalizer,
    source_block,
    with_schema,
)
from tidesync.cdc.debezium import KafkaRecord
from tidesync.cdc.outcomes import Block, BlockReason, Normalized, Outcome, Skip, SkipReason
from tidesync.domain.change_event import Operation, Revision, tombstone_revision
from tidesync.domain.values import canonical_text

COLUMNS = [
    field("id", "int64", optional=False),
    field("name", "string"),
    field("price", "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}),
    field("_sync_revision", "string"),
]
SCHEMA = envelope_schema(COLUMNS)
REV_A = "6f1c1f4e-8a4b-4c55-9d7e-2b7d3b0c9a11"
REV_B = "0b8e2c71-5f0e-4a9a-8a55-0d3c5e7f1b22"
ROW_A = {"id": 1, "name": "Ocean Star", "price": "AdTA", "_sync_revision": REV_A}
ROW_B = {**ROW_A, "name": "Ocean Queen", "_sync_revision": REV_B}
BIDIRECTIONAL = {("fleet", "orders")}


def record(**payload: Any) -> bytes:
    return with_schema(SCHEMA, envelope(**payload))


def assert_block(outcome: Outcome, reason: BlockReason, detail_part: str = "") -> Block:
    assert isinstance(outcome, Block), outcome
    assert outcome.reason is reason, outcome
    assert detail_part in outcome.detail, outcome.detail
    return outcome


def event_of(outcome: Outcome):
    assert isinstance(outcome, Normalized), outcome
    return outcome.event


# --- broken bytes and JSON ----------------------------------------------------------------


@pytest.mark.parametrize("value", [
    record(after=ROW_A)[:-40],  # truncated
    b"{",
    b'{"schema":{},"payload":',
    b"\x00\x01\x02garbage",
    b"   ",
    b'{"op":"c","after":NaN}',
    b"[" * 5000 + b"]" * 5000,  # nesting deeper than the parser goes
    b'{"a":' + b"9" * 5000 + b"}",  # an integer beyond Python's digit limit
])
def test_bytes_that_are_not_json_block(value):
    assert_block(normalize(value), BlockReason.MALFORMED_JSON)


@pytest.mark.parametrize("value", [b"\xff\xfe{}", '{"op":"c"}'.encode("utf-16"),
                                   b'{"op":"\xe9"}'])
def test_non_utf8_blocks(value):
    assert_block(normalize(value), BlockReason.MALFORMED_JSON, "UTF-8")


def test_key_that_is_not_json_blocks():
    assert_block(normalize(record(after=ROW_A), key=b"Struct{id=1}"), BlockReason.MALFORMED_JSON,
                 "key")


# --- envelopes ----------------------------------------------------------------------------


@pytest.mark.parametrize("value, detail", [
    (compact([1, 2]), "not a JSON object"),
    (compact("c"), "not a JSON object"),
    (compact({"before": None, "after": ROW_A}), "no op"),
    (compact({**envelope(after=ROW_A), "op": 5}), "op is not a string"),
    (compact({**envelope(after=ROW_A), "source": None}), "source block"),
    (compact({**envelope(after=ROW_A), "source": "mysql"}), "source block"),
    (compact(envelope(after=ROW_A, source=source_block(db=None))), "source.db"),
    (compact(envelope(after=ROW_A, source=source_block(table=""))), "source.table"),
    (compact(envelope(after=ROW_A, source=source_block(snapshot="maybe"))), "snapshot"),
    (compact(envelope(after=ROW_A, source=source_block(version=3))), "source.version"),
    (record(op="u", after=ROW_A), "before image"),
    (record(op="d", before=ROW_A, after=ROW_A), "after image"),
    (record(op="c", after=None), "after image"),
    (record(op="c", before=ROW_A, after=ROW_A), "before image"),
    (record(after=[1]), "after is not a JSON object"),
    (record(after={**ROW_A, "extra": 1}), "'extra'"),
    (record(after=ROW_A, transaction={"id": "", "total_order": 1}), "transaction.id"),
    (record(after=ROW_A, transaction={"id": "x", "total_order": "one"}), "total_order"),
    (record(after=ROW_A, transaction=[1]), "transaction"),
    (with_schema({"type": "struct", "fields": "x"}, envelope(after=ROW_A)), "schema"),
    (with_schema({**SCHEMA, "version": "2"}, envelope(after=ROW_A)), "version"),
    (with_schema(envelope_schema([{"type": "int64"}]), envelope(after=ROW_A)), "field"),
])
def test_malformed_envelopes_block(value, detail):
    assert_block(normalize(value), BlockReason.MALFORMED_ENVELOPE, detail)


@pytest.mark.parametrize("op", ["x", "m", "", "C", "create"])
def test_unknown_operation_blocks(op):
    assert_block(normalize(record(op=op, after=ROW_A)), BlockReason.UNKNOWN_OPERATION)


def test_unknown_operation_blocks_without_schema_too():
    using = normalizer({"fleet.orders": {"id": "bigint"}})
    assert_block(normalize(compact(envelope(op="z", after={"id": 1})), using=using),
                 BlockReason.UNKNOWN_OPERATION)


@pytest.mark.parametrize("value, detail", [
    (with_schema(envelope_schema(COLUMNS, version=3), envelope(after=ROW_A)),
     "envelope schema version 3"),
    (with_schema(envelope_schema(COLUMNS, source_schema={
        "type": "struct", "fields": [], "name": "io.debezium.connector.mysql.Source",
        "version": 2, "field": "source"}), envelope(after=ROW_A)), "source schema version 2"),
    (record(after=ROW_A, source=source_block(version="4.0.0.Final")), "Debezium 4.0.0.Final"),
    (compact(envelope(after=ROW_A, source=source_block(version="10.1.0.Alpha1"))), "Debezium"),
])
def test_newer_schema_or_connector_versions_block(value, detail):
    assert_block(normalize(value), BlockReason.UNSUPPORTED_SCHEMA_VERSION, detail)


@pytest.mark.parametrize("version", ["{debezium-version}", "3.1.1.Final", "2.4.2.Final",
                                     "0.10.0.Final", "1.9.3.Final", "unknown"])
def test_known_and_unparseable_debezium_versions_are_accepted(version):
    event_of(normalize(record(after=ROW_A, source=source_block(version=version))))


def test_envelope_versions_1_and_2_and_none_are_accepted():
    for version in (1, 2, None):
        value = with_schema(envelope_schema(COLUMNS, version=version), envelope(after=ROW_A))
        event_of(normalize(value))


def test_a_postgresql_record_blocks():
    source = source_block(connector="postgresql")
    assert_block(normalize(record(after=ROW_A, source=source)),
                 BlockReason.UNSUPPORTED_CONNECTOR)


def test_mariadb_connector_is_accepted():
    event_of(normalize(record(after=ROW_A, source=source_block(connector="mariadb"))))


def test_decimal_without_scale_blocks():
    columns = [field("id", "int64"),
               field("price", "bytes", "org.apache.kafka.connect.data.Decimal")]
    value = with_schema(envelope_schema(columns), envelope(after={"id": 1, "price": "AdTA"}))
    assert_block(normalize(value), BlockReason.DECIMAL_SCALE_MISSING, "price")


def test_float_for_a_decimal_in_payload_only_mode_blocks():
    using = normalizer({"fleet.orders": {"id": "bigint", "price": "decimal(10,2)"}})
    value = compact(envelope(after={"id": 1, "price": 1200.0}))
    assert_block(normalize(value, using=using), BlockReason.IMPRECISE_DECIMAL, "price")


def test_payload_only_without_any_column_types_blocks():
    value = compact(envelope(after={"id": 1}))
    assert_block(normalize(value), BlockReason.TYPE_INFO_MISSING, "fleet.orders")


def test_payload_only_table_unknown_to_the_column_types_blocks():
    using = normalizer({"fleet.other": {"id": "bigint"}})
    assert_block(normalize(compact(envelope(after={"id": 1})), using=using),
                 BlockReason.TYPE_INFO_MISSING, "fleet.orders")


def test_truncate_blocks():
    value = compact({"source": source_block(), "op": "t", "ts_ms": 1747051999512})
    assert_block(normalize(value, key=None), BlockReason.TRUNCATE_NOT_SYNCED, "fleet.orders")


@pytest.mark.parametrize("ts_ms, source", [
    (None, source_block(ts_ms=0)),
    (0, source_block(ts_ms=None)),
    ("soon", source_block(ts_ms=-5)),
    (10**30, source_block(ts_ms=None)),
])
def test_no_usable_capture_time_blocks(ts_ms, source):
    assert_block(normalize(record(after=ROW_A, ts_ms=ts_ms, source=source)),
                 BlockReason.CAPTURE_TIME_MISSING)


def test_capture_time_falls_back_to_the_source_time():
    event = event_of(normalize(record(after=ROW_A, ts_ms=None)))
    assert event.captured_at.isoformat() == "2025-05-12T12:13:19+00:00"


def test_legacy_ts_sec_is_the_last_capture_time_fallback():
    source = source_block(ts_ms=None, ts_sec=1698175034)
    event = event_of(normalize(record(after=ROW_A, ts_ms=None, source=source)))
    assert event.captured_at.isoformat() == "2023-10-24T19:17:14+00:00"


def test_replay_epoch_changes_the_event_id():
    value = record(after=ROW_A)
    first = event_of(normalize(value, using=normalizer(replay_epoch=0)))
    replayed = event_of(normalize(value, using=normalizer(replay_epoch=1)))
    assert first.event_id != replayed.event_id
    assert replayed.replay_epoch == 1
    assert replayed.event_id == replayed.expected_event_id()


def test_negative_coordinates_block():
    using = normalizer()
    outcome = using.normalize(KafkaRecord(TOPIC, -1, 5, b'{"id":1}', record(after=ROW_A)))
    assert_block(outcome, BlockReason.INVALID_COORDINATES)


def test_lone_surrogates_block():
    value = record(after={**ROW_A, "name": "\ud800"}).replace(b"\\ud800", b"\\uD800")
    assert b"\\uD800" in value
    assert_block(normalize(value), BlockReason.UNSUPPORTED_TYPE, "surrogate")
    key = b'{"id":1,"name":"\\udfff"}'
    assert_block(normalize(record(after={**ROW_A, "name": "\udfff"}), key=key),
                 BlockReason.UNSUPPORTED_TYPE, "surrogate")


# --- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, b"", b"null", b'{"schema":null,"payload":null}', b"{}",
                                 b'{"id":null}'])
def test_missing_or_empty_key_blocks(key):
    assert_block(normalize(record(after=ROW_A), key=key), BlockReason.MISSING_PRIMARY_KEY)


def test_key_that_is_not_an_object_blocks():
    assert_block(normalize(record(after=ROW_A), key=b"[1]"), BlockReason.MALFORMED_ENVELOPE)


def test_key_column_unknown_to_the_row_blocks():
    assert_block(normalize(record(after=ROW_A), key=b'{"code":1}'),
                 BlockReason.TYPE_INFO_MISSING, "code")


def test_key_differing_from_the_row_blocks():
    assert_block(normalize(record(after=ROW_A), key=b'{"id":2}'), BlockReason.KEY_MISMATCH)
    assert_block(normalize(record(after=ROW_A), key=b'{"id":"1"}'), BlockReason.UNSUPPORTED_TYPE)


def test_composite_key_keeps_the_key_column_order():
    key = key_with_schema([field("name", "string", optional=False),
                           field("id", "int64", optional=False)], {"name": "Ocean Star", "id": 1})
    event = event_of(normalize(record(after=ROW_A), key=key))
    assert event.record.primary_key == (("name", "Ocean Star"), ("id", 1))


def test_key_columns_may_be_read_from_the_image_when_asked():
    using = normalizer()
    value = record(op="d", before=ROW_A, after=None)
    outcome = using.normalize(KafkaRecord(TOPIC, 0, 1, None, value), key_columns=["id"])
    assert event_of(outcome).primary_key == {"id": 1}
    missing = using.normalize(KafkaRecord(TOPIC, 0, 1, None, value), key_columns=["code"])
    assert_block(missing, BlockReason.MISSING_PRIMARY_KEY, "code")


# --- revisions ----------------------------------------------------------------------------


def bidirectional(value: bytes, **kwargs: Any) -> Outcome:
    return normalize(value, using=normalizer(bidirectional=BIDIRECTIONAL), **kwargs)


def test_bidirectional_update_carries_base_and_result_revisions():
    event = event_of(bidirectional(record(op="u", before=ROW_A, after=ROW_B)))
    assert event.base_revision == Revision.parse(REV_A)
    assert event.result_revision == Revision.parse(REV_B)


def test_bidirectional_insert_and_snapshot_have_no_base_revision():
    for op in ("c", "r"):
        event = event_of(bidirectional(record(op=op, after=ROW_A)))
        assert event.base_revision is None
        assert event.result_revision == Revision.parse(REV_A)


def test_bidirectional_delete_gets_the_tombstone_revision():
    event = event_of(bidirectional(record(op="d", before=ROW_A, after=None)))
    assert event.operation is Operation.DELETE
    assert event.base_revision == Revision.parse(REV_A)
    assert event.result_revision == tombstone_revision(event.event_id)


def test_binary16_revision_arrives_as_base64_bytes():
    columns = [field("id", "int64"), field("_sync_revision", "bytes")]
    raw = uuid.UUID(REV_A).bytes
    after = {"id": 1, "_sync_revision": base64.b64encode(raw).decode()}
    value = with_schema(envelope_schema(columns), envelope(after=after))
    assert event_of(bidirectional(value)).result_revision == Revision(raw)
    # binary.handling.mode=base64 declares the same column as a string
    columns = [field("id", "int64"), field("_sync_revision", "string")]
    value = with_schema(envelope_schema(columns), envelope(after=after))
    assert event_of(bidirectional(value)).result_revision == Revision(raw)


def test_other_tables_carry_no_revisions():
    event = event_of(normalize(record(op="u", before=ROW_A, after=ROW_B)))
    assert event.base_revision is None and event.result_revision is None
    event = event_of(normalize(record(op="d", before=ROW_A, after=None)))
    assert event.result_revision is None


@pytest.mark.parametrize("op, before, after, image", [
    ("c", None, {**ROW_A, "_sync_revision": None}, "after"),
    ("r", None, {k: v for k, v in ROW_A.items() if k != "_sync_revision"}, "after"),
    ("u", {**ROW_A, "_sync_revision": None}, ROW_B, "before"),
    ("u", ROW_A, {**ROW_B, "_sync_revision": None}, "after"),
    ("d", {**ROW_A, "_sync_revision": None}, None, "before"),
])
def test_missing_revision_on_a_bidirectional_table_blocks(op, before, after, image):
    assert_block(bidirectional(record(op=op, before=before, after=after)),
                 BlockReason.MISSING_REVISION, image)


@pytest.mark.parametrize("revision", ["not-a-uuid", "6f1c1f4e-8a4b-4c55-9d7e", "", "AAEC"])
def test_invalid_revision_blocks(revision):
    assert_block(bidirectional(record(after={**ROW_A, "_sync_revision": revision})),
                 BlockReason.INVALID_REVISION)


def test_revision_bytes_of_the_wrong_length_block():
    columns = [field("id", "int64"), field("_sync_revision", "bytes")]
    after = {"id": 1, "_sync_revision": base64.b64encode(b"\x01" * 15).decode()}
    value = with_schema(envelope_schema(columns), envelope(after=after))
    assert_block(bidirectional(value), BlockReason.INVALID_REVISION)


# --- snapshots, primary key changes, heartbeats, transactions -----------------------------


@pytest.mark.parametrize("marker", ["true", "first", "first_in_data_collection",
                                    "last_in_data_collection", "last", "incremental", True])
def test_create_carrying_a_snapshot_marker_is_a_snapshot(marker):
    event = event_of(normalize(record(after=ROW_A, source=source_block(snapshot=marker))))
    assert event.operation is Operation.SNAPSHOT
    assert event.source_details["snapshot"] == str(marker).lower()


@pytest.mark.parametrize("marker", ["false", False, None])
def test_create_while_streaming_is_an_insert(marker):
    event = event_of(normalize(record(after=ROW_A, source=source_block(snapshot=marker))))
    assert event.operation is Operation.INSERT


def test_primary_key_change_pair_is_a_delete_and_an_insert_that_name_each_other():
    """Debezium emits d (old key, header newkey), a tombstone, then c (new key, header oldkey)."""
    new_row = {**ROW_A, "id": 2}
    key_columns = [field("id", "int64", optional=False)]
    old_key = key_with_schema(key_columns, {"id": 1})
    new_key = key_with_schema(key_columns, {"id": 2})

    deleted = event_of(normalize(record(op="d", before=ROW_A, after=None), key=old_key,
                                 offset=10, headers=(("__debezium.newkey", new_key),)))
    tombstone = normalize(None, key=old_key, offset=11)
    inserted = event_of(normalize(record(op="c", after=new_row), key=new_key, offset=12,
                                  headers=(("__debezium.oldkey", old_key),)))

    assert deleted.operation is Operation.DELETE and deleted.primary_key == {"id": 1}
    assert isinstance(tombstone, Skip) and tombstone.reason is SkipReason.TOMBSTONE
    assert inserted.operation is Operation.INSERT and inserted.primary_key == {"id": 2}
    assert deleted.source_details["primary_key_change"] == "DELETE_OF_OLD_KEY"
    assert inserted.source_details["primary_key_change"] == "INSERT_OF_NEW_KEY"
    assert deleted.source_details["paired_key"] == inserted.record.key_text()
    assert inserted.source_details["paired_key"] == deleted.record.key_text()
    assert deleted.source_details["paired_key"] == canonical_text([("id", 2)])


def test_primary_key_change_header_in_simple_converter_text_is_kept_as_text():
    event = event_of(normalize(record(op="d", before=ROW_A, after=None),
                               headers=(("__debezium.newkey", b"Struct{id=2}"),)))
    assert event.source_details["paired_key_text"] == "Struct{id=2}"


def test_primary_key_change_header_on_the_wrong_operation_blocks():
    assert_block(normalize(record(op="u", before=ROW_A, after=ROW_B),
                           headers=(("__debezium.oldkey", b'{"id":0}'),)),
                 BlockReason.MALFORMED_ENVELOPE, "__debezium.oldkey")


@pytest.mark.parametrize("topic, value", [
    ("__debezium-heartbeat.ship7", compact({"ts_ms": 1747051999000})),
    ("__debezium-heartbeat.ship7", with_schema(
        {"type": "struct", "name": "io.debezium.connector.common.Heartbeat",
         "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}], "optional": False},
        {"ts_ms": 1747051999000})),
    ("elsewhere", compact({"ts_ms": 1747051999000})),
])
def test_heartbeats_are_skipped(topic, value):
    outcome = normalize(value, key=b'{"serverName":"ship7"}', topic=topic)
    assert isinstance(outcome, Skip) and outcome.reason is SkipReason.HEARTBEAT


@pytest.mark.parametrize("changes, tables", [
    ([{"type": "ALTER", "id": '"fleet"."orders_old","fleet"."orders"'}],
     (("fleet", "orders_old"), ("fleet", "orders"))),  # a rename names both
    ([{"type": "CREATE", "id": "fleet.crew"}], (("fleet", "crew"),)),
    ([], (("fleet", "orders"),)),  # 1.9-era ALTERs list no table changes: use the source
])
def test_schema_changes_name_the_tables_to_refresh(changes, tables):
    value = compact({"source": source_block(), "databaseName": "fleet", "schemaName": None,
                     "ddl": "ALTER TABLE orders RENAME TO orders_old", "tableChanges": changes})
    outcome = normalize(value, key=b'{"databaseName":"fleet"}', topic="ship7")
    assert isinstance(outcome, Skip) and outcome.reason is SkipReason.SCHEMA_CHANGE
    assert outcome.tables == tables
    assert "RENAME" not in outcome.detail


def test_transaction_block_as_the_schema_declares_it():
    event = event_of(normalize(record(after=ROW_A, transaction={
        "id": "file=mysql-bin.000007,pos=1002", "total_order": 3, "data_collection_order": 2})))
    assert event.transaction_id == "file=mysql-bin.000007,pos=1002"
    assert event.transaction_order == 3
    assert event.source_details["transaction_data_collection_order"] == 2


def test_source_details_hold_diagnostics_but_never_the_query():
    source = source_block(query="UPDATE orders SET name='Ocean Star' WHERE id=1")
    event = event_of(normalize(record(after=ROW_A, source=source)))
    assert dict(event.source_details) == {
        "connector": "mysql", "server_name": "ship7", "debezium_version": "3.1.1.Final",
        "server_id": 223344, "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23",
        "binlog_file": "mysql-bin.000007", "binlog_position": 1002, "binlog_row": 0,
        "thread": 12, "source_ts_ms": 1747051999000, "snapshot": "false",
    }
    assert "Ocean" not in json.dumps(dict(event.source_details))


# --- nothing raises -----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def outcome_is_well_formed(outcome: Outcome) -> None:
    assert isinstance(outcome, Normalized | Skip | Block)
    if not isinstance(outcome, Normalized):
        assert isinstance(outcome.detail, str) and outcome.detail


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.binary(max_size=200), key=st.none() | st.binary(max_size=40))
def test_arbitrary_bytes_never_raise(value, key):
    outcome_is_well_formed(normalize(value, key=key))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, key=json_values)
def test_arbitrary_json_never_raises(value, key):
    outcome_is_well_formed(normalize(compact(value), key=compact(key)))


PATHS = [("op",), ("ts_ms",), ("source",), ("source", "db"), ("source", "table"),
         ("source", "snapshot"), ("source", "version"), ("before",), ("after",),
         ("after", "id"), ("after", "name"), ("after", "price"), ("after", "_sync_revision"),
         ("before", "_sync_revision"), ("transaction",)]
SCHEMA_PATHS = [("version",), ("fields",), ("fields", 1, "fields", 2, "parameters"),
                ("fields", 1, "fields", 2, "name"), ("fields", 1, "fields", 0, "type"),
                ("fields", 1, "fields", 0, "field"), ("fields", 2, "version")]


def replaced(document: Any, path: tuple[Any, ...], new: Any) -> Any:
    document = copy.deepcopy(document)
    target = document
    for step in path[:-1]:
        target = target[step]
        if not isinstance(target, dict | list):
            return document
    if isinstance(target, dict) or (isinstance(target, list) and path[-1] < len(target)):
        target[path[-1]] = new
    return document


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(["c", "u", "d", "r"]), path=st.sampled_from(PATHS),
       schema_path=st.none() | st.sampled_from(SCHEMA_PATHS), new=json_values,
       schemas=st.booleans(), bidirectional_table=st.booleans())
def test_mutated_real_records_never_raise(op, path, schema_path, new, schemas,
                                          bidirectional_table):
    before = ROW_A if op in ("u", "d") else None
    after = None if op == "d" else ROW_B
    payload = replaced(envelope(op=op, before=before, after=after), path, new)
    schema = SCHEMA if schema_path is None else replaced(SCHEMA, schema_path, new)
    value = with_schema(schema, payload) if schemas else compact(payload)
    using = normalizer(
        {"fleet.orders": {"id": "bigint", "name": "varchar(20)", "price": "decimal(10,2)",
                          "_sync_revision": "char(36)"}},
        bidirectional=BIDIRECTIONAL if bidirectional_table else None,
    )
    outcome_is_well_formed(normalize(value, using=using))
