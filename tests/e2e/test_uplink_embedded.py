"""One-way uplink end to end on the embedded default: signed uploads over HTTP into the shore's
embedded PostgreSQL event store (a private server in the data directory), `tidesync shore work`
applying them to a SQLite business database, receipts pulled back over HTTP by cursor. Needs no
external service.

Duplicates, a replayed request and a forged origin are thrown in; at the end the ledger, the
rows and the receipts agree that every event was applied exactly once. The worker also runs as
the real command, killed with SIGKILL between the target commit and the finalize."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from tests.e2e.test_uplink import pull_all_receipts, upload_with_mishaps, workload
from tests.integration.shore_support import ShipLog, inbox_states, pg_rows, receive
from tests.integration.sqlite_target import (
    SQLITE_ITEMS_DDL,
    make_sqlite_target,
    target_items,
    target_ledger,
)
from tests.integration.sync_client import SyncClient
from tests.integration.test_ingress import (
    ACTOR,
    MASTER_KEY,
    FakeClock,
    node_service,
    running,
)
from tidesync.bootstrap.event_store import postgres_conninfo
from tidesync.bootstrap.shore import build_worker
from tidesync.bootstrap.target import build_target_applier
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShoreConfig, TargetConfig
from tidesync.domain.change_event import ChangeEvent
from tidesync.embedded_store import stop_server
from tidesync.migrations import migrate_postgres
from tidesync.shore.processor import ProcessorSettings
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.wire import sync_pb2 as pb

REPOSITORY = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.services


def embedded_config(data_dir: Path) -> Config:
    return Config(
        shore=ShoreConfig(master_key=MASTER_KEY, database_pool_size=4,
                          database_timeout_seconds=2, node_requests_per_second=1000,
                          node_request_burst=1000),
        event_store=EventStoreConfig(kind=EventStoreKind.EMBEDDED, embedded_dir=str(data_dir)))


@contextlib.contextmanager
def embedded_shore(data_dir: Path) -> Iterator[ConnectionPool]:
    """The embedded event store's database (migrated), stopped when the test is done."""
    conninfo = postgres_conninfo(embedded_config(data_dir).event_store)
    migrate_postgres(conninfo)
    pool = ConnectionPool(conninfo, min_size=1, max_size=2, open=True)
    try:
        yield pool
    finally:
        pool.close()
        stop_server(data_dir)


def test_uplink_applies_every_event_exactly_once_on_the_embedded_default(tmp_path: Path) -> None:
    business = make_sqlite_target(tmp_path / "business.sqlite", "shore")
    clock = FakeClock()
    config = dataclasses.replace(
        embedded_config(tmp_path / "pg"),
        target=TargetConfig(node_id="shore", sqlite_path=str(business)))
    with embedded_shore(tmp_path / "pg"):
        uplink_end_to_end(config, clock, business)


def uplink_end_to_end(config: Config, clock: FakeClock, business: Path) -> None:
    node_id = f"e2e-{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    ship = ShipLog(node_id, "shipdb")
    events, batches = workload(ship)

    with running(config, clock) as url:
        client = SyncClient(url, node_id, secret, clock)
        upload_with_mishaps(client, node_id, batches, ship.database)

        applier = build_target_applier(config.target)
        assert isinstance(applier, SQLiteTargetApplier)
        worker, close = build_worker(config, applier, settings=ProcessorSettings(chunk_size=10))
        try:
            while worker.run_once() > 0:
                pass
        finally:
            close()

        receipts = pull_all_receipts(client)
    expected = {e.event_id.bytes for e in events}
    assert [r.event_id for r in receipts if r.event_id in expected] == [
        r.event_id for r in receipts]
    assert sorted(r.event_id for r in receipts) == sorted(expected)  # each exactly once
    assert {pb.EventResultCode.Name(r.result) for r in receipts} == {"APPLIED"}

    assert sorted(target_ledger(business)) == sorted(str(e.event_id) for e in events)
    rows = target_items(business)
    assert [(k, r[0], r[1], Decimal(str(r[2]))) for k, r in sorted(rows.items())] == [
        (k, f"part-{k}", k * 2 if k <= 20 else k, Decimal(f"{k}.25")) for k in range(1, 35)]
    assert all(r[3] == ship.rows[k][1].text for k, r in rows.items())


def worker_env(data_dir: Path, business: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("TIDESYNC_")}
    env.update({
        "TIDESYNC_EVENT_STORE__KIND": "embedded",
        "TIDESYNC_EVENT_STORE__EMBEDDED_DIR": str(data_dir),
        "TIDESYNC_TARGET__SQLITE_PATH": str(business),
        "TIDESYNC_TARGET__NODE_ID": "shore",
        "TIDESYNC_SHORE__APPLY_LEASE_SECONDS": "1",
        "TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB": "50",
        **extra,
    })
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidesync", *args], env=env, cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=120)


def test_shore_work_on_the_embedded_default_recovers_from_sigkill_after_the_target_commit(
        tmp_path: Path) -> None:
    business = tmp_path / "business.sqlite"
    events_file = tmp_path / "pg"
    with contextlib.closing(sqlite3.connect(business)) as conn:
        conn.execute(SQLITE_ITEMS_DDL)
    enabled = run_cli(worker_env(events_file, business), "target", "enable", "items")
    assert enabled.returncode == 0 and "main.items: enabled" in enabled.stdout, enabled.stderr
    ship = ShipLog("ship-crash", "shipdb")
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 121)]
    events += [ship.update(k, qty=k * 10) for k in range(1, 61)]
    with embedded_shore(events_file) as pool:
        receive(pool, ship.node_id, events)
        sigkill_and_recover(pool, events_file, business, ship, events)


def sigkill_and_recover(pool: ConnectionPool, events_file: Path, business: Path, ship: ShipLog,
                        events: list[ChangeEvent]) -> None:
    killed = run_cli(worker_env(events_file, business,
                                TIDESYNC_FAILPOINTS="after_target_commit=kill"),
                     "shore", "work", "--once", "--worker-id", "w-1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(target_ledger(business)) == 50  # the first job reached the target ...
    states = inbox_states(pool, ship.node_id)
    assert all(state != "TERMINAL" for state, _ in states.values())  # ... not the store

    listed = run_cli(worker_env(events_file, business), "jobs", "list")
    assert listed.returncode == 0, listed.stderr
    assert "ship-crash" in listed.stdout and "PENDING" in listed.stdout

    time.sleep(1.5)  # let the dead worker's lease expire
    recovered = run_cli(worker_env(events_file, business), "shore", "work", "--once",
                        "--worker-id", "w-2")
    assert recovered.returncode == 0, recovered.stderr

    ledger = target_ledger(business)
    assert len(ledger) == len(set(ledger)) == len(events)  # each applied exactly once
    rows = target_items(business)
    assert [(k, r[1]) for k, r in sorted(rows.items())] == [
        (k, k * 10 if k <= 60 else k) for k in range(1, 121)]
    assert set(inbox_states(pool, ship.node_id).values()) == {("TERMINAL", "APPLIED")}
    assert pg_rows(pool, "SELECT count(DISTINCT event_id), count(*) FROM receipt"
                         " WHERE origin_node_id = %s", (ship.node_id,)) == [
        (len(events), len(events))]
    taken_over = pg_rows(pool, "SELECT count(*) FROM apply_jobs_events WHERE topic LIKE %s",
                         ("%ApplyJob.TakenOver",))
    assert taken_over[0][0] >= 1
    listed = run_cli(worker_env(events_file, business), "jobs", "list")
    assert listed.stdout.strip() == "every received event is applied"
