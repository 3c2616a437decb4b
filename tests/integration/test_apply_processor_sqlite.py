"""The apply processor on the embedded SQLite store: event streams, inbox and views in one
SQLite file, a SQLite business database as the target (SQLiteTargetApplier). The scenarios of
test_apply_processor.py: order, exactly once and receipts, conflicts, gaps, transient errors,
dead letters and replay, permanent rejections, and recovery from the ledger after a crash
between the target commit and the finalize. Needs no service."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.integration.shore_support import ShipLog
from tests.integration.sqlite_support import (
    SQLiteShore,
    make_sqlite_target,
    sqlite_shore,
    target_items,
    target_ledger,
    target_rows,
)
from tests.integration.test_apply_processor import Clock, drain, node
from tests.integration.test_ingress_sqlite import sqlite_config
from tidesync.bootstrap import event_store_env
from tidesync.config import ProjectionsConfig, TargetConfig
from tidesync.domain.apply_job import ApplyJob, ErrorClass, apply_job_id
from tidesync.domain.backoff import Backoff
from tidesync.domain.conflict_case import ConflictCase, record_key_digest, rule_for
from tidesync.projections.operations import OperationsApplication
from tidesync.projections.sqlite_runner import (
    SQLiteProjectionRunner,
    SQLiteReceiptsProjection,
    SQLiteRecordHeadProjection,
)
from tidesync.projections.sqlite_views import rebuild_sqlite_view
from tidesync.shore.jobs import ReplayRefused, replay, summarize
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.worker import build_worker
from tidesync.target.sqlite import SQLiteTargetApplier

SHORE_NODE = "shore"


@pytest.fixture
def shore(tmp_path: Path) -> Iterator[SQLiteShore]:
    with sqlite_shore(tmp_path / "shore-events.sqlite") as opened:
        yield opened


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return make_sqlite_target(tmp_path / "business.sqlite", SHORE_NODE)


@pytest.fixture
def appliers(target: Path) -> Iterator[list[SQLiteTargetApplier]]:
    made: list[SQLiteTargetApplier] = []
    yield made
    for applier in made:
        applier.close()


def make_processor(shore: SQLiteShore, appliers: list[SQLiteTargetApplier], target: Path,
                   clock: Clock, worker: str = "w1", busy_timeout: float = 10.0,
                   **settings: object) -> ApplyProcessor:
    applier = SQLiteTargetApplier(target, node_id=SHORE_NODE, busy_timeout=busy_timeout)
    appliers.append(applier)
    return ApplyProcessor(shore.apps.apply_jobs, shore.apps.conflicts, shore.queue(), applier,
                          clock, ProcessorSettings(worker_id=worker, **settings),  # type: ignore[arg-type]
                          draw=lambda: 0.5)


def test_events_apply_in_order_exactly_once_with_receipts(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(1, "anchor", 3, "10.50"), ship.insert(2, "rope", 7, "2.25"),
              ship.update(1, qty=4), ship.update(1, name="anchor-xl", price=Decimal("11.00")),
              ship.delete(2), ship.insert(3, "buoy", 1, "99.99")]
    shore.receive(ship.node_id, events[:3])
    shore.receive(ship.node_id, events[3:])
    again = shore.receive(ship.node_id, events[1:4])  # a retransmission overlapping both
    assert {s.reason_code for s in again.statuses} == {"DUPLICATE_EVENT"}
    processor = make_processor(shore, appliers, target, Clock())

    assert drain(processor) == 6

    rows = target_items(target)
    assert set(rows) == {1, 3}
    assert rows[1][:2] == ("anchor-xl", 4) and Decimal(str(rows[1][2])) == Decimal("11.00")
    assert rows[1][3] == ship.rows[1][1].text  # the ship's revision, not a new one
    assert rows[1][4] == ship.node_id and rows[1][5] == str(events[3].event_id)
    assert sorted(target_ledger(target)) == sorted(str(e.event_id) for e in events)
    assert set(shore.inbox_states(ship.node_id).values()) == {("TERMINAL", "APPLIED")}

    receipts = SQLiteProjectionRunner(SQLiteReceiptsProjection(), shore.apps.apply_jobs,
                                      shore.connections)
    assert receipts.run_until_idle() > 0
    assert receipts.run_until_idle() == 0  # exactly once: nothing left to project
    got = shore.rows("SELECT event_id, result, source_position FROM receipt"
                     " WHERE origin_node_id = ? ORDER BY seq", (ship.node_id,))
    assert [(uuid.UUID(r[0]), r[1]) for r in got] == [(e.event_id, "APPLIED") for e in events]
    assert [r[2] for r in got] == [e.source_position for e in events]
    status = receipts.status()
    assert status.position >= 1 and status.processed >= 1


def test_record_head_holds_the_newest_applied_revision_of_each_record(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    events = {"i1": ship.insert(1, "anchor", 3, "10.50"), "i2": ship.insert(2, "rope", 7, "2.25"),
              "u1": ship.update(1, qty=4), "d2": ship.delete(2),
              "i3": ship.insert(3, "buoy", 1, "99.99"), "u3": ship.update(3, qty=2)}
    shore.receive(ship.node_id, list(events.values()))
    drain(make_processor(shore, appliers, target, Clock()))

    # Small batches: a record's newest result wins across batches too.
    heads = SQLiteProjectionRunner(SQLiteRecordHeadProjection(), shore.apps.apply_jobs,
                                   shore.connections, batch_size=1)
    assert heads.run_until_idle() > 0
    assert heads.run_until_idle() == 0  # exactly once: nothing left to project
    query = ("SELECT last_event_id, key_digest, record_key, database, table_name, revision,"
             " tombstone FROM record_head WHERE origin_node_id = ? ORDER BY last_event_id")
    rows = shore.rows(query, (ship.node_id,))
    by_event = {uuid.UUID(row[0]): row for row in rows}
    expected = {"u1": 0, "d2": 1, "u3": 0}
    assert set(by_event) == {events[name].event_id for name in expected}
    for name, tombstone in expected.items():
        event = events[name]
        row = by_event[event.event_id]
        assert row[1] == record_key_digest(rule_for(event), event)
        assert row[2] == event.record.canonical()
        assert (row[3], row[4]) == ("shipdb", "items")
        assert row[5] == event.result_revision.text and row[6] == tombstone
    status = heads.status()
    assert status.behind == 0 and status.pending == 0 and status.processed >= 1

    # Rebuilt in place from position 0, as an audited operator action: the same rows.
    operations = OperationsApplication(env=event_store_env(shore.store))
    try:
        result = rebuild_sqlite_view("record_head", apps={
            "apply_jobs": shore.apps.apply_jobs, "operations": operations},
            connections=shore.connections, actor="alice", reason="check the twin")
        action = operations.action(result.action_id)
    finally:
        operations.close()
    assert result.rows == {"record_head": len(shore.rows("SELECT 1 FROM record_head"))}
    assert result.positions == {"record_head": status.position}
    assert shore.rows(query, (ship.node_id,)) == rows
    assert (action.outcome, action.requested_by, action.reason) == (
        "COMPLETED", "alice", "check the twin")


def test_shore_work_on_sqlite_keeps_receipts_and_record_head(shore, target, appliers):
    config = dataclasses.replace(
        sqlite_config(shore.path), target=TargetConfig(node_id=SHORE_NODE,
                                                       sqlite_path=str(target)),
        projections=ProjectionsConfig(batch_size=2))
    ship = ShipLog(node(), "shipdb")
    shore.receive(ship.node_id, [ship.insert(k, f"part-{k}", k, "1.00") for k in range(1, 6)]
                  + [ship.delete(5)])
    applier = SQLiteTargetApplier(target, node_id=SHORE_NODE)
    worker, close = build_worker(config, applier)
    try:
        assert [runner.tracking_name for runner in worker.projections] == [
            "receipts", "record_head"]
        assert all(runner.batch_size == 2 for runner in worker.projections)  # type: ignore[attr-defined]
        for _ in range(10):
            if worker.run_once() == 0:
                break
    finally:
        close()
    assert shore.rows("SELECT count(*) FROM receipt WHERE origin_node_id = ?",
                      (ship.node_id,)) == [(6,)]
    assert sorted(shore.rows("SELECT tombstone FROM record_head WHERE origin_node_id = ?",
                             (ship.node_id,))) == [(0,), (0,), (0,), (0,), (1,)]
    tracked = dict(shore.rows("SELECT name, position FROM projection_tracking"))
    head = shore.apps.apply_jobs.recorder.max_notification_id()
    assert tracked == {"receipts": head, "record_head": head}


def test_a_conflict_is_captured_once_and_does_not_hold_other_keys(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    shore.receive(ship.node_id, [ship.insert(1, "anchor", 3, "10.50"),
                                 ship.insert(2, "rope", 7, "2.25")])
    processor = make_processor(shore, appliers, target, Clock())
    drain(processor)
    target_rows(target, "UPDATE items SET qty = 100 WHERE id = 1")  # a local shore edit
    shore_revision = target_items(target)[1][3]

    first, second = ship.update(1, qty=5), ship.update(1, qty=6)
    other = ship.update(2, qty=8)
    shore.receive(ship.node_id, [first, other, second])
    drain(processor)

    states = shore.inbox_states(ship.node_id)
    assert states[first.event_id] == ("TERMINAL", "CONFLICT_RECORDED")
    assert states[second.event_id] == ("TERMINAL", "CONFLICT_RECORDED")
    assert states[other.event_id] == ("TERMINAL", "APPLIED")
    assert target_items(target)[1][1] == 100 and target_items(target)[2][1] == 8
    conflict_ids = {r[0] for r in shore.rows(
        "SELECT conflict_id FROM inbox_event WHERE event_id IN (?, ?)",
        (str(first.event_id), str(second.event_id)))}
    assert len(conflict_ids) == 1  # one active case per rule + record key
    conflict_id = uuid.UUID(conflict_ids.pop())
    assert shore.rows("SELECT conflict_id FROM active_conflict") == [(str(conflict_id),)]
    case = shore.apps.conflicts.get_case(conflict_id)
    assert isinstance(case, ConflictCase)
    assert [e["event_id"] for e in case.evidence] == [str(first.event_id), str(second.event_id)]
    assert case.evidence[0]["current_revision"] == shore_revision
    assert dict((n, v) for n, v in case.evidence[0]["current_row"])["qty"] == ["int", "100"]
    queue = shore.queue()
    assert queue.active_conflict(case.rule_id, case.key_digest, uuid.uuid4()) == (
        conflict_id, False)


def test_a_sequence_gap_holds_only_what_follows_it(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    e1, e2, e3, e4 = (ship.insert(k, f"n{k}", k, "1.00") for k in (1, 2, 3, 4))
    shore.receive(ship.node_id, [e1, e2, e4])
    clock = Clock()
    processor = make_processor(shore, appliers, target, clock)

    assert drain(processor) == 2
    assert set(target_items(target)) == {1, 2}
    gap = shore.rows("SELECT gap_at_sequence FROM apply_partition WHERE origin_node_id = ?",
                     (ship.node_id,))
    assert gap == [(3,)]
    assert shore.inbox_states(ship.node_id)[e4.event_id] == ("PENDING", None)
    assert processor.run_once() == 0  # the recheck waits

    shore.receive(ship.node_id, [e3])  # the ship retransmits the missing event
    clock.advance(5)
    assert drain(processor) == 2
    assert set(target_items(target)) == {1, 2, 3, 4}


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    """Another writer holding the target file's write lock (SQLite's lock wait)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_transient_target_errors_wait_with_backoff_then_apply(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    shore.receive(ship.node_id, [ship.insert(1, "anchor", 3, "10.50")])
    clock = Clock()
    processor = make_processor(shore, appliers, target, clock, busy_timeout=0.1)
    drain(processor)
    shore.receive(ship.node_id, [update := ship.update(1, qty=9)])
    with write_lock_held(target):
        assert processor.run_once() == 0  # database busy: nothing terminal

    waiting = shore.rows("SELECT attempts, not_before FROM apply_partition"
                         " WHERE origin_node_id = ?", (ship.node_id,))
    assert waiting[0][0] == 1 and waiting[0][1] > clock.now.strftime("%Y-%m-%dT%H:%M:%S")
    assert processor.run_once() == 0  # still waiting
    clock.advance(2)
    assert drain(processor) == 1
    assert shore.inbox_states(ship.node_id)[update.event_id] == ("TERMINAL", "APPLIED")
    assert target_items(target)[1][1] == 9
    retried = shore.apps.apply_jobs.get_job(apply_job_id(ship.node_id, ship.topic, 0, 0, 2))
    recorded = [type(e).__qualname__ for e in shore.apps.apply_jobs.events.get(retried.id)]
    assert recorded == ["ApplyJob.Claimed", "ApplyJob.RetryScheduled"]


def test_exhausted_retries_go_dead_and_an_operator_replays_them(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    shore.receive(ship.node_id, [ship.insert(1, "anchor", 3, "10.50")])
    clock = Clock()
    processor = make_processor(shore, appliers, target, clock, busy_timeout=0.1,
                               backoff=Backoff(max_attempts=1))
    drain(processor)
    shore.receive(ship.node_id, [update := ship.update(1, qty=9)])
    with write_lock_held(target):
        processor.run_once()
    assert shore.inbox_states(ship.node_id)[update.event_id] == ("DEAD", None)
    queue = shore.queue()
    summary = summarize(queue, ship.node_id)
    assert [(r.state, r.error_class, r.events) for r in summary] == [("DEAD", "EXHAUSTED", 1)]
    clock.advance(3600)
    assert processor.run_once() == 0  # a dead event holds its partition

    with pytest.raises(ReplayRefused):
        replay(queue, shore.apps.apply_jobs, ErrorClass.MALFORMED, "op", "why", ship.node_id)
    assert replay(queue, shore.apps.apply_jobs, ErrorClass.EXHAUSTED, "alice",
                  "lock released", ship.node_id) == 1
    assert [(r.state, r.events) for r in summarize(queue, ship.node_id)] == [("PENDING", 1)]
    assert drain(processor) == 1
    assert target_items(target)[1][1] == 9
    job_id = shore.rows("SELECT job_id FROM inbox_event WHERE event_id = ?",
                        (str(update.event_id),))[0][0]
    assert job_id is not None


def test_crash_between_target_commit_and_finalize_recovers_from_the_ledger(
        shore, target, appliers, monkeypatch):
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 6)]
    shore.receive(ship.node_id, events)
    clock = Clock()
    crashing = make_processor(shore, appliers, target, clock, worker="w1")

    real_save = shore.apps.apply_jobs.save

    def crash_at_finalize(*aggregates, **kwargs):
        job = aggregates[0]
        if any(type(e).__qualname__ == "ApplyJob.Finalized" for e in job.pending_events):
            raise SystemExit("killed after the target commit")
        return real_save(*aggregates, **kwargs)

    monkeypatch.setattr(shore.apps.apply_jobs, "save", crash_at_finalize)
    with pytest.raises(SystemExit):
        crashing.run_once()
    monkeypatch.undo()
    assert len(target_ledger(target)) == 5  # committed in the target, not finalized
    assert set(shore.inbox_states(ship.node_id).values()) == {("PENDING", None)}

    survivor = make_processor(shore, appliers, target, clock, worker="w2")
    assert survivor.run_once() == 0  # the dead worker's lease still holds
    clock.advance(61)
    assert drain(survivor) == 5
    assert set(shore.inbox_states(ship.node_id).values()) == {("TERMINAL", "APPLIED")}
    assert len(target_ledger(target)) == 5  # applied exactly once
    assert set(target_items(target)) == {1, 2, 3, 4, 5}
    taken_over = shore.rows("SELECT count(*) FROM apply_jobs_events WHERE topic LIKE ?",
                            ("%ApplyJob.TakenOver",))
    assert taken_over == [(1,)]


