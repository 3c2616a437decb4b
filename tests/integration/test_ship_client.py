"""The ship client on real services: Debezium records in the tansu broker, a real shore server
(registered node, signed requests) and apply worker writing the shore MariaDB, receipts pulled
back by cursor, queue offsets committed. A client killed with SIGKILL at a random moment and
restarted loses nothing and makes the shore store and apply nothing twice."""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.clocks import WallClock
from tests.integration.ship_support import ItemsCapture, RunningShore, produce
from tests.integration.shore_support import ITEMS_DDL, ledger_ids
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tidesync.bootstrap.ship import build_client
from tidesync.bootstrap.shore import build_worker
from tidesync.bootstrap.target import mysql_target_applier
from tidesync.config import ShipConfig, TargetConfig
from tidesync.domain.node import secret_text
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.migrations import migrate_postgres
from tidesync.ship.client import ExitCode
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.telemetry import Subsystem
from tidesync.shore.processor import ProcessorSettings
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]


@contextmanager
def shore_for_ship(pg_database: Any, shore_mariadb: Any, database: str, *,
                   secret: bytes | None = None, worker: bool = True, **shore_settings: Any
                   ) -> Iterator[RunningShore]:
    """Server + registered node (+ apply worker thread, now or by `start_worker()`);
    `secret` makes the ship sign with another secret than the node's own; `shore_settings`
    are `[shore]` settings of the server."""
    migrate_postgres(pg_database.dsn)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")
    conn.close()
    clock = WallClock()
    target = TargetConfig(host=shore_mariadb.host, port=shore_mariadb.port,
                          user=shore_mariadb.user, password=shore_mariadb.password,
                          node_id="shore")
    config = dataclasses.replace(make_config(pg_database, **shore_settings), target=target)
    node_id = f"it-ship-{secrets.token_hex(4)}"
    with node_service(config) as service:
        issued = service.register(node_id, ACTOR, clock())
    applier = mysql_target_applier(target, lambda db, table: (db, table))
    apply_worker, close = build_worker(config, applier,
                                       settings=ProcessorSettings(chunk_size=200))
    apply_worker.idle_sleep = 0.1
    thread = threading.Thread(target=apply_worker.run, name="shore-worker", daemon=True)
    try:
        with running(config, clock) as url:  # type: ignore[arg-type]
            shore = RunningShore(url, node_id, secret_text(secret or issued.secret), database,
                                 config, thread.start)
            if worker:
                shore.start_worker()
            yield shore
    finally:
        apply_worker.stop_event.set()
        if thread.is_alive():
            thread.join(30)
        close()


def ship_config(shore: RunningShore, broker: Any, state_path: Path, **extra: Any) -> ShipConfig:
    return ShipConfig(node_id=shore.node_id, shore_url=shore.url, secret=shore.secret_text,
                      state_path=str(state_path),
                      kafka_bootstrap_servers=broker.bootstrap_servers,
                      bidirectional_tables=(f"{shore.database}.items",),
                      # The broker is shared by the session: read only this test's topics.
                      topic_pattern=rf"^sync\.cdc\.{shore.database}\.",
                      receipts_interval_seconds=1, heartbeat_interval_seconds=1, **extra)


