"""Automatic conflict policies (§11.4) and the arbitration lifecycle (§11.3): pure."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from tests.clocks import rounded_now
from tidesync.domain.arbitration import ManualReason, Policy, PolicyName, arbitrate
from tidesync.domain.conflict_case import (
    ConflictCase,
    ConflictRefusal,
    ConflictRefused,
    ConflictState,
    DecisionSide,
    image_evidence,
)

NOW = rounded_now()
SKEW = dt.timedelta(minutes=5)


def at(minutes: float) -> dt.datetime:
    return NOW + dt.timedelta(minutes=minutes)


def evidence(shore_time: object, ship_time: object, *, ship_node: str = "ship-b",
             shore_stamp: dt.datetime | None = None, ship_stamp: dt.datetime | None = None,
             column: str = "changed_at") -> dict[str, object]:
    def image(value: object, stamp: dt.datetime | None) -> list[list[object]]:
        row: dict[str, object] = {"id": 1, "qty": 5}
        if value is not ...:
            row[column] = value
        if stamp is not None:
            row["_sync_updated_at"] = stamp
        return image_evidence(row)  # type: ignore[arg-type]

    return {"event_id": str(uuid.uuid4()), "origin_node_id": ship_node,
            "current_row": image(shore_time, shore_stamp or NOW),
            "incoming_after": image(ship_time, ship_stamp or NOW),
            "captured_at": NOW.isoformat()}


LWW = Policy(PolicyName.LAST_WRITER_WINS, "changed_at", SKEW, lower_node_id_wins=True)


def test_shore_wins_always_names_the_shore():
    outcome = arbitrate(Policy(PolicyName.SHORE_WINS), evidence(at(-1), at(-2)), "shore", NOW)
    assert outcome.side is DecisionSide.SHORE


def test_manual_policy_hands_every_case_to_a_person():
    outcome = arbitrate(Policy(PolicyName.MANUAL), evidence(at(-1), at(-2)), "shore", NOW)
    assert (outcome.side, outcome.reason_code) == (None, ManualReason.POLICY_MANUAL)


@pytest.mark.parametrize(("shore", "ship", "side"), [
    (-1, -2, DecisionSide.SHORE),
    (-3, -2, DecisionSide.SHIP),
])
def test_last_writer_wins_keeps_the_later_business_time(shore, ship, side):
    assert arbitrate(LWW, evidence(at(shore), at(ship)), "shore", NOW).side is side


def test_equal_times_break_ties_by_node_id_in_the_configured_direction():
    same = evidence(at(-1), at(-1), ship_node="alpha")
    # "alpha" < "shore": the lower id is the ship's.
    assert arbitrate(LWW, same, "shore", NOW).side is DecisionSide.SHIP
    higher = Policy(PolicyName.LAST_WRITER_WINS, "changed_at", SKEW, lower_node_id_wins=False)
    assert arbitrate(higher, same, "shore", NOW).side is DecisionSide.SHORE


@pytest.mark.parametrize(("shore", "ship", "reason"), [
    (..., at(-1), ManualReason.TIME_MISSING),
    (None, at(-1), ManualReason.TIME_MISSING),
    (at(-1), "yesterday", ManualReason.TIME_MALFORMED),
    (at(-1), 17, ManualReason.TIME_MALFORMED),
    (at(10), at(-1), ManualReason.TIME_OUT_OF_SKEW),
])
def test_missing_malformed_or_skewed_times_go_to_a_person(shore, ship, reason):
    outcome = arbitrate(LWW, evidence(shore, ship), "shore", NOW)
    assert (outcome.side, outcome.reason_code) == (None, reason)


def test_a_deleted_side_has_no_time_and_goes_to_a_person():
    item = evidence(at(-1), at(-2))
    item["incoming_after"] = None
    assert arbitrate(LWW, item, "shore", NOW).reason_code == ManualReason.ROW_DELETED


def test_a_date_column_compares_as_midnight_utc():
    today = NOW.date()
    outcome = arbitrate(LWW, evidence(today - dt.timedelta(days=2), today - dt.timedelta(days=1)),
                        "shore", NOW)
    assert outcome.side is DecisionSide.SHIP


# ------------------------------------------------------------------- lifecycle


SHORE_REV = "11111111-1111-4111-8111-111111111111"
SHIP_REV = "33333333-3333-4333-8333-333333333333"


def case() -> ConflictCase:
    item = evidence(at(-1), at(-2))
    item.update(current_revision=SHORE_REV, incoming_result_revision=SHIP_REV)
    return ConflictCase(active_key="k", rule_id="table:db.t", rule_version=None,
                        key_digest="d", database="db", table="t", evidence=item,
                        actor="system:test", reason="test")


def test_an_auto_decide_lease_is_refused_while_held_and_taken_over_after_expiry():
    c = case()
    c.start_auto_decide("w1", "SHORE_WINS", at(0).isoformat(), at(1).isoformat(), "a", "r")
    with pytest.raises(ConflictRefused) as refused:
        c.start_auto_decide("w2", "SHORE_WINS", at(0.5).isoformat(), at(1.5).isoformat(),
                            "a", "r")
    assert refused.value.refusal is ConflictRefusal.LEASE_HELD
    c.start_auto_decide("w2", "SHORE_WINS", at(2).isoformat(), at(3).isoformat(), "a", "r")
    assert c.state is ConflictState.AUTO_DECIDING
    assert c.lease == {"owner": "w2", "policy": "SHORE_WINS", "until": at(3).isoformat(),
                       "taken_over_from": "w1"}


def test_dispatch_then_every_node_applying_acknowledges_the_case():
    c = case()
    c.decide(str(uuid.uuid4()), DecisionSide.SHORE, None, SHORE_REV, str(uuid.uuid4()),
             "policy:SHORE_WINS", "policy")
    c.dispatch([{"node_id": "ship-a", "command_id": "c1"},
                {"node_id": "ship-b", "command_id": "c2"}], False, "a", "queued")
    assert c.state is ConflictState.DISPATCHED
    assert not c.record_ack("ship-a", "c1", "COMMAND_APPLIED", "", "node:ship-a", "ok")
    assert not c.record_ack("ship-a", "c1", "COMMAND_APPLIED", "", "node:ship-a", "again")
    assert c.record_ack("ship-b", "c2", "COMMAND_ALREADY_APPLIED", "", "node:ship-b", "ok")
    assert c.state is ConflictState.ACKNOWLEDGED
    assert not c.is_active


def test_a_rejected_decision_goes_again_to_that_node_only():
    c = case()
    c.decide(str(uuid.uuid4()), DecisionSide.SHORE, None, SHORE_REV, str(uuid.uuid4()),
             "policy:SHORE_WINS", "policy")
    c.dispatch([{"node_id": "ship-a", "command_id": "c1"},
                {"node_id": "ship-b", "command_id": "c2"}], False, "a", "queued")
    with pytest.raises(ConflictRefused) as nothing_rejected:
        c.redispatch("ship-a", "c3", "user:ana", "table enabled now")
    assert nothing_rejected.value.refusal is ConflictRefusal.NOT_REDISPATCHABLE
    assert not c.record_ack("ship-a", "c1", "COMMAND_REJECTED", "TARGET_SCHEMA", "node:ship-a",
                            "not applied")
    with pytest.raises(ConflictRefused) as unexplained:
        c.redispatch("ship-a", "c3", "user:ana", " ")
    assert unexplained.value.refusal is ConflictRefusal.REASON_REQUIRED
    with pytest.raises(ConflictRefused):
        c.redispatch("ship-b", "c3", "user:ana", "it did not reject")

    c.redispatch("ship-a", "c3", "user:ana", "table enabled now")

    assert c.state is ConflictState.DISPATCHED and "ship-a" not in c.acks
    assert (c.command_of("ship-a"), c.command_of("ship-b")) == ("c3", "c2")
    assert c.redispatches_to("ship-a") == 1 and c.redispatches_to("ship-b") == 0
    assert not c.record_ack("ship-a", "c1", "COMMAND_APPLIED", "", "node:ship-a", "late")
    assert not c.record_ack("ship-b", "c2", "COMMAND_APPLIED", "", "node:ship-b", "ok")
    assert c.record_ack("ship-a", "c3", "COMMAND_APPLIED", "", "node:ship-a", "ok")
    assert c.state is ConflictState.ACKNOWLEDGED


def test_a_decision_that_deletes_gets_a_tombstone_revision_of_its_own():
    c = case()
    c.latest_evidence["incoming_after"] = None
    decision_id = uuid.uuid4()
    c.decide(str(decision_id), DecisionSide.SHIP, None, SHORE_REV, str(uuid.uuid4()), "u", "r")
    from tidesync.domain.change_event import tombstone_revision
    assert c.decision is not None
    assert c.decision["tombstone"] is True
    assert c.decision["decided_revision"] == tombstone_revision(decision_id).text


def test_a_stale_decision_expires_the_case_and_frees_its_key():
    c = case()
    c.require_manual("POLICY_MANUAL", at(60).isoformat(), "a", "manual")
    assert c.state is ConflictState.PENDING_MANUAL
    c.expire("DECISION_STALE", "node:ship-a", "newer revision")
    assert c.state is ConflictState.EXPIRED and not c.is_active
    with pytest.raises(ConflictRefused):
        c.decide(str(uuid.uuid4()), DecisionSide.SHORE, None, SHORE_REV, "x", "u", "r")
