"""Built-in capture without services: binlog and SQLite value mapping, the changelog triggers
and the folding of the sync triggers' stamping UPDATEs, Debezium's record sequences, the
flush-before-save checkpoint rule, the [capture] settings and the `ship capture` command.

The checkpoint tests use a recording stand-in for the Kafka producer (the broker-backed
behaviour is covered by tests/integration/test_capture_*.py)."""

from __future__ import annotations

import datetime as dt
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from tests.clocks import rounded_now
from tidesync.capture.change_records import RowChange, change_records
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.positions import CapturePosition, SQLitePositionStore
from tidesync.capture.publisher import JsonConverter
from tidesync.capture.sqlite import (
    CHANGELOG_TABLE,
    enable_sqlite_capture,
    fold_stamping_updates,
    read_changelog,
    sqlite_column,
    sqlite_value,
)
from tidesync.capture.tables import binlog_converter, mysql_column, shortest_float32
from tidesync.cdc.debezium import NEW_KEY_HEADER, OLD_KEY_HEADER
from tidesync.config import ConfigError, load_config
from tidesync.domain.values import BitString, JsonText
from tidesync.entrypoints.cli import main
from tidesync.target.sqlite_schema import enable_sqlite_table

UTC = dt.UTC


def table_of(*columns: ColumnDefinition, key: tuple[str, ...] = ("id",)) -> TableDefinition:
    return TableDefinition("db", "t", columns, key)


def convert(column_type: str, raw: object, none_source: str | None = None,
            nullable: bool = True) -> object:
    column = mysql_column("db", "t", "c", column_type, nullable)
    return binlog_converter(table_of(ColumnDefinition.parse("id", "int"), column), column)(
        raw, none_source)


# --- binlog values -------------------------------------------------------------------------


def test_binary_values_get_back_the_zero_bytes_the_binlog_leaves_out() -> None:
    assert convert("binary(4)", b"\x01") == b"\x01\x00\x00\x00"
    assert convert("varbinary(4)", b"\x01") == b"\x01"


def test_set_members_come_in_column_order_and_an_empty_set_is_not_null() -> None:
    assert convert("set('a','b','c')", {"c", "a"}) == "a,c"
    assert convert("set('a','b','c')", None, "empty set") == ""
    assert convert("set('a','b','c')", None, "null") is None


def test_zero_dates_are_null_or_the_epoch_like_debezium() -> None:
    assert convert("date", None, "out of date range") is None
    assert convert("date", None, "out of date range", nullable=False) == dt.date(1970, 1, 1)
    assert convert("datetime(6)", None, "out of datetime2 range", nullable=False) == (
        dt.datetime(1970, 1, 1, tzinfo=UTC))


def test_times_bits_floats_and_datetimes_are_exact() -> None:
    assert convert("time(6)", dt.timedelta(hours=23, seconds=59, microseconds=5)) == (
        dt.time(23, 0, 59, 5))
    assert convert("bit(10)", "1010000001") == BitString(10, 0b1010000001)
    assert convert("bit(1)", "1") is True
    assert convert("float", 1.100000023841858) == 1.1
    assert shortest_float32(3.4028234663852886e38) == 3.4028235e38
    assert convert("datetime(3)", dt.datetime(2024, 1, 2, 3, 4, 5, 6000)) == (
        dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC))
    assert convert("json", '{"a": 1}') == JsonText('{"a": 1}')


def test_values_that_do_not_fit_stop_capture_without_showing_the_value() -> None:
    with pytest.raises(CaptureError) as raised:
        convert("time", dt.timedelta(hours=30))
    assert raised.value.reason is CaptureErrorReason.UNMAPPABLE_COLUMN
    with pytest.raises(CaptureError) as raised:
        convert("int", "secret text")
    assert "secret" not in str(raised.value)
    with pytest.raises(CaptureError, match="no Debezium encoding"):
        mysql_column("db", "t", "shape", "geometry", True)


# --- SQLite declared types and values ------------------------------------------------------


def test_sqlite_declared_types_map_to_debezium_types_or_are_refused() -> None:
    assert sqlite_column("t", "id", "INTEGER", False).data_type == "bigint"
    assert sqlite_column("t", "r", "REAL", True).data_type == "double"
    assert sqlite_column("t", "f", "BOOLEAN", True).data_type == "boolean"
    assert sqlite_column("t", "p", "DECIMAL(12,2)", True).scale == 2
    assert sqlite_column("t", "at", "DATETIME(6)", True).fsp == 6
    for declared in ("", "NUMERIC", "DECIMAL", "GEOMETRY"):
        with pytest.raises(CaptureError, match="no exact Debezium type"):
            sqlite_column("t", "x", declared, True)


