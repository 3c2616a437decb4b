"""Ship to shore end to end on the real parts: plain SQL on the ship MariaDB, `tidesync ship
capture` reading its binlog into the broker, `tidesync ship run` uploading to a real shore
server, `tidesync shore work` writing the shore MariaDB. At the end the shore tables equal the
ship's row by row (revisions included), every event is terminal on the ship, the consumer
offsets are committed to the end of the topics and the shore ledger holds each row change
exactly once — also when the client and the worker are SIGKILLed at random moments."""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.clocks import WallClock
from tests.integration.capture_support import read_records
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tests.integration.test_ship_client import client_env
from tests.integration.test_shore_work_crash import worker_env
from tidesync.bootstrap.capture import run_capture
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.settings import CaptureConfig, CaptureSource
from tidesync.config import Config, ShipConfig
from tidesync.domain.node import secret_text
from tidesync.migrations import migrate_postgres
from tidesync.ship.state import SQLiteShipState
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]

TABLES: dict[str, str] = {
    "accounts": (
        "CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, owner VARCHAR(40) NOT NULL,"
        " balance DECIMAL(12,2) NOT NULL, opened DATETIME(6) NOT NULL) ENGINE=InnoDB"),
    "shipments": (
        "CREATE TABLE shipments (id BIGINT NOT NULL PRIMARY KEY, code VARCHAR(32) NOT NULL,"
        " weight DECIMAL(10,3) NULL, eta DATETIME NULL, note VARCHAR(120) NULL) ENGINE=InnoDB"),
    "readings": (
        "CREATE TABLE readings (id INT NOT NULL PRIMARY KEY, sensor VARCHAR(20) NOT NULL,"
        " reading DECIMAL(18,6) NOT NULL, taken DATETIME(3) NOT NULL) ENGINE=InnoDB"),
}
COLUMNS: dict[str, tuple[str, ...]] = {
    "accounts": ("id", "owner", "balance", "opened"),
    "shipments": ("id", "code", "weight", "eta", "note"),
    "readings": ("id", "sensor", "reading", "taken"),
}
EPOCH = dt.datetime(2026, 1, 1)
# What `ship run` and `shore work` write once their signal handlers are in place.
READY_LINES = {"run": "consuming", "work": "running"}


# ----------------------------------------------------------------------------- the ship's writes


