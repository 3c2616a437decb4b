"""Compact acknowledgements: offset ranges round-trip, an upload answer names received events by
range and keeps every other status, a receipts page ranges plain APPLIED results and never holds
two results of one event, and the ship maps ranges back to exactly its own events."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ship_state import TOPIC, event, event_record
from tidesync.config import ShipConfig
from tidesync.ingress.answers import compact_answer
from tidesync.ingress.receipts import (
    MAX_COMPACT_PAGE,
    MAX_LISTED,
    compact_receipts_page,
    page_request,
)
from tidesync.ship.shore_answers import applied_ranges, batch_answers, terminal_results
from tidesync.ship.state import ReceiveOutcome, SQLiteShipState
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.protocol import WireError
from tidesync.wire.ranges import OffsetRanges, Stream, decode_ranges, encode_ranges

NODE = "ship-7"
DECIDED = dt.datetime(2019, 11, 1, tzinfo=dt.UTC)

offsets = st.sets(st.integers(0, 5_000), max_size=300)


@settings(max_examples=60, deadline=None)
@given(offsets, offsets, st.integers(0, 3))
def test_ranges_name_exactly_the_offsets_given(first: set[int], second: set[int],
                                               epoch: int) -> None:
    streams = (Stream("sync.cdc.a", 0, epoch), Stream("sync.cdc.b", 3, epoch))
    given_ = [(streams[0], o) for o in first] + [(streams[1], o) for o in second]
    strings, groups = encode_ranges(given_)
    message = pb.UploadBatchResponse(strings=strings, received=groups)
    decoded = decode_ranges(message.strings, pb.UploadBatchResponse.FromString(
        message.SerializeToString()).received)
    assert len(decoded) == len(given_)
    for stream, chosen in zip(streams, (first, second), strict=True):
        for offset in range(0, 5_002):
            assert decoded.contains(stream, offset) is (offset in chosen)


def test_contiguous_offsets_cost_a_few_bytes() -> None:
    strings, groups = encode_ranges((Stream("sync.cdc.fleet.items", 0, 0), o)
                                    for o in range(10_000, 20_000))
    answer = pb.UploadBatchResponse(strings=strings, received=groups)
    assert list(groups[0].ranges) == [10_000, 10_000]
    assert len(answer.SerializeToString()) < 40


@pytest.mark.parametrize("group", [
    pb.PartitionRanges(topic_ref=1, ranges=[0, 1]),  # no such name
    pb.PartitionRanges(topic_ref=0, ranges=[0]),  # cut short
    pb.PartitionRanges(topic_ref=0, ranges=[0, 0]),  # empty range
    pb.PartitionRanges(topic_ref=0, ranges=[(1 << 63), 1]),  # past the last offset
])
def test_unreadable_ranges_are_refused(group: pb.PartitionRanges) -> None:
    with pytest.raises(WireError):
        decode_ranges(["t"], [group])


def uploaded(events: list[object]) -> pb.UploadBatch:
    raw = codec.serialize_batch(codec.build_batch(
        events, node_id=NODE, batch_id=uuid.uuid4(), created_at=DECIDED))  # type: ignore[arg-type]
    return codec.parse_message(raw, pb.UploadBatch)


def test_an_upload_answer_ranges_received_events_and_keeps_every_other_status() -> None:
    events = [event(offset, offset) for offset in range(10)]
    batch = uploaded(events)  # type: ignore[arg-type]
    full = pb.UploadBatchResponse(batch_id=batch.batch_id)
    for index, wire in enumerate(batch.events):
        status = full.statuses.add(event_id=wire.event_id, status=pb.RECEIVED)
        if index == 3:
            status.status, status.reason_code = pb.PERMANENT_REJECTED, "FORGED_ORIGIN"
        if index == 5:
            status.result.CopyFrom(pb.EventResult(event_id=wire.event_id, result=pb.APPLIED))
    compact = compact_answer(batch, full)
    assert [s.event_id for s in compact.statuses] == [batch.events[3].event_id,
                                                       batch.events[5].event_id]
    answers = {a.event_id: a for a in batch_answers(events, compact)}  # type: ignore[arg-type]
    assert set(answers) == {e.event_id for e in events}
    assert answers[events[3].event_id].outcome is ReceiveOutcome.PERMANENT_REJECTED
    assert answers[events[5].event_id].result == "APPLIED"
    assert {answers[e.event_id].outcome for i, e in enumerate(events) if i != 3} == {
        ReceiveOutcome.RECEIVED}


def test_events_the_answer_does_not_name_stay_unanswered() -> None:
    events = [event(offset, offset) for offset in range(4)]
    strings, groups = encode_ranges([(Stream(TOPIC, 0, 0), 0), (Stream(TOPIC, 0, 0), 1),
                                     (Stream(TOPIC, 0, 1), 2),  # another epoch
                                     (Stream(TOPIC, 1, 0), 3)])  # another partition
    answer = pb.UploadBatchResponse(strings=strings, received=groups)
    named = {a.event_id for a in batch_answers(events, answer)}  # type: ignore[arg-type]
    assert named == {events[0].event_id, events[1].event_id}


def receipt(seq: int, event_id: uuid.UUID, offset: int, result: str = "APPLIED",
            reason: str | None = None, epoch: int | None = 0) -> tuple[object, ...]:
    return (seq, event_id, result, reason, None, TOPIC, 0, offset, epoch)


def test_a_receipts_page_ranges_plain_applied_results_only() -> None:
    ids = [uuid.uuid4() for _ in range(6)]
    rows = [receipt(10 + i, ids[i], i) for i in range(6)]
    rows[2] = receipt(12, ids[2], 2, "CONFLICT_RECORDED")
    rows[4] = receipt(14, ids[4], 4, reason="EXPIRED")
    rows[5] = receipt(15, ids[5], 5, epoch=None)  # its inbox row is gone: named by id
    page = compact_receipts_page(rows, 9, 100)
    assert [uuid.UUID(bytes=r.event_id) for r in page.results] == [ids[2], ids[4], ids[5]]
    ranges = applied_ranges(page)
    assert [o for o in range(8) if ranges.contains(Stream(TOPIC, 0, 0), o)] == [0, 1, 3]
    assert (page.next_cursor, page.has_more) == ("15", False)


def test_a_second_result_of_one_event_starts_the_next_page() -> None:
    event_id = uuid.uuid4()
    rows = [receipt(1, uuid.uuid4(), 0), receipt(2, event_id, 1, "REJECTED"),
            receipt(3, event_id, 1)]
    page = compact_receipts_page(rows, 0, 100)
    assert (page.next_cursor, page.has_more) == ("2", True)
    assert [r.result for r in page.results] == [pb.REJECTED]


def test_a_ranged_page_lists_at_most_a_thousand_results_one_by_one() -> None:
    # 2,500 conflicts among applied events: each listed result costs the downlink a few dozen
    # bytes, so a page stops before the 1,001st and the next page goes on from there.
    rows = [receipt(1 + i, uuid.uuid4(), i, "CONFLICT_RECORDED" if i % 4 else "APPLIED")
            for i in range(3_400)]
    offset_of = {r[1]: r[7] for r in rows}
    seen: list[int] = []
    cursor, pages = 0, 0
    while True:
        page = compact_receipts_page([r for r in rows if int(r[0]) > cursor], cursor, 5_000)
        assert len(page.results) <= MAX_LISTED
        ranges = applied_ranges(page)
        seen += [o for o in range(3_400) if ranges.contains(Stream(TOPIC, 0, 0), o)]
        seen += [int(offset_of[uuid.UUID(bytes=r.event_id)]) for r in page.results]
        cursor, pages = int(page.next_cursor), pages + 1
        if not page.has_more:
            break
    assert pages == 3
    assert sorted(seen) == list(range(3_400))  # every result once, none skipped


def test_the_ship_applies_ranged_receipts_to_its_own_events_only(tmp_path: Path) -> None:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    try:
        ids = [e.event_id for e in state.record([event_record(o, o) for o in range(5)],
                                                0).sendable]
        ranges = OffsetRanges({Stream(TOPIC, 0, 0): [(1, 3)], Stream(TOPIC, 0, 1): [(0, 0)],
                               Stream(TOPIC, 2, 0): [(0, 4)]})
        page = pb.ReceiptsPage(results=[pb.EventResult(event_id=ids[4].bytes,
                                                       result=pb.REJECTED)])
        progress = state.receipts.apply_receipts(terminal_results(page), "7", ranges)
        assert progress.terminal == {ids[1], ids[2], ids[3], ids[4]}
        assert state.cursor() == "7"
        assert state.state_counts() == {"TERMINAL": 4, "READY": 1}
    finally:
        state.close()


def test_a_ranged_receipts_page_may_hold_ten_times_more_results() -> None:
    assert page_request("", "9000", MAX_COMPACT_PAGE) == (0, 9000)
    assert page_request("7", "50000", MAX_COMPACT_PAGE) == (7, MAX_COMPACT_PAGE)
    assert page_request("", "9000") == (0, 1000)  # entries one by one: the old cap
    assert ShipConfig(node_id="s").receipts_page_size == 5000
    assert ShipConfig(node_id="s", receipts_page_size=10_000).validate() == []
    assert ShipConfig(node_id="s", receipts_page_size=10_001).validate() == [
        "ship.receipts_page_size: must be <= 10000"]