def test_sqlite_values_decode_exactly_by_declared_type() -> None:
    price = sqlite_column("t", "p", "DECIMAL(12,2)", True)
    assert sqlite_value(price, ["real", "12.5"]) == Decimal("12.50")
    assert str(sqlite_value(price, ["integer", 13])) == "13.00"
    assert sqlite_value(price, ["real", "0.10000000000000001"]) == Decimal("0.10")
    with pytest.raises(ValueError, match="scale"):
        sqlite_value(price, ["real", "0.125"])
    at = sqlite_column("t", "at", "DATETIME(6)", True)
    assert sqlite_value(at, ["text", "2024-01-02 03:04:05.123"]) == dt.datetime(
        2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
    assert sqlite_value(sqlite_column("t", "b", "BLOB", True), ["blob", "00FF"]) == b"\x00\xff"
    assert sqlite_value(sqlite_column("t", "f", "BOOLEAN", True), ["integer", 1]) is True
    assert sqlite_value(sqlite_column("t", "r", "REAL", True), ["real", "0.10000000000000001"]) \
        == 0.1
    with pytest.raises(ValueError):
        sqlite_value(sqlite_column("t", "n", "INTEGER", True), ["text", "abc"])


# --- the changelog triggers next to the sync triggers --------------------------------------


@pytest.fixture
def enabled_db() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL,"
               " price DECIMAL(10,2))")
    enable_sqlite_table(db, "items", "ship-1")
    enable_sqlite_capture(db, "items")
    return db


def test_each_write_is_one_change_with_its_final_revision(enabled_db) -> None:
    db = enabled_db
    db.execute("INSERT INTO items (id, name, price) VALUES (1, 'a', '1.50'), (2, 'b', NULL)")
    db.execute("UPDATE items SET name = name")  # no business change: still a new revision
    db.execute("DELETE FROM items WHERE id = 2")
    raw = read_changelog(db, 0, 100)
    changes = fold_stamping_updates(raw)
    assert len(raw) > len(changes)
    assert [change.op for change in changes] == ["c", "c", "u", "u", "d"]
    final = {row[0]: row[1] for row in db.execute("SELECT id, _sync_revision FROM items")}
    assert changes[2].after is not None
    assert changes[2].after["_sync_revision"] == ["text", final[1]]
    assert changes[0].after is not None and changes[2].before is not None
    assert changes[2].before["_sync_revision"] == changes[0].after["_sync_revision"]


def test_a_remote_apply_is_logged_as_written(enabled_db) -> None:
    db = enabled_db
    db.execute("INSERT INTO items (id, name) VALUES (1, 'a')")
    db.execute("BEGIN")
    db.execute("UPDATE _sync_session SET remote_apply = 1")
    db.execute("UPDATE items SET name = 'b', _sync_revision = 'r2', _sync_event_id = 'e2'")
    db.execute("UPDATE _sync_session SET remote_apply = 0")
    db.execute("COMMIT")
    changes = fold_stamping_updates(read_changelog(db, 0, 100))
    assert changes[-1].after is not None
    assert changes[-1].after["_sync_revision"] == ["text", "r2"]