@dataclass
class Workload:
    """Seeded random transactions of inserts, updates and deletes on the three tables; counts
    the row changes it makes (each one is one event downstream)."""

    rng: random.Random
    live: dict[str, set[int]] = field(default_factory=lambda: {t: set() for t in TABLES})
    next_id: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 1))
    changes: int = 0

    def values(self, table: str, key: int) -> tuple[Any, ...]:
        rng = self.rng
        moment = EPOCH + dt.timedelta(seconds=rng.randrange(0, 86400 * 365),
                                      microseconds=rng.randrange(0, 1_000_000))
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzäöü✓ ") for _ in range(
            rng.randrange(1, 30)))
        if table == "accounts":
            return (key, text, Decimal(rng.randrange(-10**9, 10**9)) / 100, moment)
        if table == "shipments":
            weight = None if rng.random() < 0.2 else Decimal(rng.randrange(0, 10**7)) / 1000
            eta = None if rng.random() < 0.2 else moment.replace(microsecond=0)
            note = None if rng.random() < 0.3 else text * 3
            return (key, f"S-{key}-{rng.randrange(10**6)}", weight, eta, note)
        return (key, f"sensor-{rng.randrange(50)}", Decimal(rng.randrange(-10**12, 10**12))
                / 10**6, moment.replace(microsecond=moment.microsecond // 1000 * 1000))

    def statement(self, cursor: Any, budget: int) -> int:
        """One statement of at most `budget` row changes; returns how many rows it changed."""
        rng = self.rng
        table = rng.choice(list(TABLES))
        live = self.live[table]
        kind = rng.choices(("insert", "update", "delete"), weights=(5, 4, 1))[0]
        if kind != "insert" and len(live) < 5:
            kind = "insert"
        count = min(budget, rng.randrange(1, 8))
        columns = COLUMNS[table]
        if kind == "insert":
            keys = [self.next_id[table] + i for i in range(count)]
            self.next_id[table] += count
            rows = [self.values(table, key) for key in keys]
            marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
            cursor.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                           + ", ".join([marks] * count), [v for row in rows for v in row])
            live.update(keys)
        else:
            keys = rng.sample(sorted(live), min(count, len(live)))
            marks = ", ".join(["%s"] * len(keys))
            if kind == "delete":
                cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks})", keys)
                live.difference_update(keys)
            elif rng.random() < 0.5:  # the same new values on several rows
                _, *rest = self.values(table, 0)
                sets = ", ".join(f"{c} = %s" for c in columns[1:])
                cursor.execute(f"UPDATE {table} SET {sets} WHERE id IN ({marks})", [*rest, *keys])
            else:  # a value derived from the row itself, one statement per row
                for key in keys:
                    column = columns[2]
                    cursor.execute(f"UPDATE {table} SET {column} = COALESCE({column}, 0) + 1"
                                   " WHERE id = %s", (key,))
        if kind != "update":
            assert cursor.rowcount == len(keys), (kind, table, cursor.rowcount, keys)
        self.changes += len(keys)
        return len(keys)

    def write(self, connection: Any, total: int, pause: Callable[[], None] = lambda: None
              ) -> None:
        """Transactions of 1..40 row changes until `total` rows changed."""
        while self.changes < total:
            connection.begin()
            with connection.cursor() as cursor:
                target = min(total, self.changes + self.rng.randrange(1, 41))
                while self.changes < target:
                    self.statement(cursor, target - self.changes)
            connection.commit()
            pause()


# ----------------------------------------------------------------------------- the running parts


