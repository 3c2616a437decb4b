"""Binlog capture on the real ship MariaDB into the real broker: the records, read back and run
through the Debezium normalizer, are exactly the changes made — every type exact, revisions
present — and a capture killed between the producer flush and the position save loses nothing
on restart (duplicates carry the same source coordinates)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.integration.capture_support import (
    Change,
    as_change,
    events_in_queue_order,
    normalize_all,
    per_key,
    read_records,
    settings_for,
)
from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureStart
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
METADATA = ("_sync_revision", "_sync_origin", "_sync_event_id", "_sync_updated_at")
UTC = dt.UTC

TYPED_DDL = """
CREATE TABLE typed (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  amount DECIMAL(12,2) NULL,
  big_amount DECIMAL(30,10) NULL,
  happened DATETIME(6) NULL,
  stamped TIMESTAMP(3) NULL DEFAULT NULL,
  day DATE NULL,
  span TIME(6) NULL,
  doc JSON NULL,
  payload BLOB NULL,
  flags BIT(10) NULL,
  one_bit BIT(1) NULL,
  status ENUM('OPEN','CLOSED') NULL,
  tags SET('a','b','c') NULL,
  active TINYINT(1) NULL,
  label VARCHAR(40) NULL,
  code BINARY(4) NULL,
  ratio DOUBLE NULL
) ENGINE=InnoDB
"""
ORDERS_DDL = ("CREATE TABLE orders (id INT NOT NULL PRIMARY KEY, note VARCHAR(20) NOT NULL)"
              " ENGINE=InnoDB")

FULL_ROW: dict[str, Value] = {
    "id": 18446744073709551615,
    "amount": Decimal("-1234567890.12"),
    "big_amount": Decimal("12345678901234567890.0123456789"),
    "happened": dt.datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC),
    "stamped": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
    "day": dt.date(1969, 7, 20),
    "span": dt.time(13, 14, 15, 16),
    "doc": JsonText('{"k": [1, 2.5, "x"], "n": null}'),
    "payload": bytes(range(256)),
    "flags": BitString(10, 0b1010000001),
    "one_bit": True,
    "status": "CLOSED",
    "tags": "a,c",
    "active": True,
    "label": "héllo ✓ 😀",
    "code": b"\x01\x00\x00\x00",
    "ratio": 0.1,
}
FULL_INSERT = (
    "INSERT INTO typed (id, amount, big_amount, happened, stamped, day, span, doc, payload,"
    " flags, one_bit, status, tags, active, label, code, ratio) VALUES"
    " (18446744073709551615, -1234567890.12, 12345678901234567890.0123456789,"
    " '2024-02-29 23:59:58.123456', '2024-05-06 07:08:09.123', '1969-07-20',"
    " '13:14:15.000016', '{\"k\": [1, 2.5, \"x\"], \"n\": null}', %s, b'1010000001', b'1',"
    " 'CLOSED', 'c,a', 1, %s, x'01', 0.1),"
    " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '', NULL, NULL,"
    " NULL, NULL)"
)
EMPTY_ROW: dict[str, Value] = {name: None for name in FULL_ROW} | {"id": 2, "tags": ""}


class Ship:
    """The ship database as the test changes it, and the changes it expects to see captured."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.rows: dict[tuple[str, Any], dict[str, Value]] = {}
        self.expected: list[Change] = []

    def execute(self, statement: str, *params: Any) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(statement, params or None)

    def inserted(self, table: str, business: dict[str, Value]) -> None:
        key = business["id"]
        after = business | self.metadata(table, key)
        self.rows[(table, key)] = after
        self.expected.append(Change(table, Operation.INSERT, (("id", key),), None, after))

    def updated(self, table: str, key: Any, **changes: Value) -> None:
        before = self.rows[(table, key)]
        after = before | changes | self.metadata(table, key)
        self.rows[(table, key)] = after
        self.expected.append(Change(table, Operation.UPDATE, (("id", key),), before, after))

    def deleted(self, table: str, key: Any) -> None:
        before = self.rows.pop((table, key))
        self.expected.append(Change(table, Operation.DELETE, (("id", key),), before, None))

    def metadata(self, table: str, key: Any) -> dict[str, Value]:
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(METADATA)} FROM {table} WHERE id = %s",
                           (key,))
            revision, origin, event_id, updated_at = cursor.fetchone()
        return {"_sync_revision": revision, "_sync_origin": origin,
                "_sync_event_id": event_id, "_sync_updated_at": updated_at.replace(tzinfo=UTC)}


