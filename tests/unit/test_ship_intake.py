"""The ship's intake policy without SQLite (hypothesis): contiguous source sequences, an event
seen before never taken twice, per-key order behind a blocked record, platform writes never
uploaded and never dropped, and re-reads that keep what was decided first."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.ship_intake import (
    DUPLICATE_RESULT,
    PLATFORM_WRITE_RESULT,
    SENDABLE,
    EventState,
    IntakeContext,
    IntakeDecisions,
    ReadRecord,
    RecordKind,
    RereadAction,
    StateReason,
    StoredRecord,
    Tally,
    decide_fresh,
    decide_reread,
    record_id,
)

NODE = "ship-7"
TOPIC = "sync.cdc.fleet.items"
KEYS = [b"key-%d" % n for n in range(4)]
CAPTURES = [b"capture-%d" % n for n in range(6)]
PLATFORM_IDS = [uuid.UUID(int=n).bytes for n in range(1, 4)]


@dataclass(frozen=True)
class Shape:
    """A record to generate: kind, key, capture coordinates, platform write id."""

    kind: RecordKind
    key: bytes | None
    capture: bytes | None
    platform_id: bytes | None


shapes = st.builds(
    Shape,
    st.sampled_from([RecordKind.EVENT] * 4 + [RecordKind.SKIP, RecordKind.BLOCK]),
    st.none() | st.sampled_from(KEYS),
    st.none() | st.sampled_from(CAPTURES),
    st.sampled_from([None] * 6 + [b""] + PLATFORM_IDS),
)


def records_of(found: list[Shape], first_offset: int = 0) -> list[ReadRecord]:
    records = []
    for index, shape in enumerate(found):
        offset = first_offset + index
        if shape.kind is RecordKind.EVENT:
            records.append(ReadRecord(offset, RecordKind.EVENT, uuid.uuid4(), shape.key,
                                      shape.capture, shape.platform_id))
        elif shape.kind is RecordKind.BLOCK:
            records.append(ReadRecord(offset, RecordKind.BLOCK,
                                      record_id(NODE, 0, TOPIC, 0, offset), shape.key,
                                      block_reason="MALFORMED_JSON", block_detail="not JSON"))
        else:
            records.append(ReadRecord(offset, RecordKind.SKIP, key_digest=shape.key))
    return records


contexts = st.builds(
    IntakeContext,
    st.integers(1, 10_000),
    st.frozensets(st.sampled_from(KEYS), max_size=2),
    st.dictionaries(st.sampled_from(CAPTURES), st.binary(min_size=16, max_size=16), max_size=2),
    st.frozensets(st.sampled_from(PLATFORM_IDS), max_size=2),
)
polls = st.tuples(st.lists(shapes, max_size=30), contexts)


def decide(poll: tuple[list[Shape], IntakeContext]) -> tuple[list[ReadRecord], IntakeDecisions]:
    found, context = poll
    records = records_of(found)
    return records, decide_fresh(records, context)


@given(polls)
def test_every_record_gets_one_decision_in_order(poll: tuple[list[Shape], IntakeContext]
                                                 ) -> None:
    records, decided = decide(poll)
    assert [d.offset for d in decided.decisions] == [r.offset for r in records]
    for record, decision in zip(records, decided.decisions, strict=True):
        assert (decision.state is None) == (record.kind is RecordKind.SKIP)
        if record.kind is RecordKind.BLOCK:
            assert (decision.state, decision.reason) == (EventState.BLOCKED, "MALFORMED_JSON")
        assert decision.sendable == (decision.tally is Tally.NEW_EVENT)


@given(polls)
def test_source_sequences_are_contiguous_over_sendable_events(
        poll: tuple[list[Shape], IntakeContext]) -> None:
    _, decided = decide(poll)
    start = poll[1].next_sequence
    sequences = [d.source_sequence for d in decided.decisions if d.source_sequence is not None]
    sendable = [d for d in decided.decisions if d.sendable]
    assert sequences == list(range(start, start + len(sendable)))
    assert all(d.source_sequence is not None for d in sendable)
    assert decided.context.next_sequence == start + len(sendable)


@given(polls)
def test_an_event_seen_before_is_never_taken_twice(poll: tuple[list[Shape], IntakeContext]
                                                   ) -> None:
    records, decided = decide(poll)
    seen = dict(poll[1].known_captures)
    for record, decision in zip(records, decided.decisions, strict=True):
        if record.kind is RecordKind.EVENT and record.capture_id in seen:
            assert decision.tally is Tally.DUPLICATE and not decision.sendable
            assert (decision.state, decision.result, decision.reason) == (
                EventState.TERMINAL, DUPLICATE_RESULT, StateReason.CAPTURE_REEMITTED)
            assert decision.duplicate_of == seen[record.capture_id]
        if decision.sendable and record.capture_id is not None:
            assert record.row_id is not None
            seen[record.capture_id] = record.row_id.bytes
    taken = [r.capture_id for r, d in zip(records, decided.decisions, strict=True)
             if d.sendable and r.capture_id is not None]
    assert len(taken) == len(set(taken))


@given(polls)
def test_nothing_of_a_blocked_key_passes_it(poll: tuple[list[Shape], IntakeContext]) -> None:
    records, decided = decide(poll)
    held = set(poll[1].blocked_keys)
    for record, decision in zip(records, decided.decisions, strict=True):
        if record.key_digest in held:
            assert not decision.sendable
        if decision.state is EventState.BLOCKED and record.key_digest is not None:
            held.add(record.key_digest)
    assert decided.context.blocked_keys == frozenset(held)


@given(polls)
def test_a_platform_write_is_never_uploaded_nor_dropped(
        poll: tuple[list[Shape], IntakeContext]) -> None:
    records, decided = decide(poll)
    proven = poll[1].proven_platform_ids
    for record, decision in zip(records, decided.decisions, strict=True):
        if record.platform_id is None or decision.tally is Tally.DUPLICATE:
            continue
        assert not decision.sendable and decision.state is not None
        if record.platform_id in proven:
            assert (decision.state, decision.result, decision.reason) == (
                EventState.TERMINAL, PLATFORM_WRITE_RESULT, StateReason.REMOTE_APPLY)
        else:  # unreadable (b"") or never applied here: blocks, with the key behind it
            assert (decision.state, decision.reason) == (EventState.BLOCKED,
                                                         StateReason.ORIGIN_UNPROVEN)


@given(polls, st.integers(0, 30))
def test_deciding_in_two_polls_is_deciding_in_one(poll: tuple[list[Shape], IntakeContext],
                                                  cut: int) -> None:
    found, context = poll
    records = records_of(found)
    whole = decide_fresh(records, context)
    head = decide_fresh(records[:cut], context)
    tail = decide_fresh(records[cut:], head.context)
    assert head.decisions + tail.decisions == whole.decisions
    assert tail.context == whole.context


# ----------------------------------------------------------------------------- re-reads


def stored_rows(records: list[ReadRecord], decided: IntakeDecisions
                ) -> dict[int, StoredRecord]:
    return {r.offset: StoredRecord(r.row_id.bytes, d.state, d.source_sequence)
            for r, d in zip(records, decided.decisions, strict=True)
            if d.state is not None and r.row_id is not None}


@given(polls)
def test_a_reread_keeps_what_was_decided_first(poll: tuple[list[Shape], IntakeContext]) -> None:
    records, decided = decide(poll)
    rows = stored_rows(records, decided)
    for record, decision in zip(records, decided.decisions, strict=True):
        action = decide_reread(record, rows.get(record.offset))
        # Sent again exactly when it was to be sent; a skip stays a skip.
        assert (action is RereadAction.SEND) == decision.sendable
        if decision.state is None:
            assert action is RereadAction.SKIP
        elif not decision.sendable:
            assert action is RereadAction.KEEP


stored_states = st.sampled_from(list(EventState))


@given(shapes, st.none() | st.builds(StoredRecord, st.binary(min_size=16, max_size=16),
                                     stored_states, st.none() | st.integers(1, 100)))
def test_a_reread_never_sends_what_is_not_recorded_as_still_to_send(
        shape: Shape, stored: StoredRecord | None) -> None:
    (record,) = records_of([shape])
    action = decide_reread(record, stored)
    if action is RereadAction.SEND:
        assert stored is not None and stored.state in SENDABLE
        assert record.row_id is not None and record.row_id.bytes == stored.row_id
    if stored is None:
        assert action in (RereadAction.SKIP, RereadAction.BLOCK_NEW)
        assert (action is RereadAction.SKIP) == (record.kind is RecordKind.SKIP)
    elif stored.state not in SENDABLE:
        assert action in (RereadAction.AWAIT_RECEIPT, RereadAction.KEEP)
    else:  # a different record at a position still to send: blocked, never sent
        assert action in (RereadAction.SEND, RereadAction.BLOCK_STORED)


@given(st.lists(shapes, min_size=1, max_size=10), st.sampled_from(list(EventState)))
def test_a_received_event_read_again_awaits_its_receipt(found: list[Shape],
                                                        state: EventState) -> None:
    records = [r for r in records_of(found) if r.kind is RecordKind.EVENT]
    for record in records:
        assert record.row_id is not None
        action = decide_reread(record, StoredRecord(record.row_id.bytes, state, 1))
        expected = (RereadAction.SEND if state in SENDABLE
                    else RereadAction.AWAIT_RECEIPT if state is EventState.RECEIVED
                    else RereadAction.KEEP)
        assert action is expected
