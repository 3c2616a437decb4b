"""Incremental snapshots in the real binlog capture on the ship MariaDB and the real broker:
rows that existed before capture started reach the shore as snapshot records while the ship
keeps changing the table, and the snapshot and change records, applied in queue order on a
shore target, give exactly the ship's table — also when the capture is killed mid-snapshot."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.capture_support import normalize_all, read_records, settings_for
from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureStart
from tidesync.capture.snapshot_store import SnapshotState, SnapshotStore
from tidesync.domain.change_event import ChangeEvent, Operation, Revision
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
ROWS = 300


class Writer(threading.Thread):
    """Keeps changing the ship table (updates, inserts, deletes) until stopped."""

    def __init__(self, instance: Any, database: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.connection = instance.connect(database=database, autocommit=True)
        self.random = random.Random(seed)
        self.halt = threading.Event()
        self.changes = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with self.connection.cursor() as cursor:
                while not self.halt.is_set():
                    key = self.random.randint(1, ROWS + 60)
                    action = self.random.random()
                    if action < 0.7:
                        cursor.execute("UPDATE parts SET qty = qty + 1, note = %s WHERE id = %s",
                                       (f"w{self.changes}", key))
                    elif action < 0.85:
                        cursor.execute("INSERT IGNORE INTO parts (id, note, qty) VALUES"
                                       " (%s, 'new', 0)", (key,))
                    else:
                        cursor.execute("DELETE FROM parts WHERE id = %s", (key,))
                    self.changes += 1
                    time.sleep(0.002)
        except BaseException as error:  # reported by the test
            self.failure = error

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)
        self.connection.close()
        assert self.failure is None, self.failure


@pytest.fixture
def ship(ship_mariadb, make_mariadb_database) -> Iterator[tuple[Any, str]]:
    database = make_mariadb_database(ship_mariadb)
    connection = ship_mariadb.connect(database=database, autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE parts (id INT NOT NULL PRIMARY KEY, note VARCHAR(20) NOT"
                       " NULL, qty INT NOT NULL) ENGINE=InnoDB")
    enable_mysql_table(connection, database, "parts", "ship-1")
    with connection.cursor() as cursor:
        cursor.executemany("INSERT INTO parts (id, note, qty) VALUES (%s, %s, %s)",
                           [(key, f"old {key}", key) for key in range(1, ROWS + 1)])
    yield connection, database
    connection.close()


def _capture(instance: Any, database: str, bootstrap: str, position_path: Path, name: str,
             server_id: int) -> tuple[MySQLBinlogCapture, list[Any]]:
    settings = BinlogSettings(instance.host, instance.port, instance.user, instance.password,
                              server_id, (database,), start_from=CaptureStart.CURRENT,
                              snapshot_rows_per_sec=500)
    publisher = KafkaEnvelopePublisher(bootstrap, partitions=3)
    store = SQLitePositionStore(position_path)
    checkpointer = Checkpointer(publisher, store, name, "mariadb", max_records=50)
    capture = MySQLBinlogCapture(settings, DebeziumEnvelopeWriter(name), checkpointer)
    return capture, [publisher, store]


def _wait_until_emitted(position_path: Path, deadline_seconds: float,
                        alive: Any = lambda: True) -> None:
    store = SnapshotStore(position_path)
    try:
        deadline = time.monotonic() + deadline_seconds
        while True:
            [request] = store.requests()
            if request.state is SnapshotState.EMITTED:
                return
            assert request.state is not SnapshotState.FAILED, request.error
            assert alive() and time.monotonic() < deadline, request
            time.sleep(0.1)
    finally:
        store.close()


def _apply_on_shore(events: list[ChangeEvent], shore_path: Path) -> dict[str, int]:
    """Each partition's events in queue order on a fresh shore table; counts by outcome."""
    with contextlib.closing(sqlite3.connect(shore_path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE parts (id INTEGER PRIMARY KEY, note TEXT NOT NULL,"
                           " qty INTEGER NOT NULL)")
        enable_sqlite_table(connection, "parts", "shore")
    applier = SQLiteTargetApplier(shore_path, node_id="shore")
    partitions: dict[int, list[ChangeEvent]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.source_partition, e.source_position)):
        partitions[event.source_partition].append(event)
    counts: dict[str, int] = defaultdict(int)
    try:
        for partition_events in partitions.values():
            for start in range(0, len(partition_events), 40):
                for outcome in applier.apply_chunk(partition_events[start:start + 40]):
                    assert outcome.kind is not TargetOutcomeKind.REJECTED, outcome
                    counts[outcome.kind.value] += 1
    finally:
        applier.close()
    return counts


def _ship_rows(connection: Any) -> dict[int, tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, note, qty, _sync_revision FROM parts")
        return {row[0]: (row[1], row[2], Revision.parse(row[3])) for row in cursor.fetchall()}


def _shore_rows(shore_path: Path) -> dict[int, tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(shore_path)) as connection:
        rows = connection.execute("SELECT id, note, qty, _sync_revision FROM parts").fetchall()
    return {row[0]: (row[1], row[2], Revision.parse(row[3])) for row in rows}


def _events(bootstrap: str, topic: str, database: str) -> list[ChangeEvent]:
    records = read_records(bootstrap, [topic], idle_seconds=1.5, timeout=60)
    events, _ = normalize_all(records, settings_for({(database, "parts")}))
    return events


def test_a_snapshot_during_writes_gives_the_shore_exactly_the_ship_table(
        ship_mariadb, kafka_broker, ship, tmp_path) -> None:
    connection, database = ship
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    capture, resources = _capture(ship_mariadb, database, bootstrap, position_path, name, 9141)
    stop = threading.Event()
    runner = threading.Thread(target=capture.run, kwargs={"stop": stop}, daemon=True)
    runner.start()
    writer = Writer(ship_mariadb, database, seed=7)
    try:
        while capture.checkpointer.saved is None:  # capture started: CDC from here on
            time.sleep(0.05)
        writer.start()
        store = SnapshotStore(position_path)
        store.request(name, database, "parts", keys=None, chunk_rows=25, reason="onboarding",
                      actor="user:test", now=capture.checkpointer.clock())
        store.close()
        _wait_until_emitted(position_path, 120, runner.is_alive)
    finally:
        writer.stop()
        time.sleep(2.0)  # the capture reads the writer's last changes
        stop.set()
        runner.join(timeout=60)
        for resource in resources:
            resource.close()

    events = _events(bootstrap, f"{name}.{database}.parts", database)
    snapshots = [e for e in events if e.operation is Operation.SNAPSHOT]
    assert 0 < len(snapshots) <= ROWS + 60
    # Changes were captured while the snapshot was under way: between its records.
    spans = {partition: (min(e.source_position for e in snapshots
                             if e.source_partition == partition),
                         max(e.source_position for e in snapshots
                             if e.source_partition == partition))
             for partition in {e.source_partition for e in snapshots}}
    assert any(e.operation is not Operation.SNAPSHOT and e.source_partition in spans
               and spans[e.source_partition][0] < e.source_position
               < spans[e.source_partition][1] for e in events)
    shore_path = tmp_path / "shore.sqlite"
    _apply_on_shore(events, shore_path)
    assert _shore_rows(shore_path) == _ship_rows(connection)


def test_a_capture_killed_mid_snapshot_resumes_without_losing_or_doubling_rows(
        ship_mariadb, kafka_broker, ship, tmp_path) -> None:
    connection, database = ship
    logical = f"t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TIDESYNC_")} | {
        "TIDESYNC_CAPTURE__SOURCE": "mysql", "TIDESYNC_CAPTURE__LOGICAL_NAME": logical,
        "TIDESYNC_CAPTURE__KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TIDESYNC_CAPTURE__TOPIC_PARTITIONS": "3",
        "TIDESYNC_CAPTURE__POSITION_PATH": str(position_path),
        "TIDESYNC_CAPTURE__MYSQL_HOST": ship_mariadb.host,
        "TIDESYNC_CAPTURE__MYSQL_PORT": str(ship_mariadb.port),
        "TIDESYNC_CAPTURE__MYSQL_USER": ship_mariadb.user,
        "TIDESYNC_CAPTURE__MYSQL_PASSWORD": ship_mariadb.password,
        "TIDESYNC_CAPTURE__SERVER_ID": "9142", "TIDESYNC_CAPTURE__DATABASES": database,
        "TIDESYNC_CAPTURE__SNAPSHOT_ROWS_PER_SEC": "500",
        "TIDESYNC_SHIP__STATE_PATH": str(tmp_path / "no-ship-state.sqlite"),
    }
    tidesync = [sys.executable, "-m", "tidesync"]
    first = subprocess.run([*tidesync, "ship", "capture", "--until-caught-up"], cwd=REPOSITORY,
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    asked = subprocess.run([*tidesync, "snapshot", "start", f"{database}.parts",
                            "--chunk-rows", "25", "--reason", "onboarding"], cwd=REPOSITORY,
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert asked.returncode == 0, asked.stderr

    writer = Writer(ship_mariadb, database, seed=11)
    writer.start()
    try:
        killed = subprocess.run(
            [*tidesync, "ship", "capture"], cwd=REPOSITORY, timeout=180, check=False,
            env=env | {"TIDESYNC_FAILPOINTS": "snapshot_chunk_published#4=kill"},
            capture_output=True, text=True)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        store = SnapshotStore(position_path)
        [interrupted] = store.requests()
        store.close()
        assert interrupted.state is SnapshotState.SNAPSHOTTING
        assert interrupted.chunks_done == 3

        process = subprocess.Popen([*tidesync, "ship", "capture"], cwd=REPOSITORY, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_until_emitted(position_path, 120, lambda: process.poll() is None)
            writer.stop()
            time.sleep(2.0)
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, stderr
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        if writer.is_alive():
            writer.stop()

    status = subprocess.run([*tidesync, "snapshot", "status"], cwd=REPOSITORY, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    [shown] = json.loads(status.stdout)
    assert shown["phase"] == "CATCHING_UP"  # no ship client has answered yet
    done, total = shown["chunks"].split("/")
    assert done == total and int(done) > 4

    events = _events(bootstrap, f"sync.cdc.{logical}.{database}.parts", database)
    snapshot_keys = [e.record.primary_key for e in events if e.operation is Operation.SNAPSHOT]
    assert len(snapshot_keys) > len(set(snapshot_keys)), "the killed chunk was not sent again"
    shore_path = tmp_path / "shore.sqlite"
    _apply_on_shore(events, shore_path)
    assert _shore_rows(shore_path) == _ship_rows(connection)
