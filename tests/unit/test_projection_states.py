"""The read side's pure parts: state digests, field diffs, record key locations, the facts the
backlog reads from a wire event, renderers that hide values, and operator actions."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from dataclasses import dataclass, replace
from decimal import Decimal
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.bootstrap.shore import view_settings
from tidesync.config import Config, ConfigError, load_config
from tidesync.domain.apply_job import ApplyJob, EventResult, FinalResult
from tidesync.domain.change_event import Operation, RecordKey, SourceCoordinates, event_id_for
from tidesync.domain.conflict_case import ConflictCase, key_digest, rule_for
from tidesync.domain.operator_action import OperatorAction, OperatorActionError
from tidesync.projections.backlog import wire_facts
from tidesync.projections.catalogue import default_catalogue, render_credentials, render_results
from tidesync.projections.conflict_center import (
    ConflictCenterProjection,
    evidence_item_summary,
    lifecycle_summary,
)
from tidesync.projections.history import FieldChange, _diff
from tidesync.projections.record_head import RecordHeadProjection, record_location
from tidesync.projections.registry import ViewSettings
from tidesync.projections.states import StreamStates, digest, plain, state_digest
from tidesync.wire.codec import NameTable, build_batch


class Colour(enum.StrEnum):
    RED = "RED"


@dataclass(frozen=True, slots=True)
class Slotted:
    number: int
    when: dt.datetime


def test_plain_data_is_stable_whatever_the_python_types():
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    value = {"set": {3, 1, 2}, "tuple": (1, Colour.RED), "uuid": uuid.UUID(int=7),
             "decimal": Decimal("1.50"), "bytes": b"\x01", "slotted": Slotted(1, moment)}
    assert plain(value) == {
        "set": [1, 2, 3], "tuple": [1, "RED"], "uuid": str(uuid.UUID(int=7)),
        "decimal": "1.50", "bytes": {"bytes_hex": "01"},
        "slotted": {"number": 1, "when": "2026-01-02T03:04:05+00:00"}}
    assert digest({"a": 1, "b": [1, 2]}) == digest({"b": (1, 2), "a": 1})
    assert digest({"a": 1}) != digest({"a": "1"})


def _job() -> ApplyJob:
    return ApplyJob(origin_node_id="ship-1", topic="t", partition=0, replay_epoch=0, job_no=1,
                    event_ids=["e1", "e2"], positions=[1, 2], worker="w",
                    lease_expires_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                    actor="system:x", reason="claimed")


class _Repository:
    """Replays from a list of events: the part of the library's repository that StreamStates
    uses, without a database."""

    def __init__(self, events: list[object]) -> None:
        self.events = events
        self.reads = 0

    def get(self, _: object, version: int) -> object:
        self.reads += 1
        aggregate = None
        for event in self.events[:version]:
            aggregate = event.mutate(aggregate)  # type: ignore[attr-defined]
        return aggregate


def test_stream_states_replay_event_by_event_and_read_only_mid_stream():
    job = _job()
    job.target_committed(["e1"], "system:x", "committed")
    job.finalize([FinalResult("e1", EventResult.APPLIED, position=1).as_row()], "alice", "ok")
    events = list(job.collect_events())
    digests_in_order = []
    states = StreamStates(_Repository(events))
    for event in events:
        before = states.before(event)
        digests_in_order.append(None if before is None else state_digest(before))
        digests_in_order.append(state_digest(states.advance(event)))
    assert states.repository.reads == 0
    assert digests_in_order[-1] == state_digest(job)

    fresh = StreamStates(_Repository(events))  # starting at the last event reads the stream
    assert state_digest(fresh.before(events[2])) == digests_in_order[3]
    assert fresh.repository.reads == 1


def test_diff_walks_into_dicts_and_lists():
    changes: list[FieldChange] = []
    _diff("", {"a": 1, "b": {"x": 1, "y": 2}, "c": [1, 2], "gone": 0},
          {"a": 1, "b": {"x": 1, "y": 3, "z": 4}, "c": [1], "new": 5}, changes)
    assert [(c.path, c.change, c.before, c.after) for c in changes] == [
        ("b.y", "changed", 2, 3), ("b.z", "added", None, 4), ("c[1]", "removed", 2, None),
        ("gone", "removed", 0, None), ("new", "added", None, 5)]


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12),
       st.one_of(st.integers(), st.text(max_size=8)))
def test_record_location_names_the_database_and_table_of_any_key(database, table, key):
    record = RecordKey.of(database, table, {"id": key})
    projection = RecordHeadProjection()
    assert record_location(record.canonical()) == (database, table)
    assert projection.location(record.canonical()) == (database, table)
    # A second key of the same table comes from the cache, and still right.
    other = RecordKey.of(database, table, {"id": f"{key}x"}).canonical()
    assert projection.location(other) == (database, table)


def test_a_table_name_that_looks_like_the_key_boundary_is_not_cached_wrongly():
    projection = RecordHeadProjection()
    first = RecordKey.of("db", 'a]]][["x', {"id": 1}).canonical()
    second = RecordKey.of("db", 'a]]][["y', {"id": 1}).canonical()
    assert projection.location(first) == ("db", 'a]]][["x')
    assert projection.location(second) == ("db", 'a]]][["y')


def test_the_backlog_reads_the_rule_size_and_times_from_the_wire_as_the_shore_names_them():
    from tidesync.domain.change_event import ChangeEvent

    record = RecordKey.of("shipdb", "items", {"id": 1})
    source = SourceCoordinates("ship-1", 0, "cdc.items", 0, 5)
    captured = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
    plain_event = ChangeEvent(
        event_id=event_id_for(source, record, Operation.INSERT), origin_node_id="ship-1",
        source_connector_id="c", source_topic="cdc.items", source_partition=0,
        source_position=5, record=record, operation=Operation.INSERT, captured_at=captured,
        after={"id": 1, "name": "anchor"})
    events = [plain_event, replace(plain_event, rule_id="crew-rule")]
    batch = build_batch(events, node_id="ship-1", batch_id=uuid.uuid4(), created_at=captured)
    names = NameTable(batch.strings)
    for event, wire in zip(events, batch.events, strict=True):
        facts = wire_facts(wire, names)
        assert facts.rule_id == rule_for(event)
        assert facts.captured_at == captured and facts.bytes == wire.ByteSize() > 0


def test_renderers_keep_keys_and_secrets_out():
    record = RecordKey.of("shipdb", "crew", {"passport": "X123"}).canonical()
    results = plain({"e1": FinalResult("e1", EventResult.APPLIED, position=3,
                                       rule_id="table:shipdb.crew", record_key=record)})
    shown = render_results(results)
    assert "X123" not in str(shown)
    assert shown["e1"]["key_digest"] == key_digest("table:shipdb.crew", record)
    credentials = render_credentials([{"number": 1, "sealed_secret": "v1:secret",
                                       "issued_at": "2026-01-01"}])
    assert "secret" not in str(credentials).replace("sealed_secret_sha256", "")
    summary = evidence_item_summary({
        "event_id": "e1", "incoming_before": [["id", ["int", "1"]], ["qty", ["int", "3"]]],
        "incoming_after": [["id", ["int", "1"]], ["qty", ["int", "4"]]],
        "current_row": [["id", ["int", "1"]], ["qty", ["int", "100"]], ["name", ["str", "a"]]]})
    assert summary["changed_columns"] == ["qty"] and summary["differing_columns"] == ["qty"]
    assert "100" not in str(summary)
    kind = default_catalogue(ViewSettings()).kind("conflict_case")
    assert kind.render("evidence", [{"event_id": "e1", "current_row": None}])[0][
        "current_row_exists"] is False


def test_catalogue_names_kinds_of_unregistered_aggregates_after_their_class():
    catalogue = default_catalogue(ViewSettings())
    assert catalogue.kind_name("tidesync.domain.apply_job:ApplyJob") == "apply_job"
    assert catalogue.kind_name("somewhere.else:DownlinkCommand") == "downlink_command"
    assert {view.name for view in catalogue.views} == {
        "receipts", "record_head", "conflict_center", "node_overview", "backlog", "audit"}


def test_settings_come_from_the_one_configuration(tmp_path):
    assert view_settings(Config()) == ViewSettings()
    path = tmp_path / "tidesync.toml"
    path.write_text("[conflicts]\nmanual_sla_hours = 4\n[projections]\nrefresh_seconds = 2\n")
    config = load_config(path, {"TIDESYNC_PROJECTIONS__BATCH_SIZE": "10",
                                # The old variables are not settings any more: ignored.
                                "TIDESYNC_VIEW_BATCH_SIZE": "99"})
    settings = view_settings(config)
    assert settings == ViewSettings(dt.timedelta(hours=4), 2.0, 10)
    assert default_catalogue(settings).settings is settings


@pytest.mark.parametrize(("variable", "value", "problem"), [
    ("TIDESYNC_PROJECTIONS__BATCH_SIZE", "0", "projections.batch_size: must be 1..100000"),
    ("TIDESYNC_PROJECTIONS__REFRESH_SECONDS", "-1", "projections.refresh_seconds: must be >= 0"),
    ("TIDESYNC_PROJECTIONS__REFRESH_SECONDS", "1.5", "projections.refresh_seconds: expected an"
                                                      " integer"),
    ("TIDESYNC_PROJECTIONS__LAG", "1", "projections.lag: unknown setting"),
])
def test_projection_settings_are_checked(variable, value, problem):
    with pytest.raises(ConfigError) as raised:
        load_config(None, {variable: value})
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


def test_the_conflict_center_sla_is_the_hand_over_due_time_while_a_person_decides():
    """A ConflictCase in memory (no store): its due time as the conflict center writes it."""
    case = ConflictCase(active_key="k", rule_id="table:db.t", rule_version=None,
                        key_digest="d", database="db", table="t",
                        evidence={"event_id": "e1", "current_revision": None},
                        actor="system:test", reason="test")
    projection = ConflictCenterProjection(SimpleNamespace(repository=None),  # type: ignore[arg-type]
                                          sla=dt.timedelta(hours=6))
    opened = case.created_on
    assert projection.sla_due_at(case) == opened + dt.timedelta(hours=6)
    due = opened + dt.timedelta(minutes=90)
    case.require_manual("POLICY_MANUAL", due.isoformat(), "system:arbiter", "policy MANUAL")
    assert projection.sla_due_at(case) == due
    case.manual = {"reason_code": "POLICY_MANUAL", "sla_due": "2019-12-01T10:00:00"}
    assert projection.sla_due_at(case) == dt.datetime(2019, 12, 1, 10, tzinfo=dt.UTC)
    case.manual = {"reason_code": "POLICY_MANUAL", "sla_due": "not a time"}
    assert projection.sla_due_at(case) == opened + dt.timedelta(hours=6)
    case.expire("EVIDENCE_STALE", "system:arbiter", "the row moved on")
    assert projection.sla_due_at(case) == opened + dt.timedelta(hours=6)
    summary = lifecycle_summary(case)
    assert summary["expiry"] == {"reason_code": "EVIDENCE_STALE", "actor": "system:arbiter",
                                 "reason": "the row moved on"}
    assert summary["dispatch"] is None and summary["acks"] == {}


def test_an_operator_action_needs_an_actor_and_a_reason():
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(OperatorActionError):
        OperatorAction.request(uuid.uuid4(), "rebuild_projection", "receipts", at, "", "why")
    with pytest.raises(OperatorActionError):
        OperatorAction.request(uuid.uuid4(), "rebuild_projection", "receipts", at, "ann", " ")
    action = OperatorAction.request(uuid.uuid4(), "rebuild_projection", "receipts", at, "ann",
                                    "fix")
    action.complete(at, {"processed": 3}, "ann", "done")
    assert (action.outcome, action.details) == ("COMPLETED", {"processed": 3})
