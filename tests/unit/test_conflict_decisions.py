"""ConflictCase decisions and cancellations (§11.3, §11.5): pure, checked against the evidence,
appended as immutable events with actor and reason."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from eventsourcing.application import Application

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
)
from tidesync.domain.conflict_case import (
    ConflictCase,
    ConflictRefusal,
    ConflictRefused,
    ConflictState,
    DecisionSide,
    active_conflict_key,
    conflict_evidence,
    image_evidence,
    record_key_digest,
    rule_for,
)

SHORE_REVISION = Revision(uuid.UUID("11111111-1111-4111-8111-111111111111").bytes)
SHIP_BASE = Revision(uuid.UUID("22222222-2222-4222-8222-222222222222").bytes)
SHIP_RESULT = Revision(uuid.UUID("33333333-3333-4333-8333-333333333333").bytes)
SHORE_ROW = {"id": 7, "name": "anchor", "qty": 100, "price": Decimal("10.50"),
             "note": None, "_sync_revision": SHORE_REVISION.text}


def ship_update(**after: object) -> ChangeEvent:
    record = RecordKey.of("shipdb", "items", {"id": 7})
    source = SourceCoordinates("ship-1", 0, "t", 0, 5)
    return ChangeEvent(
        event_id=event_id_for(source, record, Operation.UPDATE), origin_node_id="ship-1",
        source_connector_id="test", source_topic="t", source_partition=0, source_position=5,
        record=record, operation=Operation.UPDATE,
        captured_at=dt.datetime(2019, 11, 1, tzinfo=dt.UTC),
        before={"id": 7, "qty": 3}, after={"id": 7, **after}, base_revision=SHIP_BASE,
        result_revision=SHIP_RESULT)


def new_case(**after: object) -> ConflictCase:
    event = ship_update(**(after or {"qty": 5}))
    rule = rule_for(event)
    digest = record_key_digest(rule, event)
    return ConflictCase(
        active_key=active_conflict_key(rule, digest, SHORE_REVISION, SHIP_RESULT), rule_id=rule,
        rule_version=None, key_digest=digest, database="shipdb", table="items",
        evidence=conflict_evidence(event, SHORE_ROW, SHORE_REVISION), actor="system:test",
        reason="base revision mismatch")


def decide(case: ConflictCase, side: DecisionSide = DecisionSide.SHORE,
           current: str | None = SHORE_REVISION.text,
           replacement: list[list[object]] | None = None, reason: str = "agreed") -> None:
    case.decide("d-1", side, replacement, current, "44444444-4444-4444-8444-444444444444",
                "user:alice", reason, "trace-1")


def refusal(action) -> ConflictRefusal:
    with pytest.raises(ConflictRefused) as refused:
        action()
    assert refused.value.code == refused.value.refusal  # the same code, as an ErrorCode
    return refused.value.refusal


def test_a_shore_decision_keeps_the_shore_row_without_sync_columns():
    case = new_case()
    decide(case)
    assert case.state is ConflictState.DECIDED
    decision = case.decision
    assert decision is not None
    assert decision["side"] == "SHORE" and decision["actor"] == "user:alice"
    assert decision["decided_revision"] == decision["expected_revision"] == SHORE_REVISION.text
    assert dict(map(tuple, decision["decided_value"])) == {
        "id": ["int", "7"], "name": ["str", "anchor"], "qty": ["int", "100"],
        "price": ["decimal", "10.50"], "note": ["null"]}
    assert decision["tombstone"] is False and decision["evidence_count"] == 1


def test_a_ship_update_decided_for_the_ship_is_laid_over_the_shore_row():
    # The UPDATE carried its key and the one column it changed: the decided row is the
    # shore's with that column, whole, and (no longer the ship's own row) a new revision.
    case = new_case(qty=5)
    decide(case, DecisionSide.SHIP)
    assert case.decision is not None
    assert dict(map(tuple, case.decision["decided_value"])) == {
        "id": ["int", "7"], "name": ["str", "anchor"], "qty": ["int", "5"],
        "price": ["decimal", "10.50"], "note": ["null"]}
    assert case.decision["decided_revision"] == "44444444-4444-4444-8444-444444444444"


def ship_report(case: ConflictCase, row: dict[str, list[object]] | None,
                revision: Revision | None, shore: dict[str, object] | None = SHORE_ROW,
                shore_revision: Revision | None = SHORE_REVISION) -> None:
    """A ship's answer to a command, with its whole row (as the arbiter records it)."""
    case.add_evidence({
        "event_id": str(uuid.uuid4()), "source": "COMMAND_ACK", "origin_node_id": "ship-1",
        "operation": "REPORTED", "incoming_before": None,
        "incoming_after": None if row is None else [[k, v] for k, v in row.items()],
        "incoming_complete": True, "incoming_base_revision": None,
        "incoming_result_revision": None if revision is None else revision.text,
        "current_row": None if shore is None else image_evidence(shore),
        "current_revision": None if shore_revision is None else shore_revision.text,
        "rule_version": None, "captured_at": None}, "node:ship-1", "report")