@pytest.fixture
def ship_database(ship_mariadb, make_mariadb_database) -> Iterator[tuple[Ship, str]]:
    """A fresh ship database with two enabled tables; its connection is closed (rolling back
    anything a failed test left open) before the database is dropped."""
    database = make_mariadb_database(ship_mariadb)
    ship = make_ship(ship_mariadb, database)
    yield ship, database
    ship.connection.close()


def make_ship(instance: Any, database: str) -> Ship:
    connection = instance.connect(database=database, autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
        cursor.execute(TYPED_DDL)
        cursor.execute(ORDERS_DDL)
    for table in ("typed", "orders"):
        enable_mysql_table(connection, database, table, "ship-1")
    return Ship(connection)


def column_types(connection: Any, database: str) -> InMemoryColumnTypes:
    with connection.cursor() as cursor:
        cursor.execute("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS"
                       " WHERE TABLE_SCHEMA = %s", (database,))
        tables: dict[tuple[str, str], dict[str, str]] = {}
        for table, column, kind in cursor.fetchall():
            tables.setdefault((database, table), {})[column] = kind
    return InMemoryColumnTypes(tables)


def binlog_capture(instance: Any, database: str, bootstrap: str, position_path: Path,
                   name: str, server_id: int) -> tuple[MySQLBinlogCapture, SQLitePositionStore,
                                                       KafkaEnvelopePublisher]:
    settings = BinlogSettings(instance.host, instance.port, instance.user, instance.password,
                              server_id, (database,), start_from=CaptureStart.CURRENT)
    publisher = KafkaEnvelopePublisher(bootstrap, partitions=3)
    store = SQLitePositionStore(position_path)
    checkpointer = Checkpointer(publisher, store, name, "mariadb", max_records=50)
    return (MySQLBinlogCapture(settings, DebeziumEnvelopeWriter(name), checkpointer), store,
            publisher)


def run_until_caught_up(instance: Any, database: str, bootstrap: str, position_path: Path,
                        name: str, server_id: int) -> None:
    capture, store, publisher = binlog_capture(instance, database, bootstrap, position_path,
                                               name, server_id)
    try:
        capture.run(until_caught_up=True)
    finally:
        publisher.close()
        store.close()


def test_binlog_changes_normalize_to_exactly_the_changes_made(
        ship_mariadb, kafka_broker, ship_database, tmp_path) -> None:
    ship, database = ship_database
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    # A first run saves the current binlog position: only later changes are captured.
    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9101)

    # One multi-row INSERT: every type with exact values, and a row of NULLs (empty SET).
    ship.execute(FULL_INSERT, bytes(range(256)), "héllo ✓ 😀")
    full_key = FULL_ROW["id"]
    ship.inserted("typed", FULL_ROW)
    ship.inserted("typed", EMPTY_ROW)
    # One multi-row UPDATE.
    ship.execute("UPDATE typed SET active = 0, label = 'changed'")
    ship.updated("typed", full_key, active=False, label="changed")
    ship.updated("typed", 2, active=False, label="changed")
    # One transaction touching two tables.
    ship.connection.begin()
    ship.execute("INSERT INTO orders (id, note) VALUES (1, 'first'), (2, 'second')")
    ship.execute("UPDATE typed SET amount = 0.05, tags = 'b' WHERE id = 2")
    ship.connection.commit()
    ship.inserted("orders", {"id": 1, "note": "first"})
    ship.inserted("orders", {"id": 2, "note": "second"})
    ship.updated("typed", 2, amount=Decimal("0.05"), tags="b")
    # A delete (followed by a tombstone).
    ship.execute("DELETE FROM typed WHERE id = 2")
    ship.deleted("typed", 2)

    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9101)

    topics = [f"{name}.{database}.typed", f"{name}.{database}.orders"]
    records = read_records(bootstrap, topics)
    types = column_types(ship.connection, database)
    events, tombstones = normalize_all(
        records, settings_for({(database, "typed"), (database, "orders")}, types))
    assert tombstones == 1
    got = per_key(as_change(event) for event in events_in_queue_order(events))
    assert_same_changes(got, per_key(ship.expected))
    for event in events:
        assert event.result_revision is not None
        if event.operation is not Operation.INSERT:
            assert event.base_revision == Revision.parse(str(event.before["_sync_revision"]))
        if event.after is not None:
            assert event.result_revision == Revision.parse(str(event.after["_sync_revision"]))
        assert event.source_details["server_id"] == ship_mariadb.server_id
        assert str(event.source_details["gtid"]).startswith(f"0-{ship_mariadb.server_id}-")
    # Rows of one key share a partition; a transaction's rows share its GTID.
    partitions = {(e.record.table, e.record.primary_key): set() for e in events}
    for event in events:
        partitions[(event.record.table, event.record.primary_key)].add(event.source_partition)
    assert all(len(found) == 1 for found in partitions.values())
    two_tables = [e for e in events if e.record.table == "orders"]
    same_transaction = [e for e in events if e.source_details["gtid"]
                        == two_tables[0].source_details["gtid"]]
    assert {e.record.table for e in same_transaction} == {"orders", "typed"}


