"""Every view after real processing: events received into the inbox, applied to a MariaDB
target by the apply processor, a conflict with a local shore edit, a rejected event replayed
by an operator after the target was fixed, a registered node and its heartbeat."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid

import pytest

from tests.integration.projection_support import read_side, run_scenario, shore_apps
from tests.integration.shore_support import migrated_pool, pg_rows
from tidesync.domain.conflict_case import DecisionSide, key_digest, record_key_digest, rule_for
from tidesync.domain.node import node_uuid
from tidesync.projections.history import state_at

pytestmark = pytest.mark.services

RULE = "table:shipdb.items"  # the open-states test ships with database "shipdb"


@pytest.fixture
def scenario(pg_database, shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        yield pool, read, run_scenario(pool, apps, read, shore_mariadb, database, conn)
    conn.close()


def test_record_head_holds_the_newest_applied_revision_of_each_record(scenario):
    pool, _, sent = scenario
    rows = pg_rows(pool, "SELECT key_digest, record_key, database, table_name, revision,"
                         " origin_node_id, last_event_id, tombstone FROM record_head"
                         " WHERE origin_node_id = %s", (sent.node_id,))
    by_event = {row[6]: row for row in rows}
    events = sent.events
    # Key 1 ends at its update, 2 at its insert (the conflicting updates never applied),
    # 3 deleted, 4 applied by the replay, 5 inserted.
    expected = {"u1": False, "i2": False, "d3": True, "long": False, "i5": False}
    assert set(by_event) == {events[name].event_id for name in expected}
    for name, tombstone in expected.items():
        event = events[name]
        row = by_event[event.event_id]
        assert row[0] == record_key_digest(rule_for(event), event)
        assert row[0] == key_digest(sent.rule, event.record.canonical())
        assert row[1] == event.record.canonical()
        assert (row[2], row[3]) == (sent.ship_database, "items")
        assert str(row[4]) == event.result_revision.text
        assert row[7] is tombstone


def test_receipts_list_every_terminal_result_in_order(scenario):
    pool, _, sent = scenario
    rows = pg_rows(pool, "SELECT event_id, result, reason_code FROM receipt"
                         " WHERE origin_node_id = %s ORDER BY seq", (sent.node_id,))
    names = {event.event_id: name for name, event in sent.events.items()}
    assert [(names[r[0]], r[1]) for r in rows] == [
        ("i1", "APPLIED"), ("i2", "APPLIED"), ("i3", "APPLIED"), ("u1", "APPLIED"),
        ("d3", "APPLIED"), ("c2", "CONFLICT_RECORDED"), ("c2b", "CONFLICT_RECORDED"),
        ("long", "REJECTED"), ("i5", "APPLIED"), ("long", "APPLIED")]


def test_conflict_center_summarises_the_case_without_values(scenario):
    pool, _, sent = scenario
    rows = pg_rows(pool, "SELECT rule_id, key_digest, database, table_name, state, opened_at,"
                         " updated_at, evidence_count, node_ids, sla_due_at, summary, version"
                         " FROM conflict_center WHERE conflict_id = %s", (sent.conflict_id,))
    assert len(rows) == 1
    (rule, digest, database, table, state, opened, updated, count, nodes, due, summary,
     version) = rows[0]
    c2 = sent.events["c2"]
    assert (rule, database, table, state) == (sent.rule, sent.ship_database, "items",
                                              "DETECTED")
    assert digest == record_key_digest(sent.rule, c2)
    assert count == 2 and version == 2 and nodes == [sent.node_id]
    assert due - opened == dt.timedelta(hours=24) and updated >= opened
    evidence = summary["evidence"]
    assert [item["event_id"] for item in evidence] == [str(c2.event_id),
                                                       str(sent.events["c2b"].event_id)]
    assert evidence[0]["current_revision"] == sent.shore_revision
    assert evidence[0]["differing_columns"] == ["qty"]
    assert evidence[0]["changed_columns"] == ["qty"]
    assert_no_business_values(summary)


def assert_no_business_values(summary):
    """None of the rows' business values (name, price, quantities) is in the summary. The price
    is matched as a number of its own: "2.25" also occurs inside a timestamp such as
    "…:22.258403", which is no business value."""
    text = json.dumps(summary)
    for value in ("rope", '"100"', '"8"'):
        assert value not in text
    assert re.search(r"(?<![\d.])2\.25(?!\d)", text) is None


def conflict_row(pool, conflict_id):
    rows = pg_rows(pool, "SELECT state, opened_at, sla_due_at, summary, version"
                         " FROM conflict_center WHERE conflict_id = %s", (conflict_id,))
    assert len(rows) == 1
    return rows[0]


def test_conflict_center_follows_the_arbitration_lifecycle(scenario):
    """The case is driven with the domain methods the arbiter uses; the view shows each step,
    and a case waiting for a person is due when its hand-over said, not opening + SLA."""
    pool, read, sent = scenario
    apps = read.apps
    conflicts = apps["conflict_cases"]
    case = conflicts.get_case(sent.conflict_id)
    opened = case.created_on
    now = opened + dt.timedelta(minutes=5)
    case.start_auto_decide("w1", "SHORE_WINS", now.isoformat(),
                           (now + dt.timedelta(minutes=1)).isoformat(), "system:arbiter",
                           "policy SHORE_WINS")
    conflicts.save(case)
    read.catch_up(pool)
    state, _, due, summary, _ = conflict_row(pool, sent.conflict_id)
    assert state == "AUTO_DECIDING" and due - opened == dt.timedelta(hours=24)

    manual_due = opened + dt.timedelta(hours=2, minutes=30)
    case.require_manual("NO_TIME_COLUMN", manual_due.isoformat(), "system:arbiter",
                        "last writer wins cannot decide")
    conflicts.save(case)
    read.catch_up(pool)
    state, _, due, summary, _ = conflict_row(pool, sent.conflict_id)
    assert state == "PENDING_MANUAL" and due == manual_due
    assert summary["manual"] == {"reason_code": "NO_TIME_COLUMN",
                                 "sla_due": manual_due.isoformat()}
    assert summary["dispatch"] is None and summary["acks"] == {} and summary["expiry"] is None

    latest = case.latest_evidence
    case.decide(str(uuid.uuid4()), DecisionSide.SHORE, None,
                str(latest["current_revision"]), str(uuid.uuid4()), "user:approver",
                "shore data is authoritative")
    commands = [{"node_id": sent.node_id, "command_id": str(uuid.uuid4())},
                {"node_id": "ship-other", "command_id": str(uuid.uuid4())}]
    case.dispatch(commands, True, "system:arbiter", "decision sent")
    assert not case.record_ack(sent.node_id, commands[0]["command_id"], "COMMAND_APPLIED", "",
                               f"node:{sent.node_id}", "applied")
    conflicts.save(case)
    read.catch_up(pool)
    state, _, due, summary, _ = conflict_row(pool, sent.conflict_id)
    assert state == "DISPATCHED" and due - opened == dt.timedelta(hours=24)
    assert summary["dispatch"] == {"commands": commands, "shore_applied": True}
    assert summary["acks"] == {sent.node_id: {"command_id": commands[0]["command_id"],
                                              "result": "COMMAND_APPLIED", "reason_code": ""}}
    assert summary["decision"]["side"] == "SHORE"

    case.expire("DECISION_STALE", "node:ship-other", "the ship's row moved on")
    conflicts.save(case)
    read.catch_up(pool)
    state, _, _, summary, version = conflict_row(pool, sent.conflict_id)
    assert state == "EXPIRED" and version == case.version
    assert summary["expiry"] == {"reason_code": "DECISION_STALE", "actor": "node:ship-other",
                                 "reason": "the ship's row moved on"}
    assert_no_business_values(summary)


def test_an_acknowledged_case_is_due_at_its_opening_plus_the_sla_again(scenario):
    pool, read, sent = scenario
    conflicts = read.apps["conflict_cases"]
    case = conflicts.get_case(sent.conflict_id)
    case.require_manual("POLICY_MANUAL", (case.created_on + dt.timedelta(hours=1)).isoformat(),
                        "system:arbiter", "policy MANUAL")
    latest = case.latest_evidence
    case.decide(str(uuid.uuid4()), DecisionSide.SHIP, None, str(latest["current_revision"]),
                str(uuid.uuid4()), "user:approver", "the ship knows best")
    command_id = str(uuid.uuid4())
    case.dispatch([{"node_id": sent.node_id, "command_id": command_id}], True,
                  "system:arbiter", "decision sent")
    assert case.record_ack(sent.node_id, command_id, "COMMAND_ALREADY_APPLIED", "",
                           f"node:{sent.node_id}", "already there")
    conflicts.save(case)
    read.catch_up(pool)
    state, opened, due, summary, _ = conflict_row(pool, sent.conflict_id)
    assert state == "ACKNOWLEDGED" and summary["manual"]["reason_code"] == "POLICY_MANUAL"
    assert due - opened == dt.timedelta(hours=24)
    assert summary["acks"][sent.node_id]["result"] == "COMMAND_ALREADY_APPLIED"


def test_node_overview_shows_status_and_the_reported_heartbeat(scenario):
    pool, _, sent = scenario
    rows = pg_rows(pool, "SELECT status, registered_at, revoked_at, client_version,"
                         " last_heartbeat_at, health, backlog_events, backlog_bytes,"
                         " throughput, health_state, active_config_version"
                         " FROM node_overview WHERE node_id = %s", (sent.node_id,))
    assert len(rows) == 1
    (status, registered, revoked, version, heartbeat_at, health, events, size, throughput,
     worst, config) = rows[0]
    assert (status, revoked, version, worst, config) == (
        "ACTIVE", None, "0.1.0", "DEGRADED", "cfg-7")
    assert registered == dt.datetime(2019, 11, 1, tzinfo=dt.UTC)
    assert heartbeat_at is not None and len(health) == 2
    assert (events, size) == ((120 - 90) + 10, 5_700)
    assert throughput["UPLINK"]["effective_bytes_per_second"] == pytest.approx(150.0)
    assert "DOWNLINK" not in throughput


def test_node_overview_follows_a_revoke(scenario):
    pool, read, sent = scenario
    from tidesync.apps.nodes import Actor, NodeService

    NodeService(read.nodes, None).revoke(sent.node_id, Actor("carol", "ship sold"),
                                         dt.datetime(2019, 12, 1, tzinfo=dt.UTC))
    read.catch_up(pool)
    rows = pg_rows(pool, "SELECT status, revoked_at, client_version FROM node_overview"
                         " WHERE node_id = %s", (sent.node_id,))
    assert rows == [("REVOKED", dt.datetime(2019, 12, 1, tzinfo=dt.UTC), "0.1.0")]


def test_backlog_counts_results_per_rule_and_the_ships_queue(scenario):
    pool, _, sent = scenario
    rows = pg_rows(pool, "SELECT direction, rule_id, priority, state, events, bytes,"
                         " oldest_captured_at, estimated_compressed_bytes FROM backlog"
                         " WHERE node_id = %s ORDER BY direction, state", (sent.node_id,))
    by_state = {(r[0], r[3]): r for r in rows}
    # The replayed event left REJECTED for APPLIED; nothing is waiting on the shore.
    assert set(by_state) == {("UPLINK", "APPLIED"), ("UPLINK", "CONFLICT_RECORDED"),
                             ("UPLINK_SHIP", "QUEUED")}
    applied = by_state[("UPLINK", "APPLIED")]
    assert (applied[1], applied[2], applied[4]) == (sent.rule, "NORMAL", 7)
    assert applied[5] > 0
    assert applied[6] == dt.datetime(2019, 11, 1, tzinfo=dt.UTC)
    assert by_state[("UPLINK", "CONFLICT_RECORDED")][4] == 2
    ship = by_state[("UPLINK_SHIP", "QUEUED")]
    assert (ship[1], ship[4], ship[5], ship[7]) == ("", 40, 5_700, 1_000)


def test_backlog_shows_received_claimed_and_dead_events(pg_database):
    """Open states, without a target: events waiting in the inbox, then held by a job (saved
    here directly; the events are taken out of the shared inbox afterwards)."""
    from tests.integration.projection_support import new_node_id
    from tests.integration.shore_support import ShipLog, receive
    from tidesync.domain.apply_job import ApplyJob

    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        ship = ShipLog(new_node_id(), "shipdb")
        events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 5)]
        receive(pool, ship.node_id, events)
        try:
            read.catch_up(pool)
            assert _states(pool, ship.node_id) == {("RECEIVED", ""): 4}

            ids = [str(e.event_id) for e in events]
            job = ApplyJob(origin_node_id=ship.node_id, topic=ship.topic, partition=0,
                           replay_epoch=7, job_no=1, event_ids=ids[:3], positions=[0, 1, 2],
                           worker="w9", lease_expires_at=dt.datetime.now(dt.UTC),
                           actor="system:apply-processor", reason="claimed")
            apps.apply_jobs.save(job)
            read.catch_up(pool)
            assert _states(pool, ship.node_id) == {("RECEIVED", ""): 1, ("CLAIMED", RULE): 3}

            job.dead_letter(ids[:2], "EXHAUSTED", "LOCK_WAIT_TIMEOUT", 9,
                            "system:apply-processor", "retries exhausted")
            job.release(ids[2:3], "SEQUENCE_GAP", "system:apply-processor", "gap")
            apps.apply_jobs.save(job)
            read.catch_up(pool)
            assert _states(pool, ship.node_id) == {("RECEIVED", ""): 1, ("DEAD", RULE): 2,
                                                   ("PENDING", RULE): 1}
            dead = pg_rows(pool, "SELECT bytes, oldest_captured_at, newest_captured_at"
                                 " FROM backlog WHERE node_id = %s AND state = 'DEAD'",
                           (ship.node_id,))
            assert dead[0][0] > 0
            assert dead[0][1] == dead[0][2] == dt.datetime(2019, 11, 1, tzinfo=dt.UTC)
        finally:
            with pool.connection() as conn:
                conn.execute("UPDATE inbox_event SET state = 'TERMINAL', result = 'REJECTED'"
                             " WHERE origin_node_id = %s", (ship.node_id,))


def _states(pool, node_id: str) -> dict[tuple[str, str], int]:
    rows = pg_rows(pool, "SELECT state, rule_id, events FROM backlog WHERE node_id = %s"
                         " AND direction = 'UPLINK'", (node_id,))
    return {(r[0], r[1]): r[2] for r in rows}


def test_audit_records_operator_actions_only_with_state_digests(scenario):
    pool, read, sent = scenario
    columns = ("SELECT application, aggregate_kind, aggregate_id, version, event_type, actor,"
               " reason, before_digest, after_digest FROM audit_event")
    registered = pg_rows(pool, f"{columns} WHERE aggregate_id = %s", (node_uuid(sent.node_id),))
    replayed = pg_rows(pool, f"{columns} WHERE aggregate_id IN (SELECT job_id FROM backlog_job"
                             " WHERE origin_node_id = %s)", (sent.node_id,))
    assert [r[:2] + r[4:7] for r in registered] == [
        ("nodes", "node", "Node.Registered", "alice", "new ship in the fleet")]
    assert [r[:2] + r[4:7] for r in replayed] == [
        ("apply_jobs", "apply_job", "ApplyJob.Replayed", "bob", "name column widened")]
    (registered,), (replayed,) = registered, replayed
    assert registered[7] is None and replayed[7] is not None
    # The digests are those of the states the auditor replays.
    apps = read.apps
    assert registered[8] == state_at(apps, "node", registered[2], version=1).digest
    assert replayed[7] == state_at(apps, "apply_job", replayed[2],
                                   version=replayed[3] - 1).digest
    assert replayed[8] == state_at(apps, "apply_job", replayed[2], version=replayed[3]).digest
    system = pg_rows(pool, "SELECT count(*) FROM audit_event WHERE actor LIKE 'system:%%'")
    assert system == [(0,)]