def test_a_ship_decision_keeps_the_ships_whole_reported_row_and_revision():
    case = new_case(qty=5)
    whole = {"id": ["int", "7"], "name": ["str", "renamed"], "qty": ["int", "5"],
             "price": ["decimal", "9.00"], "note": ["str", "ship"]}
    ship_report(case, whole, SHIP_RESULT)
    decide(case, DecisionSide.SHIP)
    assert case.decision is not None
    assert dict(map(tuple, case.decision["decided_value"])) == whole
    assert case.decision["decided_revision"] == SHIP_RESULT.text


def test_a_ship_update_without_a_whole_row_anywhere_is_not_decided_for_the_ship():
    # The shore deleted the row, the ship's UPDATE carried one column: nothing completes it.
    event = ship_update(qty=5)
    rule = rule_for(event)
    digest = record_key_digest(rule, event)
    case = ConflictCase(
        active_key=active_conflict_key(rule, digest, None, SHIP_RESULT), rule_id=rule,
        rule_version=None, key_digest=digest, database="shipdb", table="items",
        evidence=conflict_evidence(event, None, None), actor="system:test", reason="missing")
    assert refusal(lambda: decide(case, DecisionSide.SHIP, current=None)) is (
        ConflictRefusal.SHIP_ROW_INCOMPLETE)
    # The shore's deletion can still win.
    case.decide(str(uuid.uuid4()), DecisionSide.SHORE, None, None, "r", "user:alice", "agreed")
    assert case.decision is not None and case.decision["tombstone"] is True


def test_a_shore_decision_takes_the_shore_row_read_with_its_revision():
    case = new_case()
    read = image_evidence({**SHORE_ROW, "note": "read just now"})
    case.decide("d-1", DecisionSide.SHORE, None, SHORE_REVISION.text, "r", "user:alice",
                "agreed", current_row=read)
    assert case.decision is not None
    assert ["note", ["str", "read just now"]] in case.decision["decided_value"]


def test_refreshed_evidence_makes_a_stale_case_decidable():
    case = new_case()
    moved = "55555555-5555-4555-8555-555555555555"
    assert refusal(lambda: decide(case, current=moved)) is ConflictRefusal.EVIDENCE_STALE
    assert refusal(lambda: case.refresh_evidence("e-2", None, moved, "user:bob", " ")) is (
        ConflictRefusal.REASON_REQUIRED)
    row = image_evidence({**SHORE_ROW, "qty": 200, "_sync_revision": moved})
    assert case.refresh_evidence("e-2", row, moved, "user:bob", "the shore row moved")
    assert case.latest_evidence["source"] == "REFRESH"
    assert case.latest_evidence["incoming_after"] == case.evidence[0]["incoming_after"]
    # Asking again changes nothing: the evidence already shows the shore's row.
    assert not case.refresh_evidence("e-3", row, moved, "user:bob", "again")
    assert len(case.evidence) == 2
    decide(case, current=moved)
    assert case.decision is not None and case.decision["decided_revision"] == moved
    assert ["qty", ["int", "200"]] in case.decision["decided_value"]
    assert refusal(lambda: case.refresh_evidence("e-4", row, moved, "user:bob", "late")) is (
        ConflictRefusal.NOT_REFRESHABLE)