def test_primary_key_update_is_a_delete_and_a_create(
        ship_mariadb, kafka_broker, ship_database, tmp_path) -> None:
    ship, database = ship_database
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9102)
    ship.execute("INSERT INTO orders (id, note) VALUES (1, 'moved')")
    ship.execute("UPDATE orders SET id = 99 WHERE id = 1")
    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9102)

    records = read_records(bootstrap, [f"{name}.{database}.orders"])
    events, tombstones = normalize_all(records, settings_for({(database, "orders")}))
    assert tombstones == 1
    operations = [(e.operation, e.record.primary_key) for e in events_in_queue_order(events)
                  if e.operation is not Operation.INSERT or e.record.primary_key != (("id", 1),)]
    assert sorted(operations) == [(Operation.DELETE, (("id", 1),)),
                                  (Operation.INSERT, (("id", 99),))]
    moved = {e.operation: e for e in events if e.source_details.get("primary_key_change")}
    assert moved[Operation.DELETE].source_details["primary_key_change"] == "DELETE_OF_OLD_KEY"
    assert moved[Operation.INSERT].source_details["primary_key_change"] == "INSERT_OF_NEW_KEY"


def assert_same_changes(got: dict[Any, list[Change]], expected: dict[Any, list[Change]]) -> None:
    """Equal, or a short report of the first difference (a full diff of the rows is slow)."""
    assert got.keys() == expected.keys(), (sorted(map(repr, got)), sorted(map(repr, expected)))
    for key, changes in expected.items():
        assert len(got[key]) == len(changes), (key, len(got[key]), len(changes))
        for found, wanted in zip(got[key], changes, strict=True):
            assert found.operation == wanted.operation, (key, found.operation, wanted.operation)
            for image in ("before", "after"):
                found_row, wanted_row = getattr(found, image), getattr(wanted, image)
                if found_row is None or wanted_row is None:
                    assert found_row is wanted_row, (key, image)
                    continue
                assert found_row.keys() == wanted_row.keys(), (key, image)
                for column, value in wanted_row.items():
                    assert type(found_row[column]) is type(value), (
                        key, image, column, repr(found_row[column]), repr(value))
                    assert found_row[column] == value, (
                        key, image, column, repr(found_row[column]), repr(value))