def test_apply_job_stream_records_each_step(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    event = ship.insert(1, "anchor", 3, "10.50")
    shore.receive(ship.node_id, [event])
    drain(make_processor(shore, appliers, target, Clock()))
    job_id = shore.rows("SELECT job_id FROM inbox_event WHERE event_id = ?",
                        (str(event.event_id),))[0][0]
    recorded = list(shore.apps.apply_jobs.events.get(uuid.UUID(job_id)))
    assert [type(e).__qualname__ for e in recorded] == [
        "ApplyJob.Claimed", "ApplyJob.TargetCommitted", "ApplyJob.Finalized"]
    assert all(getattr(e, "actor", None) for e in recorded)
    job = shore.apps.apply_jobs.get_job(uuid.UUID(job_id))
    assert isinstance(job, ApplyJob) and job.results[str(event.event_id)].result == "APPLIED"


def test_permanent_errors_reject_one_event_and_apply_the_rest(shore, target, appliers):
    ship = ShipLog(node(), "shipdb")
    good1 = ship.insert(1, "anchor", 3, "10.50")
    too_long = ship.insert(2, "x" * 50, 1, "1.00")  # the CHECK allows 20 characters
    good2 = ship.insert(3, "buoy", 1, "1.00")
    shore.receive(ship.node_id, [good1, too_long, good2])
    drain(make_processor(shore, appliers, target, Clock()))
    states = shore.inbox_states(ship.node_id)
    assert states[too_long.event_id] == ("TERMINAL", "REJECTED")
    assert states[good1.event_id] == states[good2.event_id] == ("TERMINAL", "APPLIED")
    reason = shore.rows("SELECT reason_code, error_class FROM inbox_event WHERE event_id = ?",
                        (str(too_long.event_id),))
    assert reason == [("CONSTRAINT_VIOLATION", "DATA")]
    assert set(target_items(target)) == {1, 3}


def test_two_workers_share_partitions_without_overlap(shore, target, appliers):
    """Claims take the file's write lock: two workers never lease the same partition."""
    ships = [ShipLog(node(), "shipdb", partition=p) for p in range(4)]
    expected = []
    for number, ship in enumerate(ships):
        events = [ship.insert(number * 100 + k, f"n{k}", k, "1.00") for k in range(1, 11)]
        shore.receive(ship.node_id, events)
        expected += events
    clock = Clock()
    first = make_processor(shore, appliers, target, clock, worker="w1", max_events_per_job=4)
    second = make_processor(shore, appliers, target, clock, worker="w2", max_events_per_job=4)
    total = 0
    for _ in range(40):
        done = first.run_once() + second.run_once()
        total += done
        if done == 0:
            break
    assert total == len(expected)
    assert sorted(target_ledger(target)) == sorted(str(e.event_id) for e in expected)