def test_a_replacement_may_name_columns_only_a_ships_report_showed():
    # The shore has no row and the ship's UPDATE carried one column; the ship's report of
    # its whole row tells which columns the record has.
    event = ship_update(qty=5)
    rule = rule_for(event)
    digest = record_key_digest(rule, event)
    case = ConflictCase(
        active_key=active_conflict_key(rule, digest, None, SHIP_RESULT), rule_id=rule,
        rule_version=None, key_digest=digest, database="shipdb", table="items",
        evidence=conflict_evidence(event, None, None), actor="system:test", reason="missing")
    ship_report(case, {"id": ["int", "7"], "name": ["str", "x"], "qty": ["int", "5"]},
                SHIP_RESULT, shore=None, shore_revision=None)
    assert set(case.evidence_columns()) == {"id", "name", "qty"}
    decide(case, DecisionSide.SHIP, current=None)
    assert case.decision is not None and case.decision["decided_revision"] == SHIP_RESULT.text


def dispatched(case: ConflictCase, node: str = "ship-1") -> None:
    case.dispatch([{"node_id": node, "command_id": "c-1"}], False, "system:arbiter", "queued")


def test_a_decision_goes_again_to_a_node_holding_a_row_the_case_weighed():
    case = new_case()
    decide(case)
    dispatched(case)
    assert refusal(lambda: case.check_retarget("ship-1", SHORE_REVISION.text)) is (
        ConflictRefusal.NOT_RETARGETABLE)  # the node has not answered yet
    case.record_ack("ship-1", "c-1", "COMMAND_CONFLICT_REPORTED", "DECISION_STALE",
                    "node:ship-1", "stale")
    newer = "66666666-6666-4666-8666-666666666666"
    assert refusal(lambda: case.check_retarget("ship-1", newer)) is (
        ConflictRefusal.NOT_RETARGETABLE)  # a change the case never saw
    for attempt in range(3):
        case.retarget("ship-1", f"c-{attempt + 2}", SHIP_BASE.text, "system:arbiter", "again")
        assert case.command_of("ship-1") == f"c-{attempt + 2}" and "ship-1" not in case.acks
        case.record_ack("ship-1", f"c-{attempt + 2}", "COMMAND_CONFLICT_REPORTED",
                        "DECISION_STALE", "node:ship-1", "stale")
    # A row that keeps moving ends the retries.
    assert refusal(lambda: case.check_retarget("ship-1", SHIP_BASE.text)) is (
        ConflictRefusal.NOT_RETARGETABLE)
    assert case.retargets_to("ship-1") == 3


def test_a_ship_change_recorded_after_the_decision_is_not_one_it_weighed():
    # The ship changed the row again after the decision; its upload joins the case before
    # the ship's stale answer is read. The decision must not go again over that change.
    case = new_case()
    decide(case)
    dispatched(case)
    newer = Revision(uuid.UUID("77777777-7777-4777-8777-777777777777").bytes)
    ship_report(case, {"id": ["int", "7"], "qty": ["int", "44"]}, newer)
    ship_report(case, None, None)
    case.record_ack("ship-1", "c-1", "COMMAND_CONFLICT_REPORTED", "DECISION_STALE",
                    "node:ship-1", "stale")
    assert not case.weighed(newer.text) and not case.weighed(None)
    assert refusal(lambda: case.check_retarget("ship-1", newer.text)) is (
        ConflictRefusal.NOT_RETARGETABLE)
    assert refusal(lambda: case.check_retarget("ship-1", None)) is (
        ConflictRefusal.NOT_RETARGETABLE)
    case.retarget("ship-1", "c-2", SHIP_RESULT.text, "system:arbiter", "again")  # weighed


def test_no_row_counts_as_weighed_only_where_the_evidence_shows_one_missing():
    case = new_case()
    assert not case.weighed(None) and case.weighed(SHIP_RESULT.text)
    ship_report(case, None, None)
    assert case.weighed(None)


