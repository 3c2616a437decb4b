"""The snapshot and catch-up state a ship reports on its heartbeat (per active rule and per
table snapshot no rule asked for), and the shore's checks of what a heartbeat may carry."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.clocks import ManualClock
from tidesync.bootstrap.sync_states import (
    MAX_SYNC_STATES,
    ActiveRule,
    SnapshotSyncStates,
    sync_states,
)
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.ingress.sync_states import (
    MAX_SYNC_STATE_REPORTS,
    BadSyncState,
    TooManySyncStates,
    checked_sync_states,
)
from tidesync.ship.state.watermarks import Watermark
from tidesync.ship.telemetry import build_heartbeat
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

CAPTURE = "sync.cdc.ship-1"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def micros(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def rule(rule_id: str, version: int, table: str = "crew_list") -> SyncRule:
    return SyncRule(rule_id, "erp", table, Direction.UPLINK, Selector(frozenset({"ship-1"})),
                    version=version, key_columns=("id",))


def watermark(topic: str, partition: int, terminal: int) -> Watermark:
    return Watermark(topic, partition, 0, 0, terminal, terminal, terminal, None, None, 0)


def by_subject(states: list[pb.SyncState]) -> dict[str, pb.SyncState]:
    return {state.rule_id or state.table: state for state in states}


@pytest.fixture
def store(tmp_path: Path):
    opened = SnapshotStore(tmp_path / "position.sqlite")
    yield opened
    opened.close()


def test_a_rule_snapshot_goes_from_queued_through_catching_up_to_in_sync(store, tmp_path):
    clock = ManualClock()
    watermarks: list[Watermark] = []
    source = SnapshotSyncStates(tmp_path / "position.sqlite", CAPTURE,
                                lambda: [rule("crew-list", 3)], lambda: watermarks)
    snapshot = store.request_once_for_rule(CAPTURE, "erp", "crew_list", ("crew-list", 3),
                                           chunk_rows=100, actor="system", now=clock())
    assert snapshot is not None

    queued, = source()
    assert (queued.rule_id, queued.rule_version, queued.table, queued.phase,
            queued.snapshot_id) == ("crew-list", 3, "erp.crew_list", pb.SYNC_QUEUED, snapshot)
    assert not queued.HasField("rows_total") and queued.started_at_micros == 0

    clock.advance(5)
    started = clock()
    store.start(snapshot, rows_total=150, chunks_total=2, now=started)
    store.chunk_done(snapshot, (100,), 100, {("t", 0): 40}, clock(), last=False)
    reading, = source()
    assert (reading.phase, reading.rows_sent, reading.rows_total) == (
        pb.SYNC_SNAPSHOTTING, 100, 150)
    assert reading.started_at_micros == micros(started) and reading.finished_at_micros == 0

    clock.advance(7)
    store.chunk_done(snapshot, (150,), 50, {("t", 0): 60, ("t", 1): 9}, clock(), last=True)
    watermarks[:] = [watermark("t", 0, 50)]  # partition 1: nothing answered yet
    catching_up, = source()
    assert (catching_up.phase, catching_up.rows_sent, catching_up.lag_records) == (
        pb.SYNC_CATCHING_UP, 150, 10 + 10)
    assert catching_up.finished_at_micros == micros(clock())

    watermarks[:] = [watermark("t", 0, 60), watermark("t", 1, 9)]
    in_sync, = source()
    assert (in_sync.phase, in_sync.lag_records) == (pb.SYNC_IN_SYNC, 0)


def test_active_rules_without_a_snapshot_of_their_version_show_none(store):
    clock = ManualClock()
    store.request_once_for_rule(CAPTURE, "erp", "crew_list", ("crew-list", 1), chunk_rows=10,
                                actor="system", now=clock())
    store.request_once_for_rule(CAPTURE, "erp", "gone", ("retired", 1), chunk_rows=10,
                                actor="system", now=clock())
    active = [ActiveRule.of(rule("crew-list", 2)), ActiveRule.of(rule("cargo", 5, "cargo"))]
    states = sync_states(store.requests(), active, {})
    assert [(s.rule_id, s.rule_version, s.table, s.phase, s.snapshot_id) for s in states] == [
        ("cargo", 5, "erp.cargo", pb.SYNC_NONE, 0),
        ("crew-list", 2, "erp.crew_list", pb.SYNC_NONE, 0),
    ]


def test_tables_report_their_last_snapshot_no_rule_asked_for(store, tmp_path):
    clock = ManualClock()
    first = store.request(CAPTURE, "erp", "parts", keys=None, chunk_rows=10, reason="onboard",
                          actor="user:ann", now=clock())
    store.start(first, 10, 1, clock())
    store.fail(first, "table dropped", clock())
    repair = store.request(CAPTURE, "erp", "parts", keys=[(1,), (2,)], chunk_rows=10,
                           reason="repair", actor="user:ann", now=clock())
    other = store.request(CAPTURE, "erp", "orders", keys=None, chunk_rows=10, reason="r",
                          actor="user:ann", now=clock())
    store.start(other, 10, 1, clock())
    store.fail(other, "table dropped", clock())
    store.request("sync.cdc.another-capture", "erp", "stock", keys=None, chunk_rows=10,
                  reason="r", actor="a", now=clock())

    states = by_subject(SnapshotSyncStates(tmp_path / "position.sqlite", CAPTURE, list,
                                           list)())
    assert sorted(states) == ["erp.orders", "erp.parts"]
    assert (states["erp.parts"].snapshot_id, states["erp.parts"].phase) == (
        repair, pb.SYNC_QUEUED)
    assert states["erp.parts"].rule_id == "" and states["erp.parts"].rule_version == 0
    assert not states["erp.parts"].HasField("rows_total")  # not counted before reading
    assert states["erp.orders"].rows_total == 10
    assert states["erp.orders"].phase == pb.SYNC_FAILED
    assert states["erp.orders"].finished_at_micros == micros(clock())


def test_without_a_position_file_only_active_rules_are_reported(tmp_path):
    source = SnapshotSyncStates(tmp_path / "absent.sqlite", CAPTURE,
                                lambda: [rule("crew-list", 1)], list)
    assert [(s.rule_id, s.phase) for s in source()] == [("crew-list", pb.SYNC_NONE)]
    assert not (tmp_path / "absent.sqlite").exists()
    assert [s.phase for s in SnapshotSyncStates(None, "", lambda: [rule("a", 1)], list)()] == [
        pb.SYNC_NONE]


def test_an_unreadable_position_file_repeats_the_last_states(store, tmp_path):
    clock = ManualClock()
    store.request(CAPTURE, "erp", "parts", keys=None, chunk_rows=10, reason="r", actor="a",
                  now=clock())
    path = tmp_path / "position.sqlite"
    source = SnapshotSyncStates(path, CAPTURE, list, list)
    before = source()
    assert [s.table for s in before] == ["erp.parts"]
    source.position_path = tmp_path  # a directory: sqlite cannot open it
    assert source() == before


def test_a_heartbeat_carries_at_most_the_limit_and_the_shore_accepts_what_a_ship_sends():
    active = [ActiveRule(f"rule-{number:05d}", 1, "erp.t") for number in range(
        MAX_SYNC_STATES + 5)]
    states = sync_states([], active, {})
    assert len(states) == MAX_SYNC_STATES
    heartbeat = build_heartbeat("ship-1", ManualClock()(), [], [], [], sync_states=states)
    parsed = codec.parse_message(heartbeat.SerializeToString(), pb.Heartbeat)
    rows = checked_sync_states(parsed.sync_states)
    assert len(rows) == MAX_SYNC_STATES
    assert (rows[0].subject, rows[0].phase, rows[0].snapshot_id) == (
        "rule:rule-00000", "NONE", None)


def test_a_heartbeat_of_a_ship_without_sync_states_is_read_as_none():
    old = pb.Heartbeat(protocol_version=codec.PROTOCOL_VERSION, node_id="ship-1",
                       rules=[pb.RuleActivation(rule_id="crew", active_version=1)])
    parsed = codec.parse_message(old.SerializeToString(), pb.Heartbeat)
    assert list(parsed.sync_states) == [] and checked_sync_states(parsed.sync_states) == []


def state(**fields: object) -> pb.SyncState:
    base: dict[str, object] = {"rule_id": "crew-list", "rule_version": 2,
                               "table": "erp.crew_list", "phase": pb.SYNC_CATCHING_UP,
                               "snapshot_id": 4, "rows_sent": 10, "rows_total": 10,
                               "lag_records": 3}
    base.update(fields)
    return pb.SyncState(**base)  # type: ignore[arg-type]


def test_the_shore_keeps_rules_and_tables_under_their_subject():
    rows = checked_sync_states([
        state(started_at_micros=micros(ManualClock()())),
        state(rule_id="", rule_version=0, table="erp.parts", phase=pb.SYNC_IN_SYNC),
    ])
    assert [(r.subject, r.rule_id, r.phase, r.rows_total, r.lag_records) for r in rows] == [
        ("rule:crew-list", "crew-list", "CATCHING_UP", 10, 3),
        ("table:erp.parts", None, "IN_SYNC", 10, 3)]
    assert rows[0].started_at == ManualClock()() and rows[1].started_at is None


@pytest.mark.parametrize("bad", [
    state(rule_id="Not A Rule"),
    state(table="no_database"),
    state(table="erp." + "t" * 65),
    state(table="erp.cr\x00ew"),
    state(rule_id="", rule_version=3, table="erp.parts"),
    state(phase=pb.SYNC_PHASE_UNSPECIFIED),
    state(phase=99),
    state(rows_sent=-1),
    state(lag_records=-5),
    state(phase=pb.SYNC_NONE),
    state(snapshot_id=0),
    state(started_at_micros=2**62),
])
def test_the_shore_refuses_a_state_beyond_its_limits(bad: pb.SyncState):
    with pytest.raises(BadSyncState):
        checked_sync_states([bad])


def test_the_shore_refuses_too_many_states_and_a_subject_twice():
    with pytest.raises(TooManySyncStates):
        checked_sync_states([state(rule_id=f"r{n}") for n in range(MAX_SYNC_STATE_REPORTS + 1)])
    with pytest.raises(BadSyncState):
        checked_sync_states([state(), state(rule_version=3)])