@dataclass
class Pipeline:
    ship_database: str
    ship_conn: Any
    shore_conn: Any
    capture_config: Config
    ship_config: ShipConfig
    client_env: dict[str, str]
    worker_env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)

    def start_client(self, *args: str) -> subprocess.Popen[bytes]:
        return self._start(self.client_env, "ship", "run", *args)

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        return self._start(self.worker_env, "shore", "work", "--worker-id", name)

    def _start(self, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        # Output goes to a file: a pipe nobody reads could fill up and stall the process.
        log = self.log_dir / f"{len(self.processes):02d}-{args[0]}-{args[1]}.log"
        with log.open("wb") as output:
            process = subprocess.Popen([sys.executable, "-m", "tidesync", *args], env=env,
                                       cwd=REPOSITORY, stdout=output, stderr=subprocess.STDOUT)
        self.processes.append(process)
        self.logs[process.pid] = log
        return process

    def output(self, process: subprocess.Popen[bytes]) -> str:
        return self.logs[process.pid].read_text(errors="replace")[-3000:]

    def assert_running(self, process: subprocess.Popen[bytes]) -> None:
        assert process.poll() is None, self.output(process)

    def stop(self, process: subprocess.Popen[bytes], timeout: float = 60) -> int:
        """SIGTERM once the process has set up its signal handlers (a process still starting
        would die of the signal), and SIGKILL if it has not ended within `timeout`."""
        ready = READY_LINES[process.args[4]]  # type: ignore[index]
        log = self.logs[process.pid]
        wait_until(lambda: process.poll() is not None or ready in log.read_text(errors="replace"),
                   60, f"{process.args[4]!r} to start")  # type: ignore[index]
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            with suppress(subprocess.TimeoutExpired):
                process.wait(10)


@contextmanager
def pipeline(pg_database: Any, ship_mariadb: Any, shore_mariadb: Any, kafka_broker: Any,
             make_mariadb_database: Callable[[Any], str], tmp_path: Path,
             **ship_settings: Any) -> Iterator[Pipeline]:
    """Ship and shore databases of the same name with the tables enabled, a registered node,
    the shore server running in this process; the capture, client and worker are started by
    the test. Everything started is stopped (killed) on the way out."""
    database = make_mariadb_database(ship_mariadb)
    ship_node = f"e2e-ship-{secrets.token_hex(4)}"
    ship_conn = ship_mariadb.connect(database=database, autocommit=True)
    shore_mariadb.create_database(database)  # the shore applier routes by database name
    shore_conn = shore_mariadb.connect(database=database, autocommit=True)
    state: Pipeline | None = None
    try:
        for conn, node in ((ship_conn, ship_node), (shore_conn, "shore")):
            with conn.cursor() as cursor:
                for ddl in TABLES.values():
                    cursor.execute(ddl)
            for table in TABLES:
                enable_mysql_table(conn, database, table, node)
        migrate_postgres(pg_database.dsn)
        config = make_config(pg_database)
        clock = WallClock()
        with node_service(config) as service:
            issued = service.register(ship_node, ACTOR, clock())
        logical = f"e2e{secrets.token_hex(4)}"
        capture_config = Config(capture=CaptureConfig(
            source=CaptureSource.MYSQL, logical_name=logical,
            kafka_bootstrap_servers=kafka_broker.bootstrap_servers, topic_partitions=3,
            position_path=str(tmp_path / "capture-position.sqlite"), batch_max_records=500,
            flush_interval_ms=100, mysql_host=ship_mariadb.host, mysql_port=ship_mariadb.port,
            mysql_user=ship_mariadb.user, mysql_password=ship_mariadb.password,
            server_id=9000 + secrets.randbelow(900), databases=(database,)))
        with running(config, clock) as url:  # type: ignore[arg-type]
            ship = ShipConfig(
                node_id=ship_node, shore_url=url, secret=secret_text(issued.secret),
                state_path=str(tmp_path / "ship-state.sqlite"),
                kafka_bootstrap_servers=kafka_broker.bootstrap_servers,
                topic_pattern=rf"^sync\.cdc\.{logical}\.",
                source_connector_id=f"{logical}-builtin",
                bidirectional_tables=tuple(f"{database}.{t}" for t in TABLES),
                receipts_interval_seconds=1, heartbeat_interval_seconds=5, **ship_settings)
            state = Pipeline(database, ship_conn, shore_conn, capture_config, ship,
                             client_env(ship),
                             worker_env(pg_database, shore_mariadb,
                                        TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB="500",
                                        TIDESYNC_SHORE__APPLY_CHUNK_SIZE="250"),
                             tmp_path)
            try:
                yield state
            finally:
                state.stop_all()
    finally:
        ship_conn.close()
        shore_conn.close()
        drop = shore_mariadb.connect()
        try:
            with drop.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        finally:
            drop.close()


def caught_up(config: Config, ship_conn: Any) -> bool:
    """The capture has saved the position the ship's binlog has now."""
    store = SQLitePositionStore(config.capture.position_path)
    try:
        saved = store.saved(f"sync.cdc.{config.capture.logical_name}")
    finally:
        store.close()
    with ship_conn.cursor() as cursor:
        cursor.execute("SELECT @@gtid_binlog_pos")
        (binlog_pos,) = cursor.fetchone()
    return saved is not None and saved[1].gtid_state == binlog_pos


def catch_up(config: Config, timeout: float = 60) -> None:
    """One capture run until it has published what the binlog holds now (bounded in time)."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_capture(config, until_caught_up=True)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    thread = threading.Thread(target=run, name="capture-catch-up", daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "capture did not catch up in time"
    assert not failures, failures


@contextmanager
def capturing(config: Config, ship_conn: Any) -> Iterator[None]:
    """The binlog capture following the ship database in a thread. On the way out it is
    stopped once it has caught up (a stop in the middle of a transaction would publish its
    first rows again on the next start, as at-least-once delivery allows) and run once more
    until caught up, so every committed change is in the topics exactly once."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def follow() -> None:
        try:
            run_capture(config, stop=stop)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    catch_up(config)  # saves the current position: the start
    thread = threading.Thread(target=follow, name="capture", daemon=True)
    thread.start()
    try:
        yield
        wait_until(lambda: bool(failures) or caught_up(config, ship_conn), 60,
                   "the capture to catch up")
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive(), "capture did not stop"
    assert not failures, failures
    catch_up(config)
    store = SQLitePositionStore(config.capture.position_path)
    try:
        assert store.saved(f"sync.cdc.{config.capture.logical_name}") is not None
    finally:
        store.close()


def received(pg: Any, state: Pipeline) -> int:
    (count,) = pg.execute("SELECT count(*) FROM inbox_event WHERE origin_node_id = %s",
                          (state.ship_config.node_id,)).fetchone()
    return int(count)


def applied(state: Pipeline) -> int:
    with state.shore_conn.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM `{state.ship_database}`.`_sync_applied`")
        return int(cursor.fetchone()[0])


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def finish(state: Pipeline, timeout: float = 90) -> None:
    """The client once more until idle (every event terminal, offsets committed) with the worker
    running, then the worker stopped cleanly."""
    worker = state.start_worker("w-final")
    final = state.start_client("--until-idle", "--timeout", str(timeout))
    try:
        final.wait(timeout + 30)
    except subprocess.TimeoutExpired:
        final.kill()
        final.wait(10)
    assert final.returncode == 0, (final.returncode, state.output(final))
    assert state.stop(worker) == 0, (worker.returncode, state.output(worker))


# ----------------------------------------------------------------------------- the checks


def table_rows(conn: Any, table: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(COLUMNS[table])}, _sync_revision FROM {table}"
                       " ORDER BY id")
        return list(cursor.fetchall())