def test_a_decision_is_refused_when_the_record_moved_on():
    case = new_case()
    other = "55555555-5555-4555-8555-555555555555"
    assert refusal(lambda: decide(case, current=other)) is ConflictRefusal.EVIDENCE_STALE
    assert refusal(lambda: decide(case, current=None)) is ConflictRefusal.EVIDENCE_STALE
    assert case.state is ConflictState.DETECTED and case.decision is None


def test_a_replacement_names_every_business_column_in_its_type():
    case = new_case()
    assert set(case.evidence_columns()) == {"id", "name", "qty", "price", "note"}
    full = [["id", ["int", "7"]], ["name", ["str", "x"]], ["qty", ["int", "1"]],
            ["price", ["decimal", "1.00"]], ["note", ["null"]]]
    assert refusal(lambda: decide(case, DecisionSide.REPLACEMENT)) is (
        ConflictRefusal.REPLACEMENT_REQUIRED)
    assert refusal(lambda: decide(case, DecisionSide.REPLACEMENT, replacement=full[:4])) is (
        ConflictRefusal.REPLACEMENT_COLUMNS)
    assert refusal(lambda: decide(case, DecisionSide.REPLACEMENT,
                                  replacement=[*full, ["id", ["int", "8"]]])) is (
        ConflictRefusal.REPLACEMENT_COLUMNS)
    wrong = [*full[:2], ["qty", ["str", "1"]], *full[3:]]
    assert refusal(lambda: decide(case, DecisionSide.REPLACEMENT, replacement=wrong)) is (
        ConflictRefusal.REPLACEMENT_TYPE)
    # A column NULL in all evidence has no known type: it can only stay NULL.
    typed_note = [*full[:4], ["note", ["str", "guess"]]]
    assert refusal(lambda: decide(case, DecisionSide.REPLACEMENT, replacement=typed_note)) is (
        ConflictRefusal.REPLACEMENT_TYPE)
    assert refusal(lambda: decide(case, DecisionSide.SHORE, replacement=full)) is (
        ConflictRefusal.REPLACEMENT_UNEXPECTED)

    decide(case, DecisionSide.REPLACEMENT, replacement=full)
    assert case.decision is not None and case.decision["decided_value"] == full
    assert case.decision["decided_revision"] == "44444444-4444-4444-8444-444444444444"


def test_decisions_need_a_reason_and_happen_once():
    case = new_case()
    assert refusal(lambda: decide(case, reason="  ")) is ConflictRefusal.REASON_REQUIRED
    decide(case)
    assert refusal(lambda: decide(case)) is ConflictRefusal.NOT_DECIDABLE


def test_cancel_only_without_business_effect():
    case = new_case()
    assert refusal(lambda: case.cancel("user:bob", "")) is ConflictRefusal.REASON_REQUIRED
    decide(case)
    case.cancel("user:bob", "decided on wrong evidence")
    assert case.state is ConflictState.CANCELLED and not case.is_active
    assert case.cancellation == {"actor": "user:bob", "reason": "decided on wrong evidence"}
    assert refusal(lambda: case.cancel("user:bob", "again")) is ConflictRefusal.NOT_CANCELLABLE
    assert refusal(lambda: decide(case)) is ConflictRefusal.NOT_DECIDABLE

    dispatched = new_case()
    dispatched.state = ConflictState.DISPATCHED
    assert refusal(lambda: dispatched.cancel("user:bob", "late")) is (
        ConflictRefusal.NOT_CANCELLABLE)


def test_decided_and_cancelled_cases_replay_from_their_stored_events():
    app: Application[uuid.UUID] = Application()
    case = new_case()
    app.save(case)
    decide(case)
    case.cancel("user:bob", "wrong evidence", "trace-2")
    app.save(case)
    replayed = app.repository.get(case.id)
    assert replayed.state is ConflictState.CANCELLED
    assert replayed.decision == case.decision and replayed.cancellation == case.cancellation
    types = [type(event).__qualname__ for event in app.events.get(case.id)]
    assert types == ["ConflictCase.Detected", "ConflictCase.Decided", "ConflictCase.Cancelled"]
    decided = list(app.events.get(case.id))[1]
    assert (decided.actor, decided.reason, decided.trace_id) == ("user:alice", "agreed",
                                                                 "trace-1")