def committed_offsets(broker: Any, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def shore_rows(shore_mariadb: Any, database: str) -> list[tuple[Any, ...]]:
    conn = shore_mariadb.connect(database=database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT id, name, qty, price, _sync_revision FROM items ORDER BY id")
            return list(cursor.fetchall())
    finally:
        conn.close()


def workload(capture: ItemsCapture, rows: int, updates: int, deletes: int) -> list[Any]:
    records = [capture.insert(k, f"part-{k}", k, f"{k}.25") for k in range(1, rows + 1)]
    records += [capture.update(k, qty=k * 3) for k in range(1, updates + 1)]
    for k in range(rows - deletes + 1, rows + 1):
        records += capture.delete(k)
    return records


def expected_rows(capture: ItemsCapture) -> list[tuple[Any, ...]]:
    return [(k, row["name"], row["qty"], row["price"], row["_sync_revision"])
            for k, row in sorted(capture.rows.items())]


def inbox(pg_database: Any, node_id: str, conn: Any = None) -> list[tuple[Any, ...]]:
    if conn is None:
        with pg_database.connect() as own:
            return inbox(pg_database, node_id, own)
    return list(conn.execute(
        "SELECT event_id, source_partition, source_sequence, state, result FROM inbox_event"
        " WHERE origin_node_id = %s ORDER BY source_partition, source_sequence",
        (node_id,)).fetchall())


def check_shore(pg_database: Any, shore_mariadb: Any, shore: RunningShore,
                capture: ItemsCapture, events: int) -> None:
    rows = inbox(pg_database, shore.node_id)
    assert len(rows) == len({r[0] for r in rows}) == events  # one inbox row per event
    for partition in {r[1] for r in rows}:
        sequences = [r[2] for r in rows if r[1] == partition]
        assert sequences == list(range(1, len(sequences) + 1))
    assert {(r[3], r[4]) for r in rows} == {("TERMINAL", "APPLIED")}
    ledger = ledger_ids(shore_mariadb.connect(database=shore.database), shore.database)
    assert len(ledger) == len(set(ledger)) == events  # applied exactly once
    assert shore_rows(shore_mariadb, shore.database) == expected_rows(capture)


def test_uplink_end_to_end_commits_to_the_end(pg_database, shore_mariadb, kafka_broker,
                                              make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=2)
    records = workload(capture, rows=120, updates=60, deletes=10)
    # A heartbeat record and a schema change on the same topic are skipped, not sent.
    produce(kafka_broker.bootstrap_servers, records, partitions=2, raw=[
        (capture.topic, None, b'{"schema":null,"payload":{"ts_ms":1}}')])
    events = sum(1 for r in records if r.value is not None)
    with shore_for_ship(pg_database, shore_mariadb, database) as shore:
        # The uplink token bucket paces the batches (about 20 KB for these events).
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite",
                             uplink_rate_bytes_per_sec=100_000, uplink_burst_bytes=8_192)
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
            assert client.state.state_counts() == {"TERMINAL": events}
            watermarks = client.state.watermarks()
            ends = client.consumer.end_offsets()
        finally:
            client.close()
        check_shore(pg_database, shore_mariadb, shore, capture, events)
        with pg_database.connect() as conn:
            (health,) = conn.execute("SELECT health FROM node_heartbeat WHERE node_id = %s",
                                     (shore.node_id,)).fetchone()
    assert {h["subsystem"]: h["state"] for h in health}["TRANSPORT"] == "HEALTHY"
    assert len(watermarks) == 2
    for wm in watermarks:
        assert wm.terminal_offset == wm.received_offset == wm.read_offset
        assert wm.commit_offset == ends[wm.key]
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 2) == [
        ends[wm.key] for wm in sorted(watermarks, key=lambda w: w.partition)]


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def run_client(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidesync", "ship", "run", *args],
                            env=env, cwd=REPOSITORY, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def client_env(config: ShipConfig) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TIDESYNC_")}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, tuple):
            value = ",".join(value)
        elif isinstance(value, Mapping):
            value = ",".join(f"{key}={item}" for key, item in value.items())
        env[f"TIDESYNC_SHIP__{field.name.upper()}"] = str(value)
    return env


def test_sigkill_at_a_random_moment_loses_nothing_and_repeats_nothing(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=3)
    records = workload(capture, rows=900, updates=400, deletes=50)
    produce(kafka_broker.bootstrap_servers, records, partitions=3)
    events = sum(1 for r in records if r.value is not None)
    rng = random.Random()
    with shore_for_ship(pg_database, shore_mariadb, database) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite",
                             batch_max_events=25)
        env = client_env(config)
        received_at_kill = []
        with pg_database.connect() as conn:
            for share in sorted(rng.uniform(0.05, 0.6) for _ in range(2)):
                # Kill at a random moment once the uploads have begun and before they end.
                process = run_client(env)
                wait_until(lambda wanted=share * events: len(
                    inbox(pg_database, shore.node_id, conn)) >= wanted)
                time.sleep(rng.uniform(0.0, 0.05))
                process.send_signal(signal.SIGKILL)
                assert process.wait(10) == -signal.SIGKILL
                received_at_kill.append(len(inbox(pg_database, shore.node_id, conn)))
        assert min(received_at_kill) < events  # at least one kill landed mid-way
        final = run_client(env, "--until-idle", "--timeout", "90")
        _, stderr = final.communicate(timeout=120)
        assert final.returncode == 0, stderr.decode()[-3000:]
        check_shore(pg_database, shore_mariadb, shore, capture, events)
    state = SQLiteShipState(config.state_path, config.node_id, config.group_id, read_only=True)
    try:
        assert state.state_counts() == {"TERMINAL": events}
        ends = {wm.partition: wm.read_offset + 1 for wm in state.watermarks()}
    finally:
        state.close()
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 3) == [
        ends[p] for p in range(3)]