def test_reading_never_splits_a_statement(enabled_db) -> None:
    db = enabled_db
    db.execute("INSERT INTO items (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    first = read_changelog(db, 0, 1)
    assert len(fold_stamping_updates(first)) == 3  # the stamping UPDATEs came along


def test_enable_is_idempotent_and_notes_tables_without_sync_metadata() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE plain (id INTEGER PRIMARY KEY, v TEXT)")
    actions = enable_sqlite_capture(db, "plain")
    assert actions[0] == f"created changelog {CHANGELOG_TABLE}"
    assert any(action.startswith("note: plain lacks") for action in actions)
    assert enable_sqlite_capture(db, "plain")[0] == "unchanged: capture triggers of plain"
    db.execute("CREATE TABLE nokey (v TEXT)")
    with pytest.raises(CaptureError, match="no primary key"):
        enable_sqlite_capture(db, "nokey")


# --- record sequences ----------------------------------------------------------------------

TABLE = table_of(ColumnDefinition.parse("id", "int", nullable=False),
                 ColumnDefinition.parse("v", "varchar(10)"))
SOURCE = SourceInfo(server_id=1, file="binlog.000001", pos=100, ts_ms=1_700_000_000_000)
NOW = rounded_now()


def records(op: EnvelopeOp, before: dict[str, object] | None, after: dict[str, object] | None,
            tombstones: bool = True) -> list[tuple[DebeziumRecord, tuple[tuple[str, bytes], ...]]]:
    change = RowChange(TABLE, op, before, after, SOURCE)  # type: ignore[arg-type]
    return change_records(DebeziumEnvelopeWriter("sync.cdc.s"), change, NOW,
                          tombstones=tombstones)


def test_a_delete_is_followed_by_its_tombstone_unless_switched_off() -> None:
    out = records(EnvelopeOp.DELETE, {"id": 1, "v": "x"}, None)
    assert [record.value is None for record, _ in out] == [False, True]
    assert out[0][0].key_bytes() == out[1][0].key_bytes()
    assert len(records(EnvelopeOp.DELETE, {"id": 1, "v": "x"}, None, tombstones=False)) == 1


def test_a_primary_key_update_is_delete_tombstone_create_with_key_headers() -> None:
    out = records(EnvelopeOp.UPDATE, {"id": 1, "v": "x"}, {"id": 2, "v": "x"})
    assert [(r.value or {}).get("payload", {}).get("op") for r, _ in out] == ["d", None, "c"]
    assert out[0][1] == ((NEW_KEY_HEADER, out[2][0].key_bytes()),)
    assert out[2][1] == ((OLD_KEY_HEADER, out[0][0].key_bytes()),)


# --- checkpoints ---------------------------------------------------------------------------


class RecordingPublisher:
    """Stands in for the Kafka producer: remembers what was produced and flushed."""

    def __init__(self, fail_flush: bool = False) -> None:
        self.produced: list[DebeziumRecord] = []
        self.flushed = 0
        self.fail_flush = fail_flush

    def publish(self, record: DebeziumRecord, headers: object = ()) -> None:
        self.produced.append(record)

    def flush(self) -> None:
        if self.fail_flush:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED, "broker gone")
        self.flushed = len(self.produced)


def checkpointer(tmp_path: Path, publisher: RecordingPublisher) -> Checkpointer:
    store = SQLitePositionStore(tmp_path / "position.sqlite")
    return Checkpointer(publisher, store, "sync.cdc.s", "mysql", max_records=2,  # type: ignore[arg-type]
                        interval_seconds=3600)


def test_a_position_is_saved_only_after_its_records_are_flushed(tmp_path: Path) -> None:
    publisher = RecordingPublisher()
    points = checkpointer(tmp_path, publisher)
    points.start_at(CapturePosition(binlog_file="b.1", binlog_pos=4), save=True)
    writer = DebeziumEnvelopeWriter("sync.cdc.s")
    points.publish(writer, RowChange(TABLE, EnvelopeOp.CREATE, None, {"id": 1, "v": "a"},
                                     SOURCE))
    points.transaction_done(CapturePosition(binlog_file="b.1", binlog_pos=200))
    assert points.store.load("sync.cdc.s", "mysql") == CapturePosition(
        binlog_file="b.1", binlog_pos=4)  # one record: not due yet
    points.publish(writer, RowChange(TABLE, EnvelopeOp.CREATE, None, {"id": 2, "v": "b"},
                                     SOURCE))
    points.transaction_done(CapturePosition(binlog_file="b.1", binlog_pos=300))
    assert publisher.flushed == 2
    assert points.store.load("sync.cdc.s", "mysql") == CapturePosition(
        binlog_file="b.1", binlog_pos=300)


def test_a_failed_flush_saves_nothing(tmp_path: Path) -> None:
    publisher = RecordingPublisher(fail_flush=True)
    points = checkpointer(tmp_path, publisher)
    points.start_at(CapturePosition(binlog_file="b.1", binlog_pos=4), save=True)
    writer = DebeziumEnvelopeWriter("sync.cdc.s")
    points.publish(writer, RowChange(TABLE, EnvelopeOp.CREATE, None, {"id": 1, "v": "a"},
                                     SOURCE))
    points.transaction_done(CapturePosition(binlog_file="b.1", binlog_pos=200))
    with pytest.raises(CaptureError):
        points.checkpoint()
    assert points.store.load("sync.cdc.s", "mysql") == CapturePosition(
        binlog_file="b.1", binlog_pos=4)
    with pytest.raises(CaptureError, match="belongs to a mysql source"):
        points.store.load("sync.cdc.s", "sqlite")


