"""The backlog view counts snapshot events (an onboarding's rows) under priority BULK and the
ordinary changes beside them in their rule's class (NORMAL without one), while they wait and
once they ended, and a rebuild of the view gives back the same rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from tests.integration.projection_support import new_node_id, read_side, shore_apps
from tests.integration.shore_support import (
    ShipLog,
    migrated_pool,
    own_pg_database,
    pg_rows,
    receive,
)
from tidesync.apps.rules import RuleReleasesApplication
from tidesync.domain.apply_job import ApplyJob, EventResult, FinalResult
from tidesync.domain.change_event import ChangeEvent, Operation, SourceCoordinates, event_id_for
from tidesync.domain.rules.sync_rule import Direction, PriorityClass, Selector, SyncRule
from tidesync.projections.rebuild import rebuild_view
from tidesync.shore.worker import ShoreApps

pytestmark = pytest.mark.services
# A test here releases a rule, which puts the shore of its database into rules mode.
pg_database = pytest.fixture(scope="module", name="pg_database")(own_pg_database)


def _rows(pool, node_id: str) -> dict[tuple[str, str], tuple[int, bool]]:
    """(state, priority) → (events, bytes > 0) of the node's uplink backlog."""
    rows = pg_rows(pool, "SELECT state, priority, events, bytes FROM backlog"
                         " WHERE node_id = %s AND direction = 'UPLINK'", (node_id,))
    return {(r[0], r[1]): (r[2], r[3] > 0) for r in rows}


def _as_snapshot(ship: ShipLog, row: ChangeEvent, **changes: object) -> ChangeEvent:
    """The row as a snapshot record of it (its own event id)."""
    source = SourceCoordinates(ship.node_id, 0, ship.topic, ship.partition, row.source_position)
    return dataclasses.replace(row, operation=Operation.SNAPSHOT,
                               event_id=event_id_for(source, row.record, Operation.SNAPSHOT),
                               **changes)  # type: ignore[arg-type]


def _claimed(apps: ShoreApps, ship: ShipLog, events: list[ChangeEvent]) -> ApplyJob:
    """One apply job claiming the received events, saved."""
    job = ApplyJob(origin_node_id=ship.node_id, topic=ship.topic, partition=0, replay_epoch=0,
                   job_no=1, event_ids=[str(event.event_id) for event in events],
                   positions=[e.source_position for e in events], worker="w1",
                   lease_expires_at=dt.datetime.now(dt.UTC), actor="system:apply-processor",
                   reason="claimed")
    apps.apply_jobs.save(job)
    return job


def _terminal_in_inbox(pool: Any, node_id: str, ids: list[str] | None = None) -> None:
    """As the processor marks ended events in the inbox (all of the node's, by default)."""
    with pool.connection() as conn:
        conn.execute("UPDATE inbox_event SET state = 'TERMINAL', result = 'APPLIED'"
                     " WHERE origin_node_id = %s AND (%s::text[] IS NULL"
                     " OR event_id::text = ANY(%s))", (node_id, ids, ids))


def test_snapshot_events_count_as_bulk_and_survive_a_rebuild(pg_database):
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        ship = ShipLog(new_node_id(), "shipdb")
        changes = [ship.insert(key, f"n{key}", key, "1.00") for key in (1, 2)]
        snapshots = [_as_snapshot(ship, ship.insert(key, f"n{key}", key, "1.00"))
                     for key in (3, 4, 5)]
        events = [*changes, *snapshots]
        receive(pool, ship.node_id, events)
        ids = [str(event.event_id) for event in events]
        try:
            job = _claimed(apps, ship, events)
            read.catch_up(pool)
            assert _rows(pool, ship.node_id) == {("CLAIMED", "NORMAL"): (2, True),
                                                 ("CLAIMED", "BULK"): (3, True)}

            # One snapshot row waits for a retry; the others end APPLIED.
            job.finalize([FinalResult(str(event.event_id), EventResult.APPLIED,
                                      position=event.source_position,
                                      rule_id="table:shipdb.items",
                                      operation=event.operation.value).as_row()
                          for event in events[:4]], "system:apply-processor", "applied")
            apps.apply_jobs.save(job)
            _terminal_in_inbox(pool, ship.node_id, ids[:4])
            read.catch_up(pool)
            built = _rows(pool, ship.node_id)
            assert built == {("APPLIED", "NORMAL"): (2, True), ("APPLIED", "BULK"): (2, True),
                             ("CLAIMED", "BULK"): (1, True)}
            waiting = pg_rows(pool, "SELECT oldest_captured_at FROM backlog WHERE node_id = %s"
                                    " AND state = 'CLAIMED' AND priority = 'BULK'",
                              (ship.node_id,))
            assert waiting == [(snapshots[-1].captured_at,)]

            rebuild_view("backlog", apps=read.apps, pool=pool, actor="tester",
                         reason="rebuilt in a test", catalogue=read.catalogue, batch_size=50)
            assert _rows(pool, ship.node_id) == built
        finally:
            _terminal_in_inbox(pool, ship.node_id)


def test_changes_count_in_their_rules_class_and_snapshot_rows_stay_bulk(pg_database):
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        ship = ShipLog(new_node_id(), "shipdb")
        rule_id = f"alarms-{uuid.uuid4().hex[:8]}"  # offered to this test's node only
        releases = read.apps[RuleReleasesApplication.name]
        assert isinstance(releases, RuleReleasesApplication)
        version = releases.draft(
            SyncRule(rule_id=rule_id, source_database="shipdb", source_table="items",
                     direction=Direction.UPLINK, selector=Selector(nodes=frozenset({ship.node_id})),
                     key_columns=("id",), priority=PriorityClass.CRITICAL),
            "user:alice", "alarms first").version
        releases.validate(rule_id, version, "user:alice", "checked")
        releases.approve(rule_id, version, "user:alice", "reviewed")
        releases.publish(rule_id, version, "user:alice", "roll out")

        changes = [dataclasses.replace(ship.insert(key, f"n{key}", key, "1.00"), rule_id=rule_id)
                   for key in (1, 2)]
        snapshot = _as_snapshot(ship, ship.insert(3, "n3", 3, "1.00"), rule_id=rule_id)
        other = ship.insert(4, "n4", 4, "1.00")  # no rule: the table's own, NORMAL
        events = [*changes, snapshot, other]
        receive(pool, ship.node_id, events)
        try:
            job = _claimed(apps, ship, events)
            read.catch_up(pool)
            assert _rows(pool, ship.node_id) == {("CLAIMED", "CRITICAL"): (2, True),
                                                 ("CLAIMED", "BULK"): (1, True),
                                                 ("CLAIMED", "NORMAL"): (1, True)}
            job.finalize([FinalResult(str(event.event_id), EventResult.APPLIED,
                                      position=event.source_position,
                                      rule_id=event.rule_id or "table:shipdb.items",
                                      operation=event.operation.value).as_row()
                          for event in events], "system:apply-processor", "applied")
            apps.apply_jobs.save(job)
            _terminal_in_inbox(pool, ship.node_id)
            read.catch_up(pool)
            assert _rows(pool, ship.node_id) == {("APPLIED", "CRITICAL"): (2, True),
                                                 ("APPLIED", "BULK"): (1, True),
                                                 ("APPLIED", "NORMAL"): (1, True)}
        finally:
            _terminal_in_inbox(pool, ship.node_id)
