"""The console's commands on one apply event (issue 13, item 1): an operator replays or skips
one dead or rejected event, recorded with the user and the reason; others may not."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.console_support import ConsoleWorld, console_world
from tests.integration.shore_support import receive

pytestmark = pytest.mark.services

SKIP = """mutation($n: String!, $e: ID!, $r: String!) {
  skipJobEvent(input: {nodeId: $n, eventId: $e, reason: $r}) { __typename
    ... on JobsReplayed { events position { token } } ... on JobError { code } } }"""
REPLAY = SKIP.replace("skipJobEvent", "replayJobEvent")


@pytest.fixture
def world(pg_database, shore_mariadb):
    with console_world(shore_mariadb) as world:
        yield world


def rejected_event(world: ConsoleWorld) -> uuid.UUID:
    """An INSERT too long for `items.name` (VARCHAR(20)): REJECTED as DATA_TOO_LONG."""
    event = world.ship.insert(next(world.keys), "x" * 50, 1, "1.00")
    receive(world.pool, world.ship.node_id, [event])
    world.apply_all()
    return event.event_id


def state(world: ConsoleWorld, event_id: uuid.UUID) -> tuple[Any, ...] | None:
    with world.pool.connection() as conn:
        return conn.execute("SELECT state, result, reason_code FROM inbox_event"
                            " WHERE event_id = %s", (event_id,)).fetchone()


def job_of(world: ConsoleWorld, event_id: uuid.UUID) -> uuid.UUID:
    with world.pool.connection() as conn:
        row = conn.execute("SELECT job_id FROM inbox_event WHERE event_id = %s",
                           (event_id,)).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def test_an_operator_skips_one_rejected_event_with_a_reason(world: ConsoleWorld):
    event_id = rejected_event(world)
    rejecting_job = job_of(world, event_id)
    variables = {"n": world.ship.node_id, "e": str(event_id), "r": "typed again by hand"}

    forbidden = world.query(SKIP, variables, role="viewer")
    assert forbidden["data"] is None
    blank = world.query(SKIP, {**variables, "r": " "}, role="operator")
    assert blank["data"]["skipJobEvent"] == {"__typename": "JobError", "code": "REASON_REQUIRED"}
    skipped = world.query(SKIP, variables, role="operator")["data"]["skipJobEvent"]
    assert skipped["__typename"] == "JobsReplayed" and skipped["events"] == 1
    world.apply_all()

    assert state(world, event_id) == ("TERMINAL", "REJECTED", "SKIPPED_BY_OPERATOR")
    recorded = [(e.actor, e.reason) for e in world.apps.apply_jobs.events.get(rejecting_job)
                if type(e).__qualname__ == "ApplyJob.SkipRequested"]
    assert recorded == [("user:operator-user", "typed again by hand")]


def test_an_operator_replays_one_event_and_only_a_dead_or_rejected_one(world: ConsoleWorld):
    event_id = rejected_event(world)
    variables = {"n": world.ship.node_id, "e": str(event_id), "r": "try again"}

    replayed = world.query(REPLAY, variables, role="operator")["data"]["replayJobEvent"]
    assert replayed["__typename"] == "JobsReplayed"
    assert state(world, event_id) == ("PENDING", None, None)
    again = world.query(REPLAY, variables, role="operator")["data"]["replayJobEvent"]
    assert again == {"__typename": "JobError", "code": "NOT_REPLAYABLE"}
    world.apply_all()  # the column is as narrow as before
    assert state(world, event_id) == ("TERMINAL", "REJECTED", "DATA_TOO_LONG")
