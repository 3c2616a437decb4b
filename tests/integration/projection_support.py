"""Helpers for read-side tests: a real apply run (inbox → processor → MariaDB target → ApplyJob
and ConflictCase streams) for one ship, with a registered node, a heartbeat, a conflict, a
rejected event fixed and replayed, and the read side caught up over it."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import ConnectionPool

from tests.clocks import ManualClock
from tests.integration.shore_support import ITEMS_DDL, ShipLog, receive
from tidesync.apps.jobs import replay
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import Actor, NodesApplication, NodeService
from tidesync.domain.apply_job import ErrorClass
from tidesync.domain.change_event import ChangeEvent
from tidesync.ingress.heartbeats import PostgresHeartbeats
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import Catalogue, OpenApplications, ViewSettings
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.shore.worker import ShoreApps
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire import sync_pb2 as pb

SHORE_NODE = "shore"


Clock = ManualClock


def new_node_id() -> str:
    return f"ship-{secrets.token_hex(4)}"


def small_pools(pg_database: Any) -> dict[str, str]:
    """The event store settings with small pools: the PostgreSQL server is shared with other
    test sessions, and each application would otherwise hold five connections."""
    return {**pg_database.eventsourcing_env(), "POSTGRES_POOL_SIZE": "1",
            "POSTGRES_MAX_OVERFLOW": "4"}


@contextmanager
def shore_apps(pg_database: Any) -> Iterator[ShoreApps]:
    apps = ShoreApps.open(small_pools(pg_database))
    try:
        yield apps
    finally:
        apps.close()


@contextmanager
def read_side(pg_database: Any, apps: ShoreApps,
              settings: ViewSettings | None = None) -> Iterator[ReadSide]:
    catalogue = default_catalogue(settings or ViewSettings(refresh_seconds=0.0))
    opened = catalogue.open_applications(
        small_pools(pg_database),
        existing={"apply_jobs": apps.apply_jobs, "conflict_cases": apps.conflicts})
    try:
        yield ReadSide(catalogue, opened)
    finally:
        opened.close()


@dataclass
class ReadSide:
    catalogue: Catalogue
    apps: OpenApplications

    def catch_up(self, pool: ConnectionPool) -> None:
        for runner in self.catalogue.runners(self.apps, pool):
            runner.run_until_idle()
            runner.refresh()

    @property
    def nodes(self) -> NodesApplication:
        app = self.apps["nodes"]
        assert isinstance(app, NodesApplication)
        return app


@dataclass
class Scenario:
    """What one ship sent and how the shore ended up recording it."""

    node_id: str
    database: str
    ship_database: str
    events: dict[str, ChangeEvent] = field(default_factory=dict)
    conflict_id: uuid.UUID | None = None
    shore_revision: str | None = None

    @property
    def rule(self) -> str:
        return f"table:{self.ship_database}.items"


def make_processor(pool: ConnectionPool, apps: ShoreApps, mariadb: Any, database: str,
                   clock: Clock) -> ApplyProcessor:
    applier = MySQLTargetApplier(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                                 password=mariadb.password, node_id=SHORE_NODE,
                                 route=lambda db, table: (database, table))
    return ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier,
                          clock, ProcessorSettings(worker_id="w1"), draw=lambda: 0.5)


def drain(processor: ApplyProcessor) -> int:
    total = 0
    for _ in range(50):
        count = processor.run_once()
        if count == 0:
            return total
        total += count
    raise AssertionError("processor did not go idle")


def run_scenario(pool: ConnectionPool, apps: ShoreApps, read: ReadSide, mariadb: Any,
                 database: str, conn: Any) -> Scenario:
    """Register a node; apply inserts, updates and a delete; a conflict with a local shore
    edit; a rejected event that an operator replays after fixing the target; a heartbeat."""
    node_id = new_node_id()
    service = NodeService(read.nodes, SecretBox(os.urandom(32)))
    service.register(node_id, Actor("alice", "new ship in the fleet"),
                     dt.datetime(2019, 11, 1, tzinfo=dt.UTC))
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", SHORE_NODE)
    # Its own ship database name: record keys (and so active conflicts) never meet other tests'.
    ship = ShipLog(node_id, f"ship_{secrets.token_hex(4)}")
    scenario = Scenario(node_id, database, ship.database)
    clock = Clock()
    processor = make_processor(pool, apps, mariadb, database, clock)

    first = {"i1": ship.insert(1, "anchor", 3, "10.50"), "i2": ship.insert(2, "rope", 7, "2.25"),
             "i3": ship.insert(3, "buoy", 1, "99.99")}
    first["u1"] = ship.update(1, qty=4)
    first["d3"] = ship.delete(3)
    receive(pool, node_id, list(first.values()))
    drain(processor)
    scenario.events.update(first)

    with conn.cursor() as cursor:  # a local shore edit: its trigger gives a new revision
        cursor.execute("UPDATE items SET qty = 100 WHERE id = 2")
        cursor.execute("SELECT _sync_revision FROM items WHERE id = 2")
        scenario.shore_revision = str(cursor.fetchone()[0])
    second = {"c2": ship.update(2, qty=8), "c2b": ship.update(2, qty=9),
              "long": ship.insert(4, "x" * 30, 1, "1.00"), "i5": ship.insert(5, "hook", 2, "3.00")}
    receive(pool, node_id, list(second.values()))
    drain(processor)
    scenario.events.update(second)
    with pool.connection() as pg:
        row = pg.execute("SELECT conflict_id FROM inbox_event WHERE event_id = %s",
                         (second["c2"].event_id,)).fetchone()
    scenario.conflict_id = row[0]

    with conn.cursor() as cursor:  # the operator widens the column, then replays
        cursor.execute("ALTER TABLE items MODIFY name VARCHAR(40) NOT NULL")
    assert replay(PostgresWorkQueue(pool), apps.apply_jobs, ErrorClass.DATA, "bob",
                  "name column widened",
                  node_id) == 1
    drain(processor)
    processor.applier.close()

    PostgresHeartbeats(pool).record(node_id, heartbeat(node_id), clock())
    read.catch_up(pool)
    return scenario


def heartbeat(node_id: str) -> pb.Heartbeat:
    sent = int(dt.datetime(2019, 11, 30, 11, 59, tzinfo=dt.UTC).timestamp() * 1_000_000)
    hour = 3_600_000_000
    return pb.Heartbeat(
        protocol_version="1.0", node_id=node_id, client_version="0.1.0", sent_at_micros=sent,
        active_config_version="cfg-7",
        health=[pb.SubsystemHealth(subsystem=pb.CAPTURE, state=pb.HEALTHY),
                pb.SubsystemHealth(subsystem=pb.QUEUE, state=pb.DEGRADED,
                                   reason_code="QUEUE_HIGH")],
        backlog=[pb.PartitionBacklog(direction=pb.UPLINK, topic="sync.cdc.test.items",
                                     partition=0, end_offset=120, received_offset=100,
                                     terminal_offset=89, bytes=5_000,
                                     estimated_compressed_bytes=900,
                                     oldest_captured_at_micros=sent - hour),
                 pb.PartitionBacklog(direction=pb.UPLINK, topic="sync.cdc.test.items",
                                     partition=1, end_offset=10, bytes=700,
                                     estimated_compressed_bytes=100)],
        throughput=[pb.ThroughputSample(direction=pb.UPLINK, window_start_micros=sent - hour,
                                        window_seconds=1800, payload_bytes_confirmed=90_000,
                                        physical_bytes=120_000, active_transfer_seconds=600.0)],
    )


def save_synthetic_jobs(apps: ShoreApps, node_id: str, jobs: int, per_job: int,
                        keys: int = 50, first_job_no: int = 1) -> dict[str, tuple[str, bool]]:
    """Finalized ApplyJobs saved directly (no inbox, no target): `per_job` APPLIED results
    each over `keys` records of one table, every seventh a DELETE. Returns, per key digest,
    the newest (event id, tombstone)."""
    from tidesync.domain.apply_job import ApplyJob, EventResult, FinalResult
    from tidesync.domain.change_event import RecordKey
    from tidesync.domain.conflict_case import key_digest

    rule = f"table:{node_id}.bulk"
    newest: dict[str, tuple[str, bool]] = {}
    aggregates = []
    for job_no in range(first_job_no, first_job_no + jobs):
        ids = [str(uuid.uuid4()) for _ in range(per_job)]
        positions = [job_no * per_job + index for index in range(per_job)]
        job = ApplyJob(origin_node_id=node_id, topic="bulk", partition=0, replay_epoch=0,
                       job_no=job_no, event_ids=ids, positions=positions, worker="bulk",
                       lease_expires_at=dt.datetime(2019, 11, 30, tzinfo=dt.UTC),
                       actor="system:apply-processor", reason="claimed")
        job.target_committed(ids, "system:apply-processor", "committed")
        results = []
        for event_id, position in zip(ids, positions, strict=True):
            record = RecordKey.of(node_id, "bulk", {"id": position % keys}).canonical()
            operation = "DELETE" if position % 7 == 0 else "UPDATE"
            results.append(FinalResult(event_id, EventResult.APPLIED, "", None,
                                       str(uuid.uuid4()), position, rule, record, operation))
            newest[key_digest(rule, record)] = (event_id, operation == "DELETE")
        job.finalize([r.as_row() for r in results], "system:apply-processor", "finalized")
        aggregates.append(job)
    apps.apply_jobs.save(*aggregates)
    return newest
