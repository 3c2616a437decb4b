"""The shore's later verdicts in the ship state store: a receipt for an event already terminal
(the shore replayed or skipped it) replaces its result, and `ship status` reports rejections by
reason and is not healthy while the shore holds any."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ship_state import KEY, NODE, event_record
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.ship.state import ReceiveAnswer, ReceiveOutcome, SQLiteShipState, TerminalResult


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    yield state
    state.close()


def received(store: SQLiteShipState, count: int) -> list:
    ids = [e.event_id for e in store.record([event_record(o, o) for o in range(count)],
                                            0).sendable]
    store.apply_answers([ReceiveAnswer(i, ReceiveOutcome.RECEIVED) for i in ids])
    return ids


def results(store: SQLiteShipState) -> dict:
    rows = store.conn.execute("SELECT event_id, state, result, reason FROM event_state")
    return {bytes(r[0]): tuple(r[1:]) for r in rows}


def test_a_replayed_event_moves_from_rejected_to_applied(store: SQLiteShipState) -> None:
    ids = received(store, 3)
    store.apply_receipts([TerminalResult(i, "REJECTED", "CONSTRAINT_VIOLATION") for i in ids],
                         "3")
    assert store.receipts.shore_rejections() == 3
    terminal = store.watermark(KEY)
    # The shore applied two of them after a replay, and an operator skipped the third.
    progress = store.apply_receipts([TerminalResult(ids[0], "APPLIED"),
                                     TerminalResult(ids[1], "APPLIED"),
                                     TerminalResult(ids[2], "REJECTED", "SKIPPED_BY_OPERATOR")],
                                    "6")
    assert progress.reverdicted == set(ids) and progress.terminal == set()
    assert progress.terminal_bytes == 0  # those bytes were final already
    assert results(store) == {ids[0].bytes: ("TERMINAL", "APPLIED", None),
                              ids[1].bytes: ("TERMINAL", "APPLIED", None),
                              ids[2].bytes: ("TERMINAL", "REJECTED", "SKIPPED_BY_OPERATOR")}
    assert store.receipts.shore_rejections() == 1
    assert store.watermark(KEY) == terminal  # the watermarks had passed them already
    assert store.cursor() == "6"


def test_a_ships_own_result_is_never_replaced(store: SQLiteShipState) -> None:
    ids = received(store, 1)
    store.conn.execute("UPDATE event_state SET state = 'TERMINAL', result = 'DUPLICATE'")
    progress = store.apply_receipts([TerminalResult(ids[0], "APPLIED")], "1")
    assert progress.reverdicted == set()
    assert results(store)[ids[0].bytes] == ("TERMINAL", "DUPLICATE", None)


def test_status_shows_rejections_by_reason_and_is_degraded(store: SQLiteShipState) -> None:
    ids = received(store, 6)
    store.apply_receipts([TerminalResult(i, "REJECTED", "CONSTRAINT_VIOLATION")
                          for i in ids[:3]]
                         + [TerminalResult(ids[3], "REJECTED", "UNKNOWN_COLUMN"),
                            TerminalResult(ids[4], "APPLIED")], "5")
    report = status_report(store)
    assert report["shore_verdicts"]["rejected"] == 4
    assert list(report["shore_verdicts"]["rejected_by_reason"].items()) == [
        ("CONSTRAINT_VIOLATION", 3), ("UNKNOWN_COLUMN", 1)]
    assert report["shore_verdicts"]["by_result"] == {"APPLIED": 1, "REJECTED": 4}
    assert report["overall"] == "DEGRADED"
    (line,) = [h for h in report["health"] if h["subsystem"] == "SHORE_APPLY"]
    assert line["state"] == "DEGRADED" and line["reason"] == "REJECTED_ON_SHORE"
    assert line["detail"] == ("4 events rejected on the shore: top reasons"
                              " CONSTRAINT_VIOLATION (3), UNKNOWN_COLUMN (1)")
    # Replayed and applied on the shore: nothing is held rejected, the ship is healthy again.
    store.apply_receipts([TerminalResult(i, "APPLIED") for i in ids[:4]], "9")
    report = status_report(store)
    assert report["shore_verdicts"]["rejected"] == 0
    assert report["overall"] == "HEALTHY"
    assert not [h for h in report["health"] if h["subsystem"] == "SHORE_APPLY"]


def test_the_rejection_count_is_read_from_the_file_on_restart(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    state = SQLiteShipState(path, NODE, "group-1")
    ids = received(state, 2)
    state.apply_receipts([TerminalResult(i, "REJECTED", "DATA_TOO_LONG") for i in ids], "2")
    state.close()
    again = SQLiteShipState(path, NODE, "group-1")
    try:
        assert again.receipts.shore_rejections() == 2
        again.apply_receipts([TerminalResult(ids[0], "APPLIED")], "3")
        assert again.receipts.shore_rejections() == 1
    finally:
        again.close()


VERDICTS = st.sampled_from([("APPLIED", ""), ("REJECTED", "CONSTRAINT_VIOLATION"),
                            ("REJECTED", "SKIPPED_BY_OPERATOR"), ("CONFLICT_RECORDED", "")])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), VERDICTS), max_size=30),
       st.integers(1, 6))
def test_the_latest_receipt_is_the_verdict_whatever_the_paging(
        pages: list[tuple[int, tuple[str, str]]], page_size: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        state = SQLiteShipState(Path(directory) / "ship.sqlite", NODE, "group-1",
                                durable=False)
        try:
            ids = received(state, 5)
            stream = [TerminalResult(ids[i], result, reason) for i, (result, reason) in pages]
            for start in range(0, len(stream), page_size):
                state.apply_receipts(stream[start:start + page_size], str(start))
            latest = {r.event_id.bytes: r for r in stream}
            found = results(state)
            for event_id in ids:
                last = latest.get(event_id.bytes)
                expected = (("TERMINAL", last.result, last.reason or None) if last
                            else ("RECEIVED", None, None))
                assert found[event_id.bytes] == expected
            rejected = sum(1 for r in latest.values() if r.result == "REJECTED")
            assert state.receipts.shore_rejections() == rejected
            assert state.reports.shore_verdicts().rejected == rejected
        finally:
            state.close()
