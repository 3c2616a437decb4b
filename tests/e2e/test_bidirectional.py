"""Two ships and the shore, both ways, on the real parts: three MariaDB servers with the
tables enabled, built-in binlog capture of each into the broker, `tidesync ship run` for each
ship (uploads and shore commands), `tidesync shore work` (apply, shore CDC, arbitration) and
the shore server. Shore edits reach both ships once and come back as nothing; concurrent edits
of one row become one conflict that each policy resolves to the same row and revision in all
three databases; a stale decision expires and reopens; a ship killed between applying a
command and acknowledging it loses and repeats nothing; a parked conflict holds no other row.
"""

from __future__ import annotations

import datetime as dt
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.clocks import WallClock, rounded_now
from tests.e2e.test_ship_to_shore import REPOSITORY, wait_until
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tests.integration.test_ship_client import client_env
from tests.integration.test_shore_work_crash import worker_env
from tidesync.bootstrap.capture import run_capture
from tidesync.capture.settings import CaptureConfig, CaptureSource
from tidesync.config import Config, ShipConfig
from tidesync.domain.node import secret_text
from tidesync.migrations import migrate_postgres
from tidesync.ship.state import SQLiteShipState
from tidesync.shore.worker import ShoreApps
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

TABLES = ("cargo_shore_wins", "cargo_lww", "cargo_manual")
DDL = ("CREATE TABLE {} (id INT NOT NULL PRIMARY KEY, item VARCHAR(40) NOT NULL,"
       " qty INT NOT NULL, changed_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
ROW = "id, item, qty, changed_at, _sync_revision"
# Business times a month in the past, whatever the date: never ahead of any clock (skew).
T0 = (rounded_now() - dt.timedelta(days=30)).replace(tzinfo=None)


@dataclass
class Node:
    name: str
    conn: Any
    env: dict[str, str] = field(default_factory=dict)
    config: ShipConfig | None = None


@dataclass
class Fleet:
    database: str
    shore: Node
    ships: dict[str, Node]
    pg_dsn: str
    worker_env: dict[str, str]
    cli_env: dict[str, str]
    log_dir: Path
    apps: Any = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def start(self, name: str, env: dict[str, str], *args: str) -> None:
        log = self.log_dir / f"{name}-{len(self.logs)}.log"
        with log.open("wb") as output:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "tidesync", *args], env=env, cwd=REPOSITORY,
                stdout=output, stderr=subprocess.STDOUT)
        self.logs[name] = log

    def start_ship(self, name: str, **extra: str) -> None:
        self.start(name, {**self.ships[name].env, **extra}, "ship", "run")

    def start_worker(self) -> None:
        self.start("worker", self.worker_env, "shore", "work", "--worker-id", "w-e2e")

    def output(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")[-4000:]

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def assert_running(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, (name, self.output(name))

    def stop_all(self) -> None:
        for name in list(self.processes):
            with suppress(Exception):
                self.stop(name)

    def rows(self, node: Node, table: str) -> list[tuple[Any, ...]]:
        with node.conn.cursor() as cursor:
            cursor.execute(f"SELECT {ROW} FROM `{self.database}`.`{table}` ORDER BY id")
            return list(cursor.fetchall())

    def row(self, node: Node, table: str, key: int) -> tuple[Any, ...] | None:
        with node.conn.cursor() as cursor:
            cursor.execute(f"SELECT {ROW} FROM `{self.database}`.`{table}` WHERE id = %s",
                           (key,))
            return cursor.fetchone()

    def all_nodes(self) -> list[Node]:
        return [self.shore, *self.ships.values()]

    def same_everywhere(self, table: str, key: int | None = None) -> bool:
        views = [self.rows(n, table) if key is None else self.row(n, table, key)
                 for n in self.all_nodes()]
        return all(view == views[0] for view in views)

    def execute(self, node: Node, sql: str, params: tuple[Any, ...] = ()) -> None:
        with node.conn.cursor() as cursor:
            cursor.execute(f"USE `{self.database}`")
            cursor.execute(sql, params)

    def pg(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.pg_dsn) as conn:
            return conn.execute(sql, params).fetchall()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidesync", *args], env=self.cli_env,
                              cwd=REPOSITORY, capture_output=True, text=True, timeout=120)


class Captures:
    """Built-in binlog capture of each server into the broker, one thread each."""

    def __init__(self, configs: list[Config]) -> None:
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(config,), daemon=True,
                                         name=f"capture-{config.capture.logical_name}")
                        for config in configs]

    def _run(self, config: Config) -> None:
        try:
            run_capture(config, stop=self.stop)
        except BaseException as error:  # reported by the test thread
            self.failures.append(error)

    def __enter__(self) -> Captures:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not self.failures, self.failures


