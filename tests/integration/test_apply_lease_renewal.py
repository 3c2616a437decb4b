"""Apply leases renewed while a job runs: a chunk that takes longer than the lease (here a target
that waits until the test lets it go) keeps its partition, and a renewal that finds another
owner stops the job before its next chunk reaches the target.

The target applier is the real MariaDB one, wrapped so that its first chunk waits on an event:
that stands for a slow target (lock waits, a busy server) without making the test slow."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    inbox_states,
    migrated_pool,
    pg_rows,
    receive,
    shore_apps,
)
from tidesync.domain.change_event import ChangeEvent
from tidesync.localservices import PostgresDatabase
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.contract import TargetOutcome
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

LEASE_SECONDS = 1.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` (a state, not a duration, is what the test waits for)."""
    for _ in range(1200):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting: {what}")


class HeldApplier:
    """The real applier; its first chunk waits until `release` is set."""

    def __init__(self, inner: MySQLTargetApplier) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.chunks: list[list[int | None]] = []

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        self.chunks.append([e.source_sequence for e in events])
        if len(self.chunks) == 1:
            self.entered.set()
            assert self.release.wait(120), "the test never released the chunk"
        return self.inner.apply_chunk(events)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def own_database() -> Iterator[PostgresDatabase]:
    """A database of its own: the second worker here takes any partition with work."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def world(own_database, shore_mariadb, make_mariadb_database) -> Iterator[dict[str, Any]]:
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")
    applier = HeldApplier(MySQLTargetApplier(
        host=shore_mariadb.host, port=shore_mariadb.port, user=shore_mariadb.user,
        password=shore_mariadb.password, node_id="shore",
        route=lambda db, table: (database, table)))
    ship = ShipLog(f"ship-{secrets.token_hex(4)}", "shipdb")
    with migrated_pool(own_database) as pool, shore_apps(own_database) as apps:
        events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 11)]
        receive(pool, ship.node_id, events)
        processor = ApplyProcessor(
            apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier, ManualClock(),
            ProcessorSettings(worker_id="w1", chunk_size=5, lease_seconds=LEASE_SECONDS),
            draw=lambda: 0.5)
        yield {"pool": pool, "ship": ship, "events": events, "applier": applier,
               "processor": processor}
    applier.inner.close()
    conn.close()


def run_in_thread(processor: ApplyProcessor) -> tuple[threading.Thread, list[int]]:
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(processor.run_once()), daemon=True)
    thread.start()
    return thread, done


def lease_expiry(pool) -> Any:
    return pg_rows(pool, "SELECT lease_expires_at FROM apply_partition")[0][0]


def test_a_chunk_slower_than_the_lease_keeps_its_partition_and_finishes(world):
    pool, applier = world["pool"], world["applier"]
    thread, done = run_in_thread(world["processor"])
    assert applier.entered.wait(60)
    first_expiry = lease_expiry(pool)
    # The lease the claim took has run out on the database's clock, with the chunk still held.
    wait_until(lambda: pg_rows(pool, "SELECT clock_timestamp() > %s", (first_expiry,))
               == [(True,)], "the first lease's end passed")
    intruder = PostgresWorkQueue(pool).claim("w2", ManualClock()(), LEASE_SECONDS, 50)
    assert intruder is None  # renewed meanwhile: nothing to take over
    assert lease_expiry(pool) > first_expiry
    applier.release.set()
    thread.join(60)
    assert done == [10]
    assert applier.chunks == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    states = inbox_states(pool, world["ship"].node_id)
    assert set(states.values()) == {("TERMINAL", "APPLIED")}
    assert pg_rows(pool, "SELECT lease_owner, next_sequence FROM apply_partition") == [
        (None, 11)]


def test_a_renewal_that_finds_another_owner_stops_the_job_before_its_next_chunk(world, caplog):
    pool, applier = world["pool"], world["applier"]
    caplog.set_level(logging.WARNING, logger="tidesync.shore.lease_renewal")
    thread, done = run_in_thread(world["processor"])
    assert applier.entered.wait(60)
    # Another worker takes the partition over (a new token), as after an expired lease.
    pg_rows(pool, "UPDATE apply_partition SET lease_owner = 'w2',"
                  " lease_token = lease_token + 1 RETURNING 1")
    wait_until(lambda: any("lost its lease while it ran" in r.getMessage()
                           for r in caplog.records), "the renewal found the lease gone")
    applier.release.set()
    thread.join(60)
    assert done == [0]
    assert applier.chunks == [[1, 2, 3, 4, 5]]  # the second chunk never reached the target
    states = inbox_states(pool, world["ship"].node_id)
    assert set(states.values()) == {("PENDING", None)}  # nothing of the stale job finalized
    assert pg_rows(pool, "SELECT lease_owner FROM apply_partition") == [("w2",)]