def test_a_blocked_record_holds_the_commit_and_a_restart_sends_nothing_again(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    first = [capture.insert(1, "part-1", 1, "1.00")]
    later = [capture.insert(k, f"part-{k}", k, "2.00") for k in range(2, 41)]
    later += [capture.update(k, qty=0) for k in range(2, 21)]
    produce(kafka_broker.bootstrap_servers, first, raw=[
        (capture.topic, b'{"schema":null,"payload":{"id":999}}', b"{not json")])
    produce(kafka_broker.bootstrap_servers, later)
    events = 1 + len(later)
    with shore_for_ship(pg_database, shore_mariadb, database, worker=False) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite")
        # Without the apply worker every event is received and none is terminal.
        client = build_client(config)
        try:
            wait_until(lambda: client.step()
                       or client.state.state_counts().get("RECEIVED") == events)
            assert client.state.state_counts() == {"RECEIVED": events, "BLOCKED": 1}
        finally:
            client.close()  # as a crash would: no state beyond what SQLite holds
        shore.start_worker()
        restarted = build_client(config)
        try:
            # Everything after the blocked record is read again: nothing is sent again.
            assert restarted.run(until_idle=True, timeout=60) is ExitCode.BLOCKED
            assert restarted.uploads.uploaded_batches == 0
            assert restarted.state.state_counts() == {"TERMINAL": events, "BLOCKED": 1}
            (watermark,) = restarted.state.watermarks()
            assert (watermark.terminal_offset, watermark.committed_offset) == (0, 1)
            assert watermark.read_offset == events
            queue = restarted.health.get(Subsystem.QUEUE)
            assert queue is not None and (queue.state, queue.reason_code) == (
                "BLOCKED", "EVENTS_BLOCKED")
            report = status_report(restarted.state)
        finally:
            restarted.close()
        again = build_client(config)
        try:
            assert again.run(until_idle=True, timeout=60) is ExitCode.BLOCKED
            assert again.uploads.uploaded_batches == 0
        finally:
            again.close()
        assert len(inbox(pg_database, shore.node_id)) == events
    assert report["blocked"] == [{"topic": capture.topic, "partition": 0, "offset": 1,
                                  "reason": "MALFORMED_JSON",
                                  "detail": report["blocked"][0]["detail"]}]
    assert report["partitions"][0]["backlog"] == events  # end (events + 1) − (terminal + 1)
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 1) == [1]


def test_a_refused_identity_blocks_the_node_but_not_the_capture(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"p{k}", k, "1.00") for k in range(1, 6)])
    with shore_for_ship(pg_database, shore_mariadb, database, secret=os.urandom(32)) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite")
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=30) is ExitCode.BLOCKED
            transport = client.health.get(Subsystem.TRANSPORT)
            assert transport is not None
            assert (transport.state, transport.reason_code) == ("BLOCKED", "AUTH_BAD_SIGNATURE")
            # Read and kept, not lost: to be sent again, under their ids, once the node is
            # accepted — READY, or IN_FLIGHT if the refusal came while their batch was still
            # held (which of the node's requests is refused first is a race).
            counts = client.state.state_counts()
            assert set(counts) <= {"READY", "IN_FLIGHT"} and sum(counts.values()) == 5
            report = status_report(client.state)
        finally:
            client.close()
        assert inbox(pg_database, shore.node_id) == []
    transport_rows = [h for h in report["health"] if h["subsystem"] == "TRANSPORT"]
    assert transport_rows[0]["reason"] == "AUTH_BAD_SIGNATURE"
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 1) == [-1001]