# --- settings and the command --------------------------------------------------------------


def test_capture_settings_are_validated() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(env={"TIDESYNC_CAPTURE__TABLES": "nodot", "TIDESYNC_CAPTURE__LOGICAL_NAME":
                         "bad name", "TIDESYNC_CAPTURE__TOPIC_PARTITIONS": "0"})
    problems = "\n".join(raised.value.problems)
    for field in ("capture.tables", "capture.logical_name", "capture.topic_partitions"):
        assert field in problems


def test_ship_capture_enable_and_status(tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "ship.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    monkeypatch.setenv("TIDESYNC_CAPTURE__SQLITE_PATH", str(path))
    monkeypatch.setenv("TIDESYNC_CAPTURE__LOGICAL_NAME", "ship7")
    monkeypatch.setenv("TIDESYNC_CAPTURE__POSITION_PATH", str(tmp_path / "position.sqlite"))
    assert main(["ship", "capture", "enable", "items"]) == 0
    assert "items: created capture triggers of items" in capsys.readouterr().out
    assert main(["ship", "capture", "status"]) == 0
    assert "capture sync.cdc.ship7: no saved position" in capsys.readouterr().out
    assert main(["ship", "capture", "enable", "missing"]) == 1


def test_the_publisher_writes_the_same_bytes_as_the_record() -> None:
    converter = JsonConverter()
    for record, _ in records(EnvelopeOp.UPDATE, {"id": 1, "v": "é"}, {"id": 1, "v": "ü"}) + \
            records(EnvelopeOp.DELETE, {"id": 1, "v": "x"}, None):
        assert converter.encode(record.key) == record.key_bytes()
        assert converter.encode(record.value) == record.value_bytes()


# --- table map columns against the table definition ----------------------------------------


def binlog_column(name: str, type_code: int, **metadata: object) -> object:
    from pymysqlreplication.column import Column

    defaults: dict[str, object] = {"unsigned": False, "character_set_name": None,
                                   "enum_values": None, "set_values": None}
    return Column(name=name, type=type_code, **(defaults | metadata))


ORDERS = TableDefinition("db", "orders", (
    ColumnDefinition.parse("id", "bigint unsigned", nullable=False),
    ColumnDefinition.parse("note", "varchar(20)", nullable=False),
    ColumnDefinition.parse("weight", "decimal(6,3)"),
), ("id",))
ID = binlog_column("id", 8, unsigned=True)
NOTE = binlog_column("note", 15, character_set_name="utf8mb4")
WEIGHT = binlog_column("weight", 246, precision=6, decimals=3)


def test_binlog_columns_are_checked_against_the_definition() -> None:
    from tidesync.capture.tables import binlog_type_matches

    assert binlog_type_matches(ORDERS.columns[0], ID)
    assert not binlog_type_matches(ORDERS.columns[0], binlog_column("id", 8))  # signed
    assert not binlog_type_matches(ORDERS.columns[2], binlog_column("weight", 246,
                                                                    precision=6, decimals=2))
    assert not binlog_type_matches(ORDERS.columns[1], binlog_column(
        "note", 15, character_set_name="binary"))
    status = ColumnDefinition.parse("status", "enum('OPEN','DONE')")
    assert binlog_type_matches(status, binlog_column("status", 247,
                                                     enum_values=["", "OPEN", "DONE"]))
    assert not binlog_type_matches(status, binlog_column("status", 247,
                                                         enum_values=["", "OPEN"]))


def test_rows_from_before_a_column_was_added_map_by_name_and_others_stop() -> None:
    from tidesync.capture.tables import definition_for_binlog

    assert definition_for_binlog(ORDERS, [ID, NOTE, WEIGHT]) is ORDERS
    older = definition_for_binlog(ORDERS, [ID, NOTE])
    assert [column.name for column in older.columns] == ["id", "note"]
    with pytest.raises(CaptureError, match="no longer in the table: colour"):
        definition_for_binlog(ORDERS, [ID, NOTE, binlog_column("colour", 15)])
    with pytest.raises(CaptureError, match="type changed since: weight"):
        definition_for_binlog(ORDERS, [ID, NOTE, binlog_column("weight", 5)])
    with pytest.raises(CaptureError, match="primary key columns missing: id"):
        definition_for_binlog(ORDERS, [NOTE])