def capture_env(instance: Any, database: str, bootstrap: str, position_path: Path, name: str,
                **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TIDESYNC_")}
    env.update({
        "TIDESYNC_CAPTURE__SOURCE": "mysql",
        "TIDESYNC_CAPTURE__LOGICAL_NAME": name,
        "TIDESYNC_CAPTURE__KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TIDESYNC_CAPTURE__TOPIC_PARTITIONS": "3",
        "TIDESYNC_CAPTURE__POSITION_PATH": str(position_path),
        "TIDESYNC_CAPTURE__BATCH_MAX_RECORDS": "8",
        "TIDESYNC_CAPTURE__MYSQL_HOST": instance.host,
        "TIDESYNC_CAPTURE__MYSQL_PORT": str(instance.port),
        "TIDESYNC_CAPTURE__MYSQL_USER": instance.user,
        "TIDESYNC_CAPTURE__MYSQL_PASSWORD": instance.password,
        "TIDESYNC_CAPTURE__SERVER_ID": "9103",
        "TIDESYNC_CAPTURE__DATABASES": database,
    })
    env.update(extra)
    return env


def run_capture_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidesync", "ship", "capture", "--until-caught-up"],
        cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_killed_between_flush_and_position_save_loses_nothing(
        ship_mariadb, kafka_broker, ship_database, tmp_path) -> None:
    ship, database = ship_database
    logical = f"t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    env = capture_env(ship_mariadb, database, kafka_broker.bootstrap_servers, position_path,
                      logical)
    first = run_capture_process(env)
    assert first.returncode == 0, first.stderr

    for batch in range(10):
        ship.execute("INSERT INTO orders (id, note) VALUES (%s, 'a'), (%s, 'b')",
                     batch * 2, batch * 2 + 1)
        ship.inserted("orders", {"id": batch * 2, "note": "a"})
        ship.inserted("orders", {"id": batch * 2 + 1, "note": "b"})
    ship.execute("UPDATE orders SET note = 'c' WHERE id < 4")
    for key in range(4):
        ship.updated("orders", key, note="c")
    ship.execute("DELETE FROM orders WHERE id = 5")
    ship.deleted("orders", 5)

    killed = run_capture_process(env | {"TIDESYNC_FAILPOINTS": "capture_after_flush#2=kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = SQLitePositionStore(position_path)
    saved_before_restart = store.saved(f"sync.cdc.{logical}")
    store.close()
    restarted = run_capture_process(env)
    assert restarted.returncode == 0, restarted.stderr

    records = read_records(kafka_broker.bootstrap_servers,
                           [f"sync.cdc.{logical}.{database}.orders"])
    events, _ = normalize_all(records, settings_for({(database, "orders")}))
    by_coordinates: dict[tuple[Any, ...], list[Change]] = {}
    for event in events:
        details = event.source_details
        coordinates = (details["gtid"], details["binlog_file"], details["binlog_position"],
                       details["binlog_row"], event.operation)
        by_coordinates.setdefault(coordinates, []).append(as_change(event))
    # Every change is there at least once; the re-emitted ones are identical copies.
    assert sorted(map(repr, (copies[0] for copies in by_coordinates.values()))) == sorted(
        map(repr, ship.expected))
    assert all(all(copy == copies[0] for copy in copies) for copies in by_coordinates.values())
    duplicates = Counter(len(copies) for copies in by_coordinates.values())
    assert duplicates[2] > 0, "the killed batch was not re-emitted"
    assert saved_before_restart is not None


def test_a_schema_change_reloads_the_table_and_a_mismatch_stops_capture(
        ship_mariadb, kafka_broker, ship_database, tmp_path) -> None:
    ship, database = ship_database
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9104)
    ship.execute("INSERT INTO orders (id, note) VALUES (1, 'before')")
    ship.execute("ALTER TABLE orders ADD COLUMN weight DECIMAL(6,3) NULL")
    ship.execute("INSERT INTO orders (id, note, weight) VALUES (2, 'after', 1.5)")
    run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9104)
    records = read_records(bootstrap, [f"{name}.{database}.orders"])
    events, _ = normalize_all(records, settings_for({(database, "orders")}))
    afters = {e.record.primary_key: e.after for e in events}
    assert afters[(("id", 1),)] is not None and "weight" not in afters[(("id", 1),)]
    assert afters[(("id", 2),)] is not None
    assert afters[(("id", 2),)]["weight"] == Decimal("1.500")

    # Rows written before a change the capture has not seen yet cannot be mapped: it stops.
    ship.execute("INSERT INTO orders (id, note, weight) VALUES (3, 'lagging', 2)")
    ship.execute("ALTER TABLE orders DROP COLUMN weight")
    with pytest.raises(CaptureError) as raised:
        run_until_caught_up(ship_mariadb, database, bootstrap, position_path, name, 9104)
    assert raised.value.reason is CaptureErrorReason.SCHEMA_MISMATCH
    assert "weight" in raised.value.message


