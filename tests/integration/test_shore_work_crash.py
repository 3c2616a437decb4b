"""`tidesync shore work` killed with SIGKILL after the MySQL commit and before the PostgreSQL
finalize: a second worker recovers from the ledger and every event is applied exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    inbox_states,
    ledger_ids,
    migrated_pool,
    pg_rows,
    receive,
)
from tidesync.localservices import PostgresDatabase
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """A database of its own: `shore work --once` takes the first pending job it finds, and
    another test's leftover jobs in a shared database would be that job."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


def worker_env(pg_database, shore_mariadb, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "TIDESYNC_EVENT_STORE__KIND": "postgres",
        "TIDESYNC_EVENT_STORE__POSTGRES_HOST": pg_database.host,
        "TIDESYNC_EVENT_STORE__POSTGRES_PORT": str(pg_database.port),
        "TIDESYNC_EVENT_STORE__POSTGRES_DBNAME": pg_database.dbname,
        "TIDESYNC_EVENT_STORE__POSTGRES_USER": pg_database.user,
        "TIDESYNC_EVENT_STORE__POSTGRES_PASSWORD": pg_database.password or "",
        "TIDESYNC_TARGET__HOST": shore_mariadb.host,
        "TIDESYNC_TARGET__PORT": str(shore_mariadb.port),
        "TIDESYNC_TARGET__USER": shore_mariadb.user,
        "TIDESYNC_TARGET__PASSWORD": shore_mariadb.password or "",
        "TIDESYNC_TARGET__NODE_ID": "shore",
        "TIDESYNC_SHORE__APPLY_LEASE_SECONDS": "1",
        "TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB": "50",
    }
    env.pop("TIDESYNC_FAILPOINTS", None)
    env.update(extra)
    return env


def run_worker(env: dict[str, str], worker_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidesync", "shore", "work", "--once", "--worker-id",
         worker_id], env=env, capture_output=True, text=True, timeout=120,
    )


def test_sigkill_between_target_commit_and_finalize(pg_database, shore_mariadb,
                                                    make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")
    ship = ShipLog("ship-crash", database)
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 121)]
    events += [ship.update(k, qty=k * 10) for k in range(1, 61)]

    with migrated_pool(pg_database) as pool:
        receive(pool, ship.node_id, events)
        killed = run_worker(worker_env(pg_database, shore_mariadb,
                                       TIDESYNC_FAILPOINTS="after_target_commit=kill"), "w-1")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        committed = ledger_ids(conn, database)
        assert len(committed) == 50  # the first job reached MySQL ...
        states = inbox_states(pool, ship.node_id)
        assert all(states[e.event_id][0] != "TERMINAL" for e in events)  # ... not PostgreSQL

        time.sleep(1.5)  # let the dead worker's lease expire
        recovered = run_worker(worker_env(pg_database, shore_mariadb), "w-2")
        assert recovered.returncode == 0, recovered.stderr

        assert set(inbox_states(pool, ship.node_id).values()) == {("TERMINAL", "APPLIED")}
        ledger = ledger_ids(conn, database)
        assert len(ledger) == len(set(ledger)) == len(events)  # each applied exactly once
        with conn.cursor() as cursor:
            cursor.execute("SELECT id, qty, _sync_revision FROM items ORDER BY id")
            rows = cursor.fetchall()
        assert [(r[0], r[1]) for r in rows] == [
            (k, k * 10 if k <= 60 else k) for k in range(1, 121)]
        assert all(r[2] == ship.rows[r[0]][1].text for r in rows)
        receipts = pg_rows(pool, "SELECT count(DISTINCT event_id), count(*) FROM receipt"
                                 " WHERE origin_node_id = %s", (ship.node_id,))
        assert receipts == [(len(events), len(events))]
        taken_over = pg_rows(pool, "SELECT count(*) FROM apply_jobs_events"
                                   " WHERE topic LIKE %s", ("%ApplyJob.TakenOver",))
        assert taken_over[0][0] >= 1
    conn.close()


def test_jobs_cli_lists_dead_events_and_refuses_to_replay_malformed(pg_database, shore_mariadb):
    env = worker_env(pg_database, shore_mariadb)
    with migrated_pool(pg_database):
        pass
    listed = subprocess.run([sys.executable, "-m", "tidesync", "jobs", "list", "--node",
                             "nobody-here"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "every received event is applied" in listed.stdout
    refused = subprocess.run([sys.executable, "-m", "tidesync", "jobs", "replay", "--class",
                              "MALFORMED", "--reason", "try"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2
    assert "MALFORMED events are never replayed" in refused.stderr
    unknown = subprocess.run([sys.executable, "-m", "tidesync", "jobs", "replay", "--class",
                              "BOGUS", "--reason", "try"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown class" in unknown.stderr