@contextmanager
def fleet(pg_database: Any, servers: dict[str, Any], kafka_broker: Any, tmp_path: Path,
          policies: str, **shore_settings: Any) -> Iterator[Fleet]:
    token = secrets.token_hex(4)
    database = f"fleet_{token}"
    names = {"shore": "shore", "a": f"ship-a-{token}", "b": f"ship-b-{token}"}
    conns = {}
    for key, server in servers.items():
        server.create_database(database)
        conns[key] = server.connect(database=database, autocommit=True)
        with conns[key].cursor() as cursor:
            for table in TABLES:
                cursor.execute(DDL.format(table))
        for table in TABLES:
            enable_mysql_table(conns[key], database, table, names[key])
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database, **shore_settings)
    clock = WallClock()
    secrets_by_node = {}
    with node_service(config) as service:
        for key in ("a", "b"):
            secrets_by_node[key] = secret_text(service.register(names[key], ACTOR,
                                                                clock()).secret)
    bootstrap = kafka_broker.bootstrap_servers
    logical = {key: f"{key}{token}" for key in servers}
    captures = [Config(capture=CaptureConfig(
        source=CaptureSource.MYSQL, logical_name=logical[key], kafka_bootstrap_servers=bootstrap,
        position_path=str(tmp_path / f"capture-{key}.sqlite"), flush_interval_ms=50,
        mysql_host=server.host, mysql_port=server.port, mysql_user=server.user,
        mysql_password=server.password, server_id=9000 + secrets.randbelow(900),
        databases=(database,))) for key, server in servers.items()]
    tables = tuple(f"{database}.{t}" for t in TABLES)
    try:
        for capture in captures:  # start positions: now
            run_capture(capture, until_caught_up=True)
        with running(config, clock) as url:  # type: ignore[arg-type]
            ships = {}
            for key in ("a", "b"):
                server = servers[key]
                ship = ShipConfig(
                    node_id=names[key], shore_url=url, secret=secrets_by_node[key],
                    state_path=str(tmp_path / f"ship-{key}.sqlite"),
                    kafka_bootstrap_servers=bootstrap,
                    topic_pattern=rf"^sync\.cdc\.{logical[key]}\.",
                    source_connector_id=f"{logical[key]}-builtin", bidirectional_tables=tables,
                    receipts_interval_seconds=1, heartbeat_interval_seconds=5,
                    commands_interval_seconds=1)
                env = client_env(ship)
                env.update(TIDESYNC_SHIP_TARGET__KIND="mysql",
                           TIDESYNC_SHIP_TARGET__HOST=server.host,
                           TIDESYNC_SHIP_TARGET__PORT=str(server.port),
                           TIDESYNC_SHIP_TARGET__USER=server.user,
                           TIDESYNC_SHIP_TARGET__PASSWORD=server.password or "",
                           TIDESYNC_SHIP_TARGET__DATABASE=database)
                ships[key] = Node(names[key], conns[key], env, ship)
            work_env = worker_env(
                pg_database, servers["shore"],
                TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                TIDESYNC_DOWNLINK__TOPIC_PATTERN=rf"^sync\.cdc\.{logical['shore']}\.",
                TIDESYNC_DOWNLINK__CONSUMER_GROUP=f"shore-cdc-{token}",
                TIDESYNC_DOWNLINK__SOURCE_CONNECTOR_ID=f"{logical['shore']}-builtin",
                TIDESYNC_DOWNLINK__BIDIRECTIONAL_TABLES=",".join(tables),
                TIDESYNC_DOWNLINK__NODES=f"{names['a']},{names['b']}",
                TIDESYNC_CONFLICTS__POLICIES=policies.format(db=database),
                TIDESYNC_SHORE__APPLY_LEASE_SECONDS="5")
            apps = ShoreApps.open(pg_database.eventsourcing_env())
            state = Fleet(database, Node("shore", conns["shore"]), ships, pg_database.dsn,
                          work_env, work_env, tmp_path, apps)
            with Captures(captures):
                try:
                    yield state
                finally:
                    state.stop_all()
                    apps.close()
    finally:
        for conn in conns.values():
            with suppress(Exception), conn.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
            conn.close()


