"""SQLite changelog capture into the real broker: a table enabled for two-way sync and for
capture publishes one exact change per write (the sync triggers' stamping folded in), and a
capture killed between the producer flush and the position save loses nothing on restart."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
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
from tests.integration.test_capture_mariadb import assert_same_changes
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.errors import CaptureError
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.sqlite import (
    CHANGELOG_TABLE,
    SQLiteChangelogCapture,
    enable_sqlite_capture,
)
from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.values import JsonText, Value
from tidesync.target.sqlite_schema import enable_sqlite_table

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
UTC = dt.UTC
ITEMS_DDL = """
CREATE TABLE items (
  id INTEGER PRIMARY KEY,
  price DECIMAL(12,2),
  big DECIMAL(24,6),  -- NUMERIC affinity: SQLite keeps 15 significant digits
  at DATETIME(6),
  day DATE,
  span TIME,
  doc JSON,
  data BLOB,
  flag BOOLEAN,
  qty BIGINT,
  ratio REAL,
  label VARCHAR(40) NOT NULL
)
"""
NOTES_DDL = "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"
FULL: dict[str, Value] = {
    "id": 1, "price": Decimal("12.50"), "big": Decimal("123456789.000001"),
    "at": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), "day": dt.date(2024, 2, 29),
    "span": dt.time(13, 14, 15, 16), "doc": JsonText('{"a": [1, 2.5]}'),
    "data": bytes(range(256)), "flag": True, "qty": 2**62 + 7, "ratio": 0.1,
    "label": "héllo ✓ 😀",
}
NULLS: dict[str, Value] = {name: None for name in FULL} | {"id": 2, "label": "empty"}


class ShipFile:
    """The ship's SQLite database as the test changes it, and the changes it expects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.rows: dict[tuple[str, Any], dict[str, Value]] = {}
        self.expected: list[Change] = []

    def inserted(self, table: str, business: dict[str, Value]) -> None:
        after = business | self.metadata(table, business["id"])
        self.rows[(table, business["id"])] = after
        self.expected.append(Change(table, Operation.INSERT, (("id", business["id"]),),
                                    None, after))

    def updated(self, table: str, key: int, **changes: Value) -> None:
        before = self.rows[(table, key)]
        after = before | changes | self.metadata(table, key)
        self.rows[(table, key)] = after
        self.expected.append(Change(table, Operation.UPDATE, (("id", key),), before, after))

    def deleted(self, table: str, key: int) -> None:
        before = self.rows.pop((table, key))
        self.expected.append(Change(table, Operation.DELETE, (("id", key),), before, None))

    def metadata(self, table: str, key: int) -> dict[str, Value]:
        revision, origin, event_id, updated_at = self.db.execute(
            f"SELECT _sync_revision, _sync_origin, _sync_event_id, _sync_updated_at FROM {table}"
            " WHERE id = ?", (key,)).fetchone()
        return {"_sync_revision": revision, "_sync_origin": origin, "_sync_event_id": event_id,
                "_sync_updated_at": dt.datetime.fromisoformat(updated_at).replace(tzinfo=UTC)}


def make_ship_file(path: Path) -> ShipFile:
    ship = ShipFile(path)
    ship.db.execute(ITEMS_DDL)
    ship.db.execute(NOTES_DDL)
    for table in ("items", "notes"):
        enable_sqlite_table(ship.db, table, "ship-1")
        enable_sqlite_capture(ship.db, table)
    return ship


def drain(path: Path, bootstrap: str, position_path: Path, name: str) -> None:
    publisher = KafkaEnvelopePublisher(bootstrap, partitions=3)
    store = SQLitePositionStore(position_path)
    try:
        checkpointer = Checkpointer(publisher, store, name, "sqlite", max_records=20)
        SQLiteChangelogCapture(path, DebeziumEnvelopeWriter(name), checkpointer).run(
            until_caught_up=True)
    finally:
        publisher.close()
        store.close()


