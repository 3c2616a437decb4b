"""The shore's answers over events in every state (not yet sent, received, terminal with the
shore's or the ship's own result, blocked): a receipts page's APPLIED ranges, applied with one
statement per range, leave the state store exactly as APPLIED results by event id do; an
upload's RECEIVED answers move only events not yet final, and written in place (a statement per
chunk of ids) they do what reading and writing each event's row does."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ship_state import KEY, NODE, TOPIC, event_record
from tidesync.ship.state import (
    Progress,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteShipState,
    TerminalResult,
)
from tidesync.ship.state.receipts import SHORE_RESULTS
from tidesync.wire.ranges import OffsetRanges, Stream

EVENTS = 12
PRIOR = st.sampled_from([
    ("READY", None, None), ("RECEIVED", None, None), ("RETRY_WAIT", None, None),
    ("TERMINAL", "APPLIED", None), ("TERMINAL", "APPLIED", "EXPIRED"),
    ("TERMINAL", "REJECTED", "CONSTRAINT_VIOLATION"), ("TERMINAL", "CONFLICT_RECORDED", None),
    ("TERMINAL", "DUPLICATE", None), ("BLOCKED", None, "PERMANENT_REJECTED"),
    ("EXPIRED_APPROVED", None, None),
])


def store_with(directory: str, name: str, priors: list[tuple[str, str | None, str | None]]
               ) -> tuple[SQLiteShipState, list[uuid.UUID]]:
    """A store of EVENTS events at offsets 0.., event i in priors[i] (state, result, reason)."""
    state = SQLiteShipState(Path(directory) / f"{name}.sqlite", NODE, "group-1",
                            durable=False)
    ids = [e.event_id for e in state.record([event_record(o, o) for o in range(EVENTS)],
                                            0).sendable]
    with state.database.transaction() as conn:
        conn.executemany("UPDATE event_state SET state = ?, result = ?, reason = ?,"
                         " detail = 'before' WHERE kafka_offset = ?",
                         [(*prior, offset) for offset, prior in enumerate(priors)])
        state.partition_watermarks.recompute_all(conn, [KEY])
    return state, ids


def rows(state: SQLiteShipState) -> dict[int, tuple[object, ...]]:
    return {row[0]: tuple(row[1:]) for row in state.conn.execute(
        "SELECT kafka_offset, state, result, reason, detail, updated_at FROM event_state")}


def moved(progress: Progress) -> tuple[object, ...]:
    return (progress.terminal, progress.received, progress.reverdicted,
            progress.terminal_bytes, progress.unknown)


@settings(max_examples=60, deadline=None)
@given(st.lists(PRIOR, min_size=EVENTS, max_size=EVENTS),
       st.lists(st.tuples(st.integers(0, EVENTS + 2), st.integers(0, 4)), max_size=4))
def test_applied_ranges_do_what_applied_results_by_id_do(
        priors: list[tuple[str, str | None, str | None]], spans: list[tuple[int, int]]) -> None:
    named = sorted({o for first, length in spans for o in range(first, first + length)})
    ranges: list[tuple[int, int]] = []
    for offset in named:  # sorted, disjoint, inclusive, as the wire decodes them
        if ranges and ranges[-1][1] == offset - 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    with tempfile.TemporaryDirectory() as directory:
        by_range, ids = store_with(directory, "ranges", priors)
        by_id, _ = store_with(directory, "ids", priors)
        try:
            ranged = by_range.receipts.apply_receipts([], "c", OffsetRanges(
                {Stream(TOPIC, 0, 0): ranges, Stream(TOPIC, 3, 0): [(0, 5)],
                 Stream(TOPIC, 0, 1): [(0, 5)]}))  # not this ship's events: nothing
            one_by_one = by_id.receipts.apply_receipts(
                [TerminalResult(ids[o], "APPLIED") for o in named if o < EVENTS], "c")
            assert moved(ranged) == moved(one_by_one)
            assert {o: row[:4] for o, row in rows(by_range).items()} == {
                o: row[:4] for o, row in rows(by_id).items()}
            assert by_range.receipts.shore_rejections() == by_id.receipts.shore_rejections()
            assert by_range.watermark(KEY) == by_id.watermark(KEY)
            assert by_range.cursor() == by_id.cursor() == "c"
        finally:
            by_range.close()
            by_id.close()


def test_a_range_over_events_the_shore_had_judged_otherwise_gives_its_new_verdict(
        tmp_path: Path) -> None:
    priors = [("TERMINAL", "REJECTED", "CONSTRAINT_VIOLATION"), ("READY", None, None),
              ("TERMINAL", "DUPLICATE", None), ("TERMINAL", "APPLIED", None)] + [
        ("READY", None, None)] * (EVENTS - 4)
    state, ids = store_with(str(tmp_path), "ship", priors)
    try:
        assert state.receipts.shore_rejections() == 1
        progress = state.receipts.apply_receipts([], "c", OffsetRanges(
            {Stream(TOPIC, 0, 0): [(0, 3)]}))
        assert progress.terminal == {ids[1]}
        assert progress.reverdicted == {ids[0]}  # not the ship's own DUPLICATE, not APPLIED
        assert {o: row[:3] for o, row in rows(state).items() if o < 4} == {
            0: ("TERMINAL", "APPLIED", None), 1: ("TERMINAL", "APPLIED", None),
            2: ("TERMINAL", "DUPLICATE", None), 3: ("TERMINAL", "APPLIED", None)}
        assert state.receipts.shore_rejections() == 0
    finally:
        state.close()


def test_received_answers_move_only_events_not_final(tmp_path: Path) -> None:
    priors = [("READY", None, None), ("RECEIVED", None, None), ("TERMINAL", "APPLIED", None),
              ("BLOCKED", None, "PERMANENT_REJECTED"), ("EXPIRED_APPROVED", None, None),
              ("RETRY_WAIT", None, None)] + [("READY", None, None)] * (EVENTS - 6)
    state, ids = store_with(str(tmp_path), "ship", priors)
    try:
        before = rows(state)
        stranger = uuid.uuid4()
        progress = state.apply_answers([ReceiveAnswer(i, ReceiveOutcome.RECEIVED)
                                        for i in [*ids[:6], stranger]])
        assert progress.received == {ids[0], ids[1], ids[3], ids[5]}
        assert (progress.terminal, progress.unknown) == (set(), 1)
        after = rows(state)
        assert [after[o][0] for o in range(6)] == [
            "RECEIVED", "RECEIVED", "TERMINAL", "RECEIVED", "EXPIRED_APPROVED", "RECEIVED"]
        assert after[1] == before[1]  # already received: not even its time changes
        assert after[2] == before[2] and after[4] == before[4]
        assert state.watermark(KEY) is not None
        assert state.watermark(KEY).received_offset == 5  # type: ignore[union-attr]
    finally:
        state.close()


def test_the_range_statement_knows_the_shores_results() -> None:
    from tidesync.ship.state import receipts

    listed = receipts._OTHER_VERDICTS_IN_RANGE.split("result IN (")[1].split(")")[0]
    assert {name.strip(" '") for name in listed.split(",")} == SHORE_RESULTS


ANSWER = st.sampled_from([
    (ReceiveOutcome.RECEIVED, "", None), (ReceiveOutcome.RECEIVED, "", "APPLIED"),
    (ReceiveOutcome.RECEIVED, "CONSTRAINT_VIOLATION", "REJECTED"),
    (ReceiveOutcome.RETRYABLE_FAILURE, "SHORE_BUSY", None),
    (ReceiveOutcome.PERMANENT_REJECTED, "SCHEMA_MISMATCH", None),
])


@settings(max_examples=60, deadline=None)
@given(st.lists(PRIOR, min_size=EVENTS, max_size=EVENTS),
       st.dictionaries(st.integers(0, EVENTS), ANSWER, max_size=EVENTS))
def test_an_upload_answer_written_in_place_does_what_reading_and_writing_each_row_does(
        priors: list[tuple[str, str | None, str | None]],
        answered: dict[int, tuple[ReceiveOutcome, str, str | None]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        at_once, ids = store_with(directory, "at-once", priors)
        one_by_one, _ = store_with(directory, "one-by-one", priors)
        for name in ("_terminal_in_place", "_received_in_place"):  # each row read, then written
            setattr(one_by_one.receipts, name,
                    lambda conn, answers, progress, now: (set(), answers))
        ids = [*ids, uuid.uuid4()]  # the last one is no event of this ship
        answers = [ReceiveAnswer(ids[i], outcome, reason, "", result)
                   for i, (outcome, reason, result) in sorted(answered.items())]
        try:
            together = at_once.apply_answers(answers)
            alone = [one_by_one.apply_answers([answer]) for answer in answers]
            assert moved(together) == (
                set().union(*(p.terminal for p in alone)),
                set().union(*(p.received for p in alone)), set(),
                sum(p.terminal_bytes for p in alone), sum(p.unknown for p in alone))
            assert (together.retry, together.blocked) == (
                set().union(*(p.retry for p in alone)), set().union(*(p.blocked for p in alone)))
            without_times = [{offset: row[:4] for offset, row in rows(store).items()}
                             for store in (at_once, one_by_one)]
            assert without_times[0] == without_times[1]
        finally:
            at_once.close()
            one_by_one.close()
