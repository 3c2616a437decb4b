"""An auditor replays ApplyJob and ConflictCase streams version by version: each state is what
the processor (or the approver) recorded at that step, the final results are the inbox's and
the receipts', digests match the audit view, and no business value shows."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from tests.integration.projection_support import read_side, run_scenario, shore_apps
from tests.integration.shore_support import migrated_pool, pg_rows
from tidesync.domain.conflict_case import DecisionSide
from tidesync.projections.history import (
    HistoryError,
    aggregate_at,
    aggregate_events,
    diff_versions,
    state_at,
)

pytestmark = pytest.mark.services

SYSTEM = "system:apply-processor"


@pytest.fixture
def audited(pg_database, shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        yield pool, apps, read, run_scenario(pool, apps, read, shore_mariadb, database, conn)
    conn.close()


def job_of(pool, event_id) -> uuid.UUID:
    """The job that decided an event (the inbox records it at finalize)."""
    return pg_rows(pool, "SELECT job_id FROM inbox_event WHERE event_id = %s", (event_id,))[0][0]


def test_an_apply_job_replays_step_by_step_to_what_the_processor_recorded(audited):
    pool, _apps, read, sent = audited
    ids = {name: str(event.event_id) for name, event in sent.events.items()}
    job_id = job_of(pool, sent.events["c2"].event_id)  # the job that rejected "long"
    events = aggregate_events(read.apps, "apply_job", job_id)
    assert [(e.version, e.event_type, e.actor) for e in events] == [
        (1, "ApplyJob.Claimed", SYSTEM), (2, "ApplyJob.TargetCommitted", SYSTEM),
        (3, "ApplyJob.Finalized", SYSTEM), (4, "ApplyJob.Replayed", "bob")]
    assert events[3].reason == "name column widened"

    mine = ("c2", "c2b", "long", "i5")
    expected_states = [
        dict.fromkeys(mine, "APPLYING"),
        {**dict.fromkeys(mine, "APPLYING"), "i5": "TARGET_COMMITTED"},
        {"c2": "CONFLICT_CAPTURED", "c2b": "CONFLICT_CAPTURED", "long": "FINALIZED",
         "i5": "FINALIZED"},
        {"c2": "CONFLICT_CAPTURED", "c2b": "CONFLICT_CAPTURED", "long": "RELEASED",
         "i5": "FINALIZED"},
    ]
    for version, expected in enumerate(expected_states, start=1):
        state = state_at(read.apps, "apply_job", job_id, version=version)
        assert state.version == version
        assert state.state["states"] == {ids[name]: value for name, value in expected.items()}
    finalized = state_at(read.apps, "apply_job", job_id, version=3).state["results"]
    assert {name: finalized[ids[name]]["result"] for name in mine} == {
        "c2": "CONFLICT_RECORDED", "c2b": "CONFLICT_RECORDED", "long": "REJECTED",
        "i5": "APPLIED"}
    assert finalized[ids["long"]]["reason_code"] == "DATA_TOO_LONG"
    assert "record_key" not in json.dumps(finalized)  # only its digest is shown

    # The replay took "long" out of the job's results; nothing else changed but the version.
    changes = {c.path: c for c in diff_versions(read.apps, "apply_job", job_id, 3, 4)}
    assert changes[f"states.{ids['long']}"].before == "FINALIZED"
    assert changes[f"states.{ids['long']}"].after == "RELEASED"
    assert changes[f"results.{ids['long']}"].change == "removed"
    assert set(changes) == {"version", "modified_on", f"states.{ids['long']}",
                            f"results.{ids['long']}"}

    # As of a time: the state the job had then; before it existed, nothing.
    at = events[1].occurred_at
    assert state_at(read.apps, "apply_job", job_id, at=at).version == 2
    with pytest.raises(HistoryError) as early:
        state_at(read.apps, "apply_job", job_id, at=events[0].occurred_at
                 - dt.timedelta(seconds=1))
    assert early.value.code == "NOT_YET_EXISTING"
    with pytest.raises(HistoryError) as missing:
        state_at(read.apps, "apply_job", job_id, version=9)
    assert missing.value.code == "NO_SUCH_VERSION"


def test_final_results_replayed_from_the_jobs_equal_the_inbox_and_the_receipts(audited):
    pool, _apps, read, sent = audited
    inbox = {row[0]: row[1:] for row in pg_rows(
        pool, "SELECT event_id::text, state, result, reason_code, conflict_id::text,"
              " result_revision, job_id FROM inbox_event WHERE origin_node_id = %s",
        (sent.node_id,))}
    receipts: dict[str, tuple] = {}
    for row in pg_rows(pool, "SELECT event_id::text, result, reason_code, conflict_id::text,"
                             " result_revision FROM receipt WHERE origin_node_id = %s"
                             " ORDER BY seq", (sent.node_id,)):
        receipts[row[0]] = row[1:]  # the newest receipt of each event wins
    assert set(inbox) == set(receipts) == {str(e.event_id) for e in sent.events.values()}
    for event_id, (state, result, reason, conflict, revision, job_id) in inbox.items():
        job = aggregate_at(read.apps, "apply_job", job_id)
        final = job.results[event_id]
        recorded = (final.result.value, final.reason_code or None, final.conflict_id,
                    uuid.UUID(final.result_revision).bytes if final.result_revision else None)
        assert state == "TERMINAL"
        assert recorded == (result, reason, conflict, revision)
        assert recorded == receipts[event_id]


def test_a_conflict_case_replays_through_an_operators_decision(audited):
    pool, apps, read, sent = audited
    case = apps.conflicts.get_case(sent.conflict_id)
    case.decide(str(uuid.uuid4()), DecisionSide.SHORE, None,
                case.latest_evidence.get("current_revision"), str(uuid.uuid4()), "dora",
                "the shore's count is right")
    apps.conflicts.save(case)
    read.catch_up(pool)

    events = aggregate_events(read.apps, "conflict_case", sent.conflict_id)
    assert [(e.event_type, e.actor) for e in events] == [
        ("ConflictCase.Detected", SYSTEM), ("ConflictCase.EvidenceAdded", SYSTEM),
        ("ConflictCase.Decided", "dora")]
    states = [state_at(read.apps, "conflict_case", sent.conflict_id, version=v)
              for v in (1, 2, 3)]
    assert [len(s.state["evidence"]) for s in states] == [1, 2, 2]
    assert [s.state["state"] for s in states] == ["DETECTED", "DETECTED", "DECIDED"]
    assert [item["event_id"] for item in states[1].state["evidence"]] == [
        str(sent.events["c2"].event_id), str(sent.events["c2b"].event_id)]
    decision = states[2].state["decision"]
    assert decision["side"] == "SHORE" and decision["decided_value_sha256"]
    shown = json.dumps([s.as_dict() for s in states])
    for value in ("rope", "2.25", '"100"'):  # evidence and decided values never show
        assert value not in shown
    changes = {c.path: c for c in diff_versions(read.apps, "conflict_case", sent.conflict_id,
                                                2, 3)}
    assert (changes["state"].before, changes["state"].after) == ("DETECTED", "DECIDED")

    # The conflict center and the audit view agree with the replay.
    center = pg_rows(pool, "SELECT state, version, evidence_count FROM conflict_center"
                           " WHERE conflict_id = %s", (sent.conflict_id,))
    assert center == [("DECIDED", 3, 2)]
    audit = pg_rows(pool, "SELECT actor, reason, before_digest, after_digest FROM audit_event"
                          " WHERE aggregate_id = %s", (sent.conflict_id,))
    assert audit == [("dora", "the shore's count is right", states[1].digest, states[2].digest)]


def test_history_refuses_unknown_kinds_ids_and_versions(audited):
    _, _, read, sent = audited
    for call, code in [
        (lambda: aggregate_events(read.apps, "ship", uuid.uuid4()), "UNKNOWN_KIND"),
        (lambda: aggregate_events(read.apps, "apply_job", "not-a-uuid"), "BAD_REQUEST"),
        (lambda: aggregate_events(read.apps, "apply_job", uuid.uuid4()), "NOT_FOUND"),
        (lambda: state_at(read.apps, "conflict_case", sent.conflict_id, version=0),
         "NO_SUCH_VERSION"),
        (lambda: state_at(read.apps, "conflict_case", sent.conflict_id,
                          at=dt.datetime(2026, 1, 1)), "BAD_REQUEST"),
    ]:
        with pytest.raises(HistoryError) as refused:
            call()
        assert refused.value.code == code


def test_a_downlink_command_replays_with_the_ships_answer_and_no_values(pg_database):
    from decimal import Decimal

    from tests.integration.test_arbiter import ack
    from tidesync.domain.change_event import Operation, RecordKey, Revision
    from tidesync.domain.downlink_command import CommandKind, NewCommand, RowChangePayload
    from tidesync.shore.downlink import open_downlink
    from tidesync.wire import sync_pb2 as pb

    downlink = open_downlink(pg_database.eventsourcing_env(), pg_database.dsn)
    node = f"audit-ship-{uuid.uuid4().hex[:6]}"
    shore_event = uuid.uuid4()
    ship_revision = Revision(uuid.uuid4().bytes)
    try:
        (issued,) = downlink.issue([NewCommand(
            node_id=node, kind=CommandKind.ROW_CHANGE, source_id=shore_event,
            payload=RowChangePayload(RecordKey.of("fleet", "cargo", {"id": 7}), Operation.UPDATE,
                                     {"item": "secret cargo", "qty": 5}, Revision(bytes(16)),
                                     Revision(uuid.uuid4().bytes), "shore", shore_event),
            actor="system:shore-cdc", reason="shore change")])
        ack(downlink, node, issued.command_id, pb.COMMAND_CONFLICT_REPORTED,
            reason="REVISION_MISMATCH", local=ship_revision,
            row={"item": "other cargo", "qty": Decimal("6")})
        with shore_apps(pg_database) as apps, read_side(pg_database, apps) as read:
            events = aggregate_events(read.apps, "downlink_command", issued.command_id)
            assert [(e.version, e.event_type, e.actor) for e in events] == [
                (1, "DownlinkCommand.Issued", "system:shore-cdc"),
                (2, "DownlinkCommand.Acknowledged", f"node:{node}")]
            state = state_at(read.apps, "downlink_command", issued.command_id, version=2,
                             catalogue=read.catalogue)
    finally:
        downlink.close()
    shown = json.dumps(state.as_dict(), default=str)
    assert "secret cargo" not in shown and "other cargo" not in shown
    assert state.state["ack"]["result"] == "COMMAND_CONFLICT_REPORTED"
    assert state.state["ack"]["local_revision"] == ship_revision.text
    assert "sha256" in state.state["payload_json"]