ITEM_INSERT = ("INSERT INTO items (id, price, big, at, day, span, doc, data, flag, qty, ratio,"
               " label) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def test_changelog_changes_normalize_to_exactly_the_changes_made(kafka_broker, tmp_path) -> None:
    ship = make_ship_file(tmp_path / "ship.sqlite")
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    bootstrap = kafka_broker.bootstrap_servers
    # One statement inserting two rows: exact values, and a row of NULLs.
    ship.db.execute(
        "INSERT INTO items (id, price, big, at, day, span, doc, data, flag, qty, ratio, label)"
        " VALUES (1, '12.50', '123456789.000001', '2024-01-02 03:04:05.123456',"
        " '2024-02-29', '13:14:15.000016', '{\"a\": [1, 2.5]}', ?, 1, ?, 0.1, ?),"
        " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'empty')",
        (bytes(range(256)), 2**62 + 7, "héllo ✓ 😀"))
    ship.inserted("items", FULL)
    ship.inserted("items", NULLS)
    # One statement updating both rows.
    ship.db.execute("UPDATE items SET flag = 0, price = 13")
    ship.updated("items", 1, flag=False, price=Decimal("13.00"))
    ship.updated("items", 2, flag=False, price=Decimal("13.00"))
    # One transaction touching two tables.
    ship.db.execute("BEGIN")
    ship.db.execute("INSERT INTO notes (id, body) VALUES (7, 'note')")
    ship.db.execute("UPDATE items SET label = 'in a transaction' WHERE id = 2")
    ship.db.execute("COMMIT")
    ship.inserted("notes", {"id": 7, "body": "note"})
    ship.updated("items", 2, label="in a transaction")
    # A remote apply (the sync triggers leave it alone) and a delete.
    ship.db.execute("BEGIN")
    ship.db.execute("UPDATE _sync_session SET remote_apply = 1")
    ship.db.execute("UPDATE notes SET body = 'from shore', _sync_revision = ?,"
                    " _sync_origin = 'shore', _sync_event_id = ? WHERE id = 7",
                    ("11111111-2222-4333-8444-555555555555",
                     "66666666-7777-4888-8999-000000000000"))
    ship.db.execute("UPDATE _sync_session SET remote_apply = 0")
    ship.db.execute("COMMIT")
    ship.updated("notes", 7, body="from shore")
    ship.db.execute("DELETE FROM items WHERE id = 2")
    ship.deleted("items", 2)

    drain(ship.path, bootstrap, tmp_path / "position.sqlite", name)

    records = read_records(bootstrap, [f"{name}.main.items", f"{name}.main.notes"])
    events, tombstones = normalize_all(records, settings_for({("main", "items"),
                                                              ("main", "notes")}))
    assert tombstones == 1
    got = per_key(as_change(event) for event in events_in_queue_order(events))
    assert_same_changes(got, per_key(ship.expected))
    for event in events:
        if event.after is not None:
            assert event.result_revision == Revision.parse(str(event.after["_sync_revision"]))
        if event.before is not None:
            assert event.base_revision == Revision.parse(str(event.before["_sync_revision"]))
    remote = [e for e in events if e.record.table == "notes" and e.operation is Operation.UPDATE]
    assert remote[0].after is not None
    assert remote[0].after["_sync_event_id"] == "66666666-7777-4888-8999-000000000000"
    # Published changelog rows are deleted.
    assert ship.db.execute(f"SELECT COUNT(*) FROM {CHANGELOG_TABLE}").fetchone()[0] == 0


def test_sync_triggers_recreated_after_capture_stop_it_with_a_clear_error(
        kafka_broker, tmp_path) -> None:
    ship = make_ship_file(tmp_path / "ship.sqlite")
    enable_sqlite_table(ship.db, "items", "another-node")  # re-creates the sync triggers
    with pytest.raises(CaptureError, match="created after the capture triggers"):
        drain(ship.path, kafka_broker.bootstrap_servers, tmp_path / "position.sqlite",
              f"sync.cdc.t{secrets.token_hex(4)}")
    enable_sqlite_capture(ship.db, "items")  # capture's triggers are the newest again
    drain(ship.path, kafka_broker.bootstrap_servers, tmp_path / "position.sqlite",
          f"sync.cdc.t{secrets.token_hex(4)}")


def run_capture_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidesync", "ship", "capture", "--until-caught-up"],
        cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_killed_between_flush_and_position_save_loses_nothing(kafka_broker, tmp_path) -> None:
    ship = make_ship_file(tmp_path / "ship.sqlite")
    logical = f"t{secrets.token_hex(4)}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("TIDESYNC_")}
    env.update({
        "TIDESYNC_CAPTURE__SOURCE": "sqlite",
        "TIDESYNC_CAPTURE__SQLITE_PATH": str(ship.path),
        "TIDESYNC_CAPTURE__LOGICAL_NAME": logical,
        "TIDESYNC_CAPTURE__KAFKA_BOOTSTRAP_SERVERS": kafka_broker.bootstrap_servers,
        "TIDESYNC_CAPTURE__TOPIC_PARTITIONS": "3",
        "TIDESYNC_CAPTURE__POSITION_PATH": str(tmp_path / "position.sqlite"),
        "TIDESYNC_CAPTURE__BATCH_MAX_RECORDS": "10",
    })
    for key in range(30):
        ship.db.execute("INSERT INTO notes (id, body) VALUES (?, 'n')", (key,))
        ship.inserted("notes", {"id": key, "body": "n"})
    ship.db.execute("UPDATE notes SET body = 'm' WHERE id < 5")
    for key in range(5):
        ship.updated("notes", key, body="m")

    killed = run_capture_process(env | {"TIDESYNC_FAILPOINTS": "capture_after_flush#2=kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    restarted = run_capture_process(env)
    assert restarted.returncode == 0, restarted.stderr

    records = read_records(kafka_broker.bootstrap_servers, [f"sync.cdc.{logical}.main.notes"])
    events, _ = normalize_all(records, settings_for({("main", "notes")}))
    by_coordinates: dict[tuple[Any, ...], list[Change]] = {}
    for event in events:
        details = event.source_details
        by_coordinates.setdefault((details["binlog_file"], details["binlog_position"]),
                                  []).append(as_change(event))
    assert sorted(map(repr, (copies[0] for copies in by_coordinates.values()))) == sorted(
        map(repr, ship.expected))
    assert all(all(copy == copies[0] for copy in copies) for copies in by_coordinates.values())
    assert Counter(len(copies) for copies in by_coordinates.values())[2] > 0
    assert ship.db.execute(f"SELECT COUNT(*) FROM {CHANGELOG_TABLE}").fetchone()[0] == 0
