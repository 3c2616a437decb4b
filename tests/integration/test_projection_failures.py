"""A view that fails stops alone: the worker goes on applying and keeping the other views, the
failed one is marked FAILED with a reason code (shown by `projections status` and the console)
until a rebuild replaces it; text no view can store (NUL) is stored replaced, so a rebuild
repairs a view that met it. Real PostgreSQL and MariaDB."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from psycopg import sql

from tests.integration.console_support import ConsoleWorld, console_world
from tests.integration.shore_support import receive
from tidesync.apps.users import UsersApplication
from tidesync.entrypoints.cli import main
from tidesync.projections.engine import Cursor, Events
from tidesync.projections.failures import mark_failed
from tidesync.projections.rebuild import rebuild_view
from tidesync.projections.registry import ViewContext, ViewSpec
from tidesync.projections.views import view_status
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.shore.worker import ShoreWorker

pytestmark = pytest.mark.services


class RawReasonProjection:
    """Stores users' reasons as they are (what a view written without care does)."""

    name = "raw_reasons"
    topics: tuple[str, ...] = ()

    def __init__(self, table: str) -> None:
        self.table = table

    def process(self, cursor: Cursor, events: Events) -> None:
        for _, event in events:
            cursor.execute(sql.SQL("INSERT INTO {} (reason) VALUES (%s)").format(
                sql.Identifier(self.table)), (str(getattr(event, "reason", "")),))


def raw_reasons_view(context: ViewContext) -> list[tuple[str, Any]]:
    return [("users", RawReasonProjection(context.table("raw_reasons")))]


def store_a_nul_reason(world: ConsoleWorld) -> None:
    """A revoke whose reason holds a NUL, saved past the edges (as data stored before they
    refused it was)."""
    users = UsersApplication(env=world.database.eventsourcing_env())
    try:
        user = users.user("operator-user")
        user._revoked("user:admin-user", "left\x00the team", "")
        users.save(user)
    finally:
        users.close()


def worker(world: ConsoleWorld, runners: list[Any]) -> ShoreWorker:
    processor = ApplyProcessor(
        world.apps.apply_jobs, world.apps.conflicts, PostgresWorkQueue(world.pool),
        world.applier(), lambda: dt.datetime.now(dt.UTC), ProcessorSettings(worker_id="t"),
        draw=lambda: 0.5)
    return ShoreWorker(processor, runners)


def test_a_failing_view_stops_alone_and_the_worker_goes_on(pg_database, shore_mariadb):
    with console_world(shore_mariadb) as world:
        with world.pool.connection() as conn:
            conn.execute("CREATE TABLE raw_reasons (reason text)")
        world.catalogue.add_view(ViewSpec("raw_reasons", ("raw_reasons",), raw_reasons_view,
                                          applications=("users",)))
        world.run_views()
        store_a_nul_reason(world)
        assert world.views_apps is not None
        runners = list(world.catalogue.runners(world.views_apps, world.pool))

        worker(world, runners).run_once()  # neither the NUL nor the failing view stops it
        key = next(world.keys)
        receive(world.pool, world.ship.node_id, [world.ship.insert(key, "after", 1, "1.00")])
        assert worker(world, runners).run_once() == 1  # after a restart, applying goes on

        statuses = {s.name: s for s in view_status(world.views_apps, world.pool,
                                                   catalogue=world.catalogue)}
        assert statuses["raw_reasons"].state == "FAILED"
        assert statuses["raw_reasons"].failure is not None
        assert statuses["raw_reasons"].failure.reason == "VALUE_REFUSED"
        assert {name for name, s in statuses.items() if s.state == "FAILED"} == {"raw_reasons"}
        assert statuses["receipts"].behind == 0 and statuses["audit"].behind == 0
        with world.pool.connection() as conn:
            reasons = [row[0] for row in conn.execute(
                "SELECT reason FROM audit_event WHERE application = 'users'")]
        assert "left\ufffdthe team" in reasons


def test_status_shows_a_failed_view_until_a_rebuild_replaces_it(pg_database, shore_mariadb,
                                                                monkeypatch, capsys):
    with console_world(shore_mariadb) as world:
        store_a_nul_reason(world)
        world.run_views()
        mark_failed(world.pool, "audit", ValueError("a bug"))
        database = world.database
        for name, value in {
            "KIND": "postgres", "POSTGRES_HOST": database.host,
            "POSTGRES_PORT": str(database.port), "POSTGRES_DBNAME": database.dbname,
            "POSTGRES_USER": database.user, "POSTGRES_PASSWORD": database.password or "",
            "POSTGRES_POOL_SIZE": "2",
        }.items():
            monkeypatch.setenv(f"TIDESYNC_EVENT_STORE__{name}", value)
        monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)

        assert main(["projections", "status", "audit", "--json"]) == 0
        [shown] = json.loads(capsys.readouterr().out)
        assert (shown["state"], shown["failed_reason"]) == ("FAILED", "PROJECTION_ERROR")
        assert main(["projections", "status", "audit"]) == 0
        assert "FAILED: PROJECTION_ERROR" in capsys.readouterr().out
        projections = world.query("{ projections(name: \"audit\") { state failedReason } }")
        assert projections["data"]["projections"] == [
            {"state": "FAILED", "failedReason": "PROJECTION_ERROR"}]

        assert world.views_apps is not None
        rebuild_view("audit", apps=world.views_apps, pool=world.pool, actor="user:tester",
                     reason="repair", catalogue=world.catalogue)
        assert main(["projections", "status", "audit", "--json"]) == 0
        [shown] = json.loads(capsys.readouterr().out)
        assert (shown["state"], shown["failed_reason"]) == ("RUNNING", None)
