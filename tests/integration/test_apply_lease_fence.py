"""Fenced apply leases: a `tidesync shore work` stopped with SIGSTOP past its lease and resumed
after another worker took its partition over cannot clear the new owner's lease, finalize its
stale claim or rewind the partition's next sequence."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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
from tests.integration.test_shore_work_crash import run_worker, worker_env
from tidesync.domain.apply_job import apply_job_id
from tidesync.localservices import PostgresDatabase
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services


def wait_until(condition, what: str) -> None:
    """Poll `condition` (a state, not a duration, is what the test waits for)."""
    for _ in range(1200):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting: {what}")


def is_stopped(process: subprocess.Popen[str]) -> bool:
    if process.poll() is not None:
        return False
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def lease_expired(pool) -> bool:
    rows = pg_rows(pool, "SELECT lease_expires_at < clock_timestamp() FROM apply_partition")
    return rows == [(True,)]


@pytest.fixture
def own_database() -> Iterator[PostgresDatabase]:
    """A database of its own: the workers here take any partition with work, and the checks
    read the whole apply index."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


def test_a_worker_resumed_after_its_lease_cannot_touch_the_new_owners_partition(
        own_database, shore_mariadb, make_mariadb_database, tmp_path):
    pg_database = own_database
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")
    ship = ShipLog("ship-paused", database)
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 101)]
    events += [ship.update(k, qty=k * 10) for k in range(1, 21)]

    with migrated_pool(pg_database) as pool:
        receive(pool, ship.node_id, events)
        log = (tmp_path / "w-1.log").open("w")
        paused = subprocess.Popen(
            [sys.executable, "-m", "tidesync", "shore", "work", "--once", "--worker-id", "w-1"],
            env=worker_env(pg_database, shore_mariadb, TIDESYNC_FAILPOINTS="after_claim=stop"),
            stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            wait_until(lambda: is_stopped(paused), "w-1 stopped after its claim")
            wait_until(lambda: lease_expired(pool), "w-1's lease expired")
            taken_over = run_worker(worker_env(pg_database, shore_mariadb), "w-2")
            assert taken_over.returncode == 0, taken_over.stderr
            assert set(inbox_states(pool, ship.node_id).values()) == {("TERMINAL", "APPLIED")}

            # More events arrive and a third worker holds the partition when w-1 wakes up.
            more = [ship.insert(k, f"n{k}", k, "1.00") for k in range(101, 106)]
            receive(pool, ship.node_id, more)
            queue = PostgresWorkQueue(pool)
            owner = queue.claim("w-3", dt.datetime.now(dt.UTC), 600, 50)
            assert owner is not None
            paused.send_signal(signal.SIGCONT)  # the kernel resumes it before this returns
            wait_until(lambda: paused.poll() is not None or is_stopped(paused),
                       "w-1 finished, or stopped at a second claim")
            assert paused.poll() == 0, "w-1 claimed again: it had cleared the new owner's lease"
        finally:
            if paused.poll() is None:
                paused.kill()
                paused.wait()
            log.close()

        partition = pg_rows(pool, "SELECT lease_owner, lease_token, next_sequence"
                                  " FROM apply_partition")
        assert partition == [("w-3", owner.lease_token, len(events) + 1)]
        stale_job = apply_job_id(ship.node_id, ship.topic, 0, 0, 1)
        states = inbox_states(pool, ship.node_id)
        assert [states[e.event_id] for e in events] == [("TERMINAL", "APPLIED")] * len(events)
        assert [states[e.event_id] for e in more] == [("PENDING", None)] * len(more)
        finalized_by = pg_rows(pool, "SELECT DISTINCT job_id FROM inbox_event"
                                     " WHERE state = 'TERMINAL'")
        assert stale_job not in {row[0] for row in finalized_by}
        stale_steps = pg_rows(pool, "SELECT count(*) FROM apply_jobs_events"
                                    " WHERE originator_id = %s", (stale_job,))
        assert stale_steps == [(0,)]
        ledger = ledger_ids(conn, database)
        assert len(ledger) == len(set(ledger)) == len(events)  # each applied exactly once

        # The new owner hands its claim back and the rest applies, still exactly once.
        queue.run(queue.unlease_statements(owner))
        finished = run_worker(worker_env(pg_database, shore_mariadb), "w-4")
        assert finished.returncode == 0, finished.stderr
        assert set(inbox_states(pool, ship.node_id).values()) == {("TERMINAL", "APPLIED")}
        ledger = ledger_ids(conn, database)
        assert len(ledger) == len(set(ledger)) == len(events) + len(more)
        with conn.cursor() as cursor:
            cursor.execute("SELECT id, qty FROM items ORDER BY id")
            assert list(cursor.fetchall()) == [(k, k * 10 if k <= 20 else k) for k in range(1, 106)]
    conn.close()