def ledger(conn: Any, database: str) -> list[str]:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT event_id FROM `{database}`.`_sync_applied`")
        return [str(row[0]) for row in cursor.fetchall()]


def committed_and_ends(bootstrap: str, group: str, topics: list[str]
                       ) -> tuple[dict[tuple[str, int], tuple[int, int]], int]:
    """Per (topic, partition): the group's committed offset and the end of the partition (one
    past its last record, read back from the broker); and how many change records (not
    tombstones) the topics hold."""
    records = read_records(bootstrap, topics, idle_seconds=1.0, timeout=60)
    ends: dict[tuple[str, int], int] = {}
    for record in records:
        key = (record.topic, record.partition)
        ends[key] = max(ends.get(key, 0), record.offset + 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in topics:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            for tp in consumer.committed([TopicPartition(topic, p) for p in partitions],
                                         timeout=10):
                found[(topic, tp.partition)] = (tp.offset, ends.get((topic, tp.partition), 0))
    finally:
        consumer.close()
    return found, sum(1 for record in records if record.value is not None)


def assert_arrived_identically(state: Pipeline, workload: Workload) -> None:
    for table in TABLES:
        ship_rows = table_rows(state.ship_conn, table)
        shore_rows = table_rows(state.shore_conn, table)
        assert len(ship_rows) == len(workload.live[table]), table
        assert len(shore_rows) == len(ship_rows), (table, len(shore_rows), len(ship_rows))
        for ship_row, shore_row in zip(ship_rows, shore_rows, strict=True):
            assert shore_row == ship_row, (table, ship_row, shore_row)

    applied = ledger(state.shore_conn, state.ship_database)
    assert len(set(applied)) == len(applied), "an event was applied twice"
    assert len(applied) == workload.changes, (len(applied), workload.changes)

    ship = state.ship_config
    store = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id, read_only=True)
    try:
        assert store.state_counts() == {"TERMINAL": workload.changes}
        watermarks = store.watermarks()
    finally:
        store.close()
    logical = state.capture_config.capture.logical_name
    topics = [f"sync.cdc.{logical}.{state.ship_database}.{t}" for t in TABLES]
    offsets, change_records = committed_and_ends(ship.kafka_bootstrap_servers, ship.group_id,
                                                 topics)
    assert change_records == workload.changes  # captured once each
    assert len(offsets) == len(watermarks) == 3 * len(TABLES)
    for key, (committed, end) in offsets.items():
        assert end > 0 and committed == end, (key, committed, end)


