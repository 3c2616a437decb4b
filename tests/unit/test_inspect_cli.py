"""`tidesync inspect debezium`: one JSON object on stdout, exit 0 for events and skips, 2 for
blocks and usage errors (with a message on stderr, never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.debezium_records import fixtures_dir
from tidesync.entrypoints.cli import main

FIXTURES = fixtures_dir()
TIDESYNC = [sys.executable, "-m", "tidesync"]
CUSTOMERS = {"inventory.customers": {"id": "int", "first_name": "varchar(255)",
                                     "last_name": "varchar(255)", "email": "varchar(255)"}}
EVENT_FIELDS = [
    "schema_version", "event_id", "origin_node_id", "source_connector_id", "source_topic",
    "source_partition", "source_position", "source_sequence", "transaction_id",
    "transaction_order", "rule_id", "rule_version", "database", "schema", "table",
    "primary_key", "operation", "before", "after", "base_revision", "result_revision",
    "business_occurred_at", "captured_at", "trace_id", "replay_epoch", "source_details",
]


def inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["inspect", "debezium", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def key_1004(tmp_path: Path) -> str:
    path = tmp_path / "key.json"
    path.write_text('{"id": 1004}')
    return str(path)


@pytest.fixture
def columns(tmp_path: Path) -> str:
    path = tmp_path / "columns.json"
    path.write_text(json.dumps(CUSTOMERS))
    return str(path)


def test_legacy_snapshot_prints_every_event_field(capsys):
    legacy = "mysql_legacy_v1source_snapshot_{}_with_schema__tutorial.json"
    code, printed = inspect(
        capsys, str(FIXTURES / legacy.format("as_create_value")),
        "--key", str(FIXTURES / legacy.format("key")),
        "--partition", "3", "--offset", "120", "--origin", "ship-7",
    )

    assert code == 0
    assert printed["outcome"] == "event"
    event = printed["event"]
    assert isinstance(event, dict)
    assert list(event) == EVENT_FIELDS
    assert event["operation"] == "SNAPSHOT"
    assert event["source_topic"] == "dbserver1.inventory.customers"  # from source.name/db/table
    assert (event["source_partition"], event["source_position"]) == (3, 120)
    assert event["origin_node_id"] == "ship-7"
    assert (event["database"], event["schema"], event["table"]) == ("inventory", None, "customers")
    assert event["primary_key"] == {"id": 1004}
    assert event["before"] is None
    assert event["after"] == {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
                              "email": "annek@noanswer.org"}
    assert event["captured_at"] == "2017-03-27T17:08:57.160000Z"
    assert event["base_revision"] is None and event["result_revision"] is None
    assert event["schema_version"] == "1.0"
    assert event["source_details"]["snapshot"] == "true"  # type: ignore[index]


def test_payload_only_update_with_columns_file_and_key_columns(capsys, columns):
    code, printed = inspect(capsys, str(FIXTURES / "mysql_update_payload__docs_modern.json"),
                            "--columns", columns, "--key-columns", "id", "--topic", "t1")

    assert code == 0
    event = printed["event"]
    assert isinstance(event, dict)
    assert event["operation"] == "UPDATE"
    assert event["source_topic"] == "t1"
    assert event["primary_key"] == {"id": 1004}
    assert event["before"]["first_name"] == "Anne"  # type: ignore[index]
    assert event["after"]["first_name"] == "Anne Marie"  # type: ignore[index]
    assert event["captured_at"] == "2016-06-10T17:50:29.523000Z"


def test_exact_values_print_as_strings(capsys, tmp_path):
    schema = {"type": "struct", "name": "s.fleet.orders.Envelope", "fields": [
        {"type": "struct", "optional": True, "field": "after", "fields": [
            {"type": "int64", "optional": False, "field": "id"},
            {"type": "bytes", "optional": True, "field": "price",
             "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
            {"type": "int64", "optional": True, "field": "at",
             "name": "io.debezium.time.Timestamp"},
            {"type": "bytes", "optional": True, "field": "blob"}]},
        {"type": "struct", "optional": False, "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"}]}
    payload = {"before": None, "after": {"id": 1, "price": "/itA", "at": 1529476623000,
                                         "blob": "AQID"},
               "source": {"name": "s", "db": "fleet", "table": "orders"}, "op": "c",
               "ts_ms": 1529476623500}
    value = tmp_path / "value.json"
    value.write_text(json.dumps({"schema": schema, "payload": payload}))

    code, printed = inspect(capsys, str(value), "--key-columns", "id")

    assert code == 0
    event = printed["event"]
    assert isinstance(event, dict)
    assert event["after"] == {"id": 1, "price": "-1200.00", "at": "2018-06-20T06:37:03Z",
                              "blob": "AQID"}
    assert event["captured_at"] == "2018-06-20T06:37:03.500000Z"
    assert event["source_topic"] == "s.fleet.orders"


@pytest.mark.parametrize("name, reason", [
    ("mysql_tombstone_value__null.json", "TOMBSTONE"),
    ("mysql_legacy_tombstone_value_schema_null_payload_null__tutorial.json", "TOMBSTONE"),
    ("mysql_schema_change_topic_value__docs.json", "SCHEMA_CHANGE"),
    ("mysql_transaction_topic_begin__docs.json", "TRANSACTION_BOUNDARY"),
    ("mysql_transaction_topic_end__docs.json", "TRANSACTION_BOUNDARY"),
])
def test_skips_exit_0(capsys, name, reason):
    code, printed = inspect(capsys, str(FIXTURES / name))
    assert code == 0
    assert printed["outcome"] == "skip"
    assert printed["reason"] == reason
    assert set(printed) == {"outcome", "reason", "detail"}


@pytest.mark.parametrize("argv, reason", [
    (["mysql_truncate_payload__docs.json"], "TRUNCATE_NOT_SYNCED"),
    (["mysql_update_payload__docs.json"], "TYPE_INFO_MISSING"),
    (["mysql_create_value_with_schema__docs.json"], "MISSING_PRIMARY_KEY"),
    (["mysql_create_value_with_schema__docs.json", "--key-columns", "id", "--bidirectional"],
     "MISSING_REVISION"),
    (["mysql_create_value_with_schema__docs.json", "--key",
      str(FIXTURES / "mysql_key_with_schema__docs.json")], "KEY_MISMATCH"),
    (["mysql_connect_offsets_topic_records__thirdparty.txt"], "MALFORMED_JSON"),
])
def test_blocks_exit_2_with_the_reason(capsys, argv, reason):
    code, printed = inspect(capsys, str(FIXTURES / argv[0]), *argv[1:])
    assert code == 2
    assert printed["outcome"] == "block"
    assert printed["reason"] == reason
    assert isinstance(printed["detail"], str) and printed["detail"]


def test_value_from_stdin_in_a_subprocess():
    value = (FIXTURES / "mysql_create_value_with_schema__core_test.json").read_bytes()
    result = subprocess.run([*TIDESYNC, "inspect", "debezium", "--key-columns", "id", "-"],
                            input=value, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["event"]["operation"] == "INSERT"
    assert printed["event"]["primary_key"] == {"id": 1004}


def test_empty_stdin_is_a_tombstone():
    result = subprocess.run([*TIDESYNC, "inspect", "debezium", "-"], input=b"",
                            capture_output=True, check=False)
    assert result.returncode == 0
    assert json.loads(result.stdout)["reason"] == "TOMBSTONE"


@pytest.mark.parametrize("argv, message", [
    (["/nonexistent/value.json"], "cannot read /nonexistent/value.json"),
    (["VALUE", "--key", "/nonexistent/key.json"], "cannot read /nonexistent/key.json"),
    (["VALUE", "--columns", "/nonexistent/cols.json"], "cannot read column types file"),
    (["VALUE", "--columns", "VALUE"], "db.table"),
    (["VALUE", "--key", "VALUE", "--key-columns", "id"], "either --key or --key-columns"),
])
def test_usage_errors_exit_2_without_a_traceback(capsys, argv, message):
    value = str(FIXTURES / "mysql_update_payload__docs.json")
    code = main(["inspect", "debezium", *[value if a == "VALUE" else a for a in argv]])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_unreadable_directory_is_a_usage_error(tmp_path):
    result = subprocess.run([*TIDESYNC, "inspect", "debezium", str(tmp_path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "cannot read" in result.stderr
    assert "Traceback" not in result.stderr


def test_negative_offset_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", "debezium", "--offset", "-1", "x.json"])
    assert exit_info.value.code == 2
