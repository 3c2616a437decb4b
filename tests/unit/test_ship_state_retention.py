"""Applied events are pruned from the ship state file once the queue commit is far enough past
them: the file stops growing with every event ever sent, while reports still count them, the
newest rows still recognise a record the capture emits again, and rejected, conflicting and
unanswered events stay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_ship_state import KEY, NODE, TOPIC, event_record
from tidesync.config import ShipConfig
from tidesync.ship.shore_answers import terminal_results
from tidesync.ship.state import SQLiteShipState
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import OffsetRanges, Stream


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    # 100 events: 0–89 answered (10 rejected, 20 a conflict, the rest applied), 90–99 not yet.
    ids = [e.event_id for e in state.record([event_record(o, o) for o in range(100)],
                                            0).sendable]
    page = pb.ReceiptsPage(results=[
        pb.EventResult(event_id=ids[10].bytes, result=pb.REJECTED, reason_code="FK_MISSING"),
        pb.EventResult(event_id=ids[20].bytes, result=pb.CONFLICT_RECORDED)])
    applied = OffsetRanges({Stream(TOPIC, 0, 0): [(0, 9), (11, 19), (21, 89)]})
    state.receipts.apply_receipts(terminal_results(page), "2", applied)
    yield state
    state.close()


def offsets(store: SQLiteShipState) -> list[int]:
    return [row[0] for row in store.conn.execute(
        "SELECT kafka_offset FROM event_state ORDER BY kafka_offset")]


def test_only_applied_events_far_enough_behind_the_commit_are_pruned(
        store: SQLiteShipState) -> None:
    assert store.prune(store.watermarks(), 30, 1000) == 0  # nothing committed yet
    store.mark_committed({KEY: 90})
    counts, verdicts = store.state_counts(), store.reports.shore_verdicts()
    assert store.prune(store.watermarks(), 30, 1000) == 58  # applied ones below 90 - 30
    assert offsets(store) == [10, 20, *range(60, 100)]
    assert store.state_counts() == counts == {"TERMINAL": 90, "READY": 10}
    assert store.reports.shore_verdicts() == verdicts
    assert verdicts.by_result == {"APPLIED": 88, "CONFLICT_RECORDED": 1, "REJECTED": 1}
    assert store.prune(store.watermarks(), 30, 1000) == 0


def test_pruning_goes_a_chunk_at_a_time_and_survives_a_restart(
        store: SQLiteShipState, tmp_path: Path) -> None:
    store.mark_committed({KEY: 90})
    assert [store.prune(store.watermarks(), 30, 25) for _ in range(3)] == [25, 25, 8]
    store.close()
    reopened = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    try:
        assert reopened.prune(reopened.watermarks(), 30, 25) == 0
        assert reopened.state_counts() == {"TERMINAL": 90, "READY": 10}
        reopened.mark_committed({KEY: 100})
        assert reopened.prune(reopened.watermarks(), 30, 25) == 10  # 60–69
        assert offsets(reopened) == [10, 20, *range(70, 100)]
    finally:
        reopened.close()


def test_the_newest_rows_still_recognise_a_record_the_capture_emits_again(
        store: SQLiteShipState) -> None:
    store.mark_committed({KEY: 90})
    store.prune(store.watermarks(), 30, 1000)
    # Emitted again after a capture crash, at new offsets: the one still kept is known.
    again = store.record([event_record(100, 75, binlog_pos=1075)], 0)
    assert (again.duplicates, again.new_events) == (1, 0)


def test_retention_is_a_ship_setting() -> None:
    assert ShipConfig(node_id="s").state_retain_offsets == 200_000
    assert ShipConfig(node_id="s", state_retain_offsets=0).validate() == []
    assert ShipConfig(node_id="s", state_retain_offsets=-1).validate() == [
        "ship.state_retain_offsets: must be >= 0 (0 keeps every row)"]