# ----------------------------------------------------------------------------- the tests


def test_ten_thousand_changes_arrive_identically(pg_database, ship_mariadb, shore_mariadb,
                                                  kafka_broker, make_mariadb_database,
                                                  tmp_path):
    workload = Workload(random.Random(20261130))
    with pipeline(pg_database, ship_mariadb, shore_mariadb, kafka_broker,
                  make_mariadb_database, tmp_path) as state:
        with capturing(state.capture_config, state.ship_conn):
            # The client and the worker run while the ship writes.
            client = state.start_client()
            worker = state.start_worker("w-1")
            workload.write(state.ship_conn, 10_000)
        for process in (client, worker):
            state.assert_running(process)
            assert state.stop(process) == 0, state.output(process)
        finish(state)
        assert_arrived_identically(state, workload)


def test_sigkill_of_client_and_worker_at_random_moments(pg_database, ship_mariadb,
                                                         shore_mariadb, kafka_broker,
                                                         make_mariadb_database, tmp_path):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    print(f"random seed {seed}")  # shown with a failure: the run can be repeated
    workload = Workload(random.Random(seed + 1))
    total = 3_000
    # Small batches and a slow writer spread the work so the kills land mid-stream.
    with pipeline(pg_database, ship_mariadb, shore_mariadb, kafka_broker,
                  make_mariadb_database, tmp_path, batch_max_events=50) as state:
        state.worker_env.update(TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB="100",
                                TIDESYNC_SHORE__APPLY_CHUNK_SIZE="50")
        writer_failures: list[BaseException] = []

        def write() -> None:
            try:
                workload.write(state.ship_conn, total, pause=lambda: time.sleep(0.01))
            except BaseException as error:  # reported by the test thread
                writer_failures.append(error)

        # Each kill waits for a random share of the changes to have reached the shore inbox
        # (client) or been applied (worker), so every kill lands in the middle of the stream.
        victims = ["client"] * 5 + ["worker"] * 5
        rng.shuffle(victims)
        shares = sorted(rng.uniform(0.05, 0.85) for _ in victims)
        at_kill: list[tuple[str, int, int]] = []
        with capturing(state.capture_config, state.ship_conn), \
                pg_database.connect(autocommit=True) as pg:
            writer = threading.Thread(target=write, name="ship-writes", daemon=True)
            writer.start()
            client = state.start_client()
            worker = state.start_worker("w-0")
            for number, (victim, share) in enumerate(zip(victims, shares, strict=True), 1):
                progress = (lambda: received(pg, state)) if victim == "client" else (
                    lambda: applied(state))
                wait_until(lambda wanted=share * total, progress=progress: progress() >= wanted,
                           90, f"{share:.0%} of the changes before killing the {victim}")
                time.sleep(rng.uniform(0.0, 0.1))
                process = client if victim == "client" else worker
                state.assert_running(process)
                process.send_signal(signal.SIGKILL)
                assert process.wait(10) == -signal.SIGKILL
                at_kill.append((victim, received(pg, state), applied(state)))
                if victim == "client":
                    client = state.start_client()
                else:
                    worker = state.start_worker(f"w-{number}")
            writer.join(120)
            assert not writer.is_alive() and not writer_failures, (seed, writer_failures)
        print(f"(victim, received, applied) at each kill: {at_kill}")
        mid_stream = [kill for kill in at_kill if kill[2] < workload.changes]
        assert len(mid_stream) >= 8, (seed, at_kill)
        for process in (client, worker):
            state.assert_running(process)
            assert state.stop(process) == 0, state.output(process)
        time.sleep(1.2)  # leases of killed workers run out
        finish(state)
        assert_arrived_identically(state, workload)