POLICIES = ("{db}.cargo_shore_wins=SHORE_WINS, {db}.cargo_lww=LAST_WRITER_WINS:changed_at,"
            " {db}.cargo_manual=MANUAL")


@pytest.fixture
def running_fleet(pg_database, ship_mariadb, second_ship_mariadb, shore_mariadb, kafka_broker,
                  tmp_path):
    servers = {"shore": shore_mariadb, "a": ship_mariadb, "b": second_ship_mariadb}
    with fleet(pg_database, servers, kafka_broker, tmp_path, POLICIES) as state:
        yield state


def eventually(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    wait_until(condition, timeout, what)


def uploads(state: Fleet, node: Node) -> int:
    (count,) = state.pg("SELECT count(*) FROM inbox_event WHERE origin_node_id = %s",
                        (node.name,))[0]
    return int(count)


def commands(state: Fleet, node: Node, kind: str = "ROW_CHANGE") -> int:
    (count,) = state.pg("SELECT count(*) FROM downlink_command WHERE node_id = %s AND kind = %s",
                        (node.name, kind))[0]
    return int(count)


def ledger(state: Fleet, node: Node) -> list[str]:
    with node.conn.cursor() as cursor:
        cursor.execute(f"SELECT event_id FROM `{state.database}`.`_sync_applied`")
        return [str(row[0]) for row in cursor.fetchall()]


def case_of(state: Fleet, table: str, states: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """(conflict_id, state, case) of the cases on `table` in `states`: the conflict center
    view finds them, the case streams say where they stand."""
    rows = state.pg("SELECT conflict_id FROM conflict_center WHERE database = %s"
                    " AND table_name = %s", (state.database, table))
    found = []
    for (conflict_id,) in rows:
        case = state.apps.conflicts.get_case(conflict_id)
        if case.state.value in states:
            found.append((case.id, case.state.value, case))
    return found


# ----------------------------------------------------------------------------- the tests


def test_shore_edits_reach_both_ships_once_and_are_not_echoed(running_fleet):
    state = running_fleet
    a, b = state.ships["a"], state.ships["b"]
    state.start_worker()
    # Ship A dies (SIGKILL) right after applying its first command, before acknowledging it.
    state.start_ship("a", TIDESYNC_FAILPOINTS="ship_after_command_apply=kill")
    state.start_ship("b")
    for key in range(1, 21):
        state.execute(state.shore, "INSERT INTO cargo_manual (id, item, qty, changed_at)"
                      " VALUES (%s, %s, %s, %s)", (key, f"crate {key}", key, T0))
    state.execute(state.shore, "UPDATE cargo_manual SET qty = qty + 100 WHERE id <= 5")
    state.execute(state.shore, "DELETE FROM cargo_manual WHERE id IN (19, 20)")
    shore_changes = 20 + 5 + 2

    eventually(lambda: state.processes["a"].poll() is not None, "ship A to die at the failpoint")
    assert state.processes["a"].returncode == -9, state.output("a")
    state.processes.pop("a")
    state.start_ship("a")
    eventually(lambda: state.same_everywhere("cargo_manual")
               and len(state.rows(state.shore, "cargo_manual")) == 18,
               "the shore's rows on both ships")
    state.assert_running()

    for ship in (a, b):
        assert commands(state, ship) == shore_changes
        applied = ledger(state, ship)
        assert len(applied) == len(set(applied)) == shore_changes  # each exactly once
    # Ship B writes locally: it goes up once; the shore applies it and echoes nothing back.
    state.execute(b, "UPDATE cargo_manual SET qty = 7 WHERE id = 10")
    eventually(lambda: state.row(state.shore, "cargo_manual", 10)
               == state.row(b, "cargo_manual", 10), "ship B's edit on shore")
    time.sleep(3)  # long enough for an echo to show, if there were one
    assert uploads(state, a) == 0  # nothing ship A applied went back up
    assert uploads(state, b) == 1  # only ship B's own edit
    assert commands(state, a) == commands(state, b) == shore_changes
    store = SQLiteShipState(a.config.state_path, a.name, a.config.group_id, read_only=True)
    try:
        counts = store.command_counts()
    finally:
        store.close()
    assert counts.get("COMMAND_ALREADY_APPLIED", 0) >= 1, counts  # the killed one, re-pulled
    assert sum(counts.values()) >= shore_changes
    state.assert_running()


def concurrent_edit(state: Fleet, table: str, key: int, ship_qty: int, shore_qty: int,
                    ship_time: dt.datetime, shore_time: dt.datetime) -> None:
    """Row `key` reaches both ships; ship A, offline, and the shore then edit it from the same
    revision; ship A comes back."""
    state.execute(state.shore, f"INSERT INTO {table} (id, item, qty, changed_at)"
                               " VALUES (%s, 'hull', 1, %s)", (key, T0))
    eventually(lambda: state.same_everywhere(table, key)
               and state.row(state.ships["a"], table, key) is not None, f"{table} row out")
    state.stop("a")
    state.execute(state.ships["a"], f"UPDATE {table} SET qty = %s, changed_at = %s WHERE id = %s",
                  (ship_qty, ship_time, key))
    state.execute(state.shore, f"UPDATE {table} SET qty = %s, changed_at = %s WHERE id = %s",
                  (shore_qty, shore_time, key))
    state.start_ship("a")


def test_concurrent_edits_become_one_conflict_resolved_by_each_policy(running_fleet):
    state = running_fleet
    state.start_worker()
    state.start_ship("a")
    state.start_ship("b")
    later, earlier = T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=1)
    concurrent_edit(state, "cargo_shore_wins", 1, 11, 22, later, earlier)
    concurrent_edit(state, "cargo_lww", 1, 11, 22, later, earlier)  # the ship wrote later
    concurrent_edit(state, "cargo_manual", 1, 11, 22, later, earlier)

    # Manual: a person replaces the row with a value of their own.
    eventually(lambda: bool(case_of(state, "cargo_manual", ("PENDING_MANUAL",))),
               "the manual conflict to wait for a person")
    (conflict_id, _, _), = case_of(state, "cargo_manual", ("PENDING_MANUAL",))
    listing = state.cli("conflicts", "list", "--state", "PENDING_MANUAL")
    assert listing.returncode == 0 and str(conflict_id) in listing.stdout, listing.stdout
    decided = state.cli("conflicts", "decide", str(conflict_id), "--side", "REPLACEMENT",
                        "--reason", "counted on the quay", "--actor", "alice",
                        "--set", "id=1", "--set", "item=hull", "--set", "qty=33",
                        "--set", f"changed_at={T0 + dt.timedelta(hours=1):%Y-%m-%dT%H:%M}+00:00")
    assert decided.returncode == 0, decided.stderr

    expected_qty = {"cargo_shore_wins": 22, "cargo_lww": 11, "cargo_manual": 33}
    for table, qty in expected_qty.items():
        eventually(lambda table=table: state.same_everywhere(table, 1)
                   and bool(case_of(state, table, ("ACKNOWLEDGED",))),
                   f"{table}: one row everywhere and the case acknowledged")
        row = state.row(state.shore, table, 1)
        assert row is not None and row[2] == qty, (table, row)
        assert len(case_of(state, table, ("ACKNOWLEDGED", "DISPATCHED", "DETECTED",
                                          "AUTO_DECIDING", "PENDING_MANUAL", "DECIDED",
                                          "EXPIRED"))) == 1, table  # one conflict, not two
    shown = state.cli("conflicts", "show", str(conflict_id))
    assert shown.returncode == 0 and '"state": "ACKNOWLEDGED"' in shown.stdout, shown.stdout
    assert "counted on the quay" in shown.stdout and "user:alice" in shown.stdout
    state.assert_running()


def test_a_stale_decision_expires_and_the_conflict_reopens(running_fleet):
    state = running_fleet
    state.start_worker()
    state.start_ship("a")
    state.start_ship("b")
    concurrent_edit(state, "cargo_manual", 2, 11, 22, T0, T0)
    eventually(lambda: bool(case_of(state, "cargo_manual", ("PENDING_MANUAL",))),
               "the conflict to wait for a person")
    (conflict_id, _, _), = case_of(state, "cargo_manual", ("PENDING_MANUAL",))
    state.stop("a")  # the decision will find ship A's row changed again
    decided = state.cli("conflicts", "decide", str(conflict_id), "--side", "SHORE",
                        "--reason", "shore count", "--actor", "bob")
    assert decided.returncode == 0, decided.stderr
    state.execute(state.ships["a"], "UPDATE cargo_manual SET qty = 44 WHERE id = 2")
    state.start_ship("a")

    def reopened() -> bool:
        old = [c for c in case_of(state, "cargo_manual", ("EXPIRED",)) if c[0] == conflict_id]
        new = [c for c in case_of(state, "cargo_manual", ("PENDING_MANUAL",))
               if c[0] != conflict_id]
        return bool(old) and bool(new)

    eventually(reopened, "the old case to expire and a new one to open")
    (_, _, old), = [c for c in case_of(state, "cargo_manual", ("EXPIRED",))
                    if c[0] == conflict_id]
    assert old.expiry["reason_code"] == "DECISION_STALE"
    state.assert_running()


def test_a_parked_conflict_does_not_hold_ten_thousand_other_changes(running_fleet):
    state = running_fleet
    a = state.ships["a"]
    state.start_worker()
    state.start_ship("a")
    state.start_ship("b")
    concurrent_edit(state, "cargo_manual", 1, 11, 22, T0, T0)
    eventually(lambda: bool(case_of(state, "cargo_manual", ("PENDING_MANUAL",))),
               "the conflict to be parked for a person")
    before = len(ledger(state, state.shore))
    total = 10_000
    started = time.monotonic()
    for start in range(1000, 1000 + total, 500):
        rows = ", ".join(f"({k}, 'box', {k}, '{T0:%Y-%m-%d %H:%M:%S}')"
                         for k in range(start, start + 500))
        state.execute(a, f"INSERT INTO cargo_manual (id, item, qty, changed_at) VALUES {rows}")

    def applied() -> int:
        return len(ledger(state, state.shore)) - before

    eventually(lambda: applied() >= total, "ten thousand changes on shore", timeout=300)
    parked = case_of(state, "cargo_manual", ("PENDING_MANUAL",))
    elapsed = time.monotonic() - started
    print(f"{applied()} changes applied in {elapsed:.1f} s while conflict "
          f"{parked[0][0] if parked else '-'} stayed PENDING_MANUAL")
    assert len(parked) == 1  # still open, still one
    assert applied() == total
    with state.shore.conn.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM `{state.database}`.cargo_manual WHERE id >= 1000")
        assert cursor.fetchone()[0] == total
    row = state.row(state.shore, "cargo_manual", 1)
    assert row is not None and row[2] == 22  # the conflicted row keeps the shore's value
    state.assert_running()