def test_the_long_running_command_follows_new_changes_and_stops_cleanly(
        ship_mariadb, kafka_broker, ship_database, tmp_path) -> None:
    ship, database = ship_database
    logical = f"t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    env = capture_env(ship_mariadb, database, kafka_broker.bootstrap_servers, position_path,
                      logical, TIDESYNC_CAPTURE__SERVER_ID="9105")
    process = subprocess.Popen(
        [sys.executable, "-m", "tidesync", "ship", "capture"], cwd=REPOSITORY, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        store = SQLitePositionStore(position_path)
        deadline = time.monotonic() + 30
        while store.saved(f"sync.cdc.{logical}") is None:  # started: the first position saved
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.05)
        ship.execute("INSERT INTO orders (id, note) VALUES (1, 'live')")
        topic = f"sync.cdc.{logical}.{database}.orders"
        while topic not in kafka_broker.admin_client().list_topics(timeout=5).topics:
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.05)
        records = read_records(kafka_broker.bootstrap_servers, [topic], idle_seconds=0.5)
        events, _ = normalize_all(records, settings_for({(database, "orders")}))
        assert [e.record.primary_key for e in events] == [(("id", 1),)]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
        saved = store.saved(f"sync.cdc.{logical}")
        store.close()
        assert saved is not None
        with ship.connection.cursor() as cursor:
            cursor.execute("SELECT @@gtid_binlog_pos")
            assert saved[1].gtid_state == cursor.fetchone()[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_killed_binlog_connection_resumes_from_the_saved_position(
        ship_mariadb, kafka_broker, ship_database, tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="tidesync.capture.binlog")
    ship, database = ship_database
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    bootstrap = kafka_broker.bootstrap_servers
    capture, store, publisher = binlog_capture(ship_mariadb, database, bootstrap,
                                               tmp_path / "position.sqlite", name, 9106)
    stop = threading.Event()
    failures: list[BaseException] = []

    def follow() -> None:
        try:
            capture.run(stop=stop)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    runner = threading.Thread(target=follow)
    runner.start()
    try:
        wait_for(lambda: dump_threads(ship) != [])
        ship.execute("INSERT INTO orders (id, note) VALUES (1, 'before')")
        wait_for(lambda: capture.checkpointer.stats.row_changes == 1)
        for thread_id in dump_threads(ship):
            ship.execute(f"KILL CONNECTION {int(thread_id)}")
        ship.execute("INSERT INTO orders (id, note) VALUES (2, 'after')")
        wait_for(lambda: capture.checkpointer.stats.row_changes >= 2)
    finally:
        stop.set()
        runner.join(timeout=30)
        publisher.close()
        store.close()
    assert not failures, failures
    events, _ = normalize_all(read_records(bootstrap, [f"{name}.{database}.orders"]),
                              settings_for({(database, "orders")}))
    assert {e.record.primary_key for e in events} == {(("id", 1),), (("id", 2),)}
    assert "lost its binlog connection" in caplog.text


def dump_threads(ship: Ship) -> list[int]:
    with ship.connection.cursor() as cursor:
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST"
                       " WHERE COMMAND LIKE 'Binlog Dump%'")
        return [int(row[0]) for row in cursor.fetchall()]


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
