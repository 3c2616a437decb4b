"""Partition watermark math without SQLite (hypothesis): received and terminal offsets stop
exactly before the first gap, never pass what was read, never move backwards, and the queue
commit (terminal + 1) never passes an open record."""

from __future__ import annotations

import enum

from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.watermarks import (
    OpenPositions,
    PartitionOffsets,
    advance,
    starting_offsets,
)


class Status(enum.Enum):
    """A record's place in the model partition (skipped records have no row: never open)."""

    SKIPPED = 0
    UNRECEIVED = 1
    RECEIVED = 2
    TERMINAL = 3


statuses = st.sampled_from(list(Status))
partitions = st.tuples(st.integers(0, 10_000), st.lists(statuses, max_size=40))


def open_positions(first: int, records: list[Status]) -> OpenPositions:
    """What the state store's partial indexes answer for these records."""
    open_ = [first + i for i, s in enumerate(records) if s in (Status.UNRECEIVED,
                                                               Status.RECEIVED)]
    unreceived = [first + i for i, s in enumerate(records) if s is Status.UNRECEIVED]
    return OpenPositions(min(open_, default=None), min(unreceived, default=None))


def model_offset(first: int, records: list[Status], done: set[Status]) -> int:
    """The last offset with every record from `first` up to it skipped or in `done`."""
    offset = first - 1
    for status in records:
        if status is not Status.SKIPPED and status not in done:
            break
        offset += 1
    return offset


def offsets_of(first: int, records: list[Status]) -> PartitionOffsets:
    return advance(starting_offsets(first), first + len(records) - 1,
                   open_positions(first, records))


@given(partitions)
def test_offsets_stop_exactly_before_the_first_gap(partition: tuple[int, list[Status]]) -> None:
    first, records = partition
    offsets = offsets_of(first, records)
    assert offsets.read_offset == first + len(records) - 1
    assert offsets.terminal_offset == model_offset(first, records, {Status.TERMINAL})
    assert offsets.received_offset == model_offset(first, records,
                                                   {Status.TERMINAL, Status.RECEIVED})


@given(partitions)
def test_base_terminal_received_read_stay_ordered(partition: tuple[int, list[Status]]) -> None:
    first, records = partition
    offsets = offsets_of(first, records)
    assert (offsets.base_offset <= offsets.terminal_offset <= offsets.received_offset
            <= offsets.read_offset)
    assert offsets.open_records == offsets.read_offset - offsets.terminal_offset >= 0


@given(partitions)
def test_the_commit_never_passes_an_open_record(partition: tuple[int, list[Status]]) -> None:
    first, records = partition
    offsets = offsets_of(first, records)
    first_open = open_positions(first, records).first_open
    assert offsets.commit_offset == offsets.terminal_offset + 1
    if first_open is not None:
        assert offsets.commit_offset <= first_open


@given(partitions, st.integers(-1, 10))
def test_a_commit_is_due_only_past_what_the_queue_holds(partition: tuple[int, list[Status]],
                                                        committed_delta: int) -> None:
    first, records = partition
    offsets = offsets_of(first, records)
    assert offsets.commit_due == (offsets.commit_offset > first)  # nothing committed yet
    committed = first + committed_delta
    with_commit = PartitionOffsets(offsets.base_offset, offsets.read_offset,
                                   offsets.received_offset, offsets.terminal_offset, committed)
    assert with_commit.commit_due == (offsets.commit_offset > committed)


@given(partitions)
def test_advancing_again_changes_nothing(partition: tuple[int, list[Status]]) -> None:
    first, records = partition
    offsets = offsets_of(first, records)
    again = advance(offsets, offsets.read_offset, open_positions(first, records))
    assert again == offsets


# A step either reads one more record or moves one record's state forward.
steps = st.lists(st.tuples(st.booleans(), statuses, st.integers(0, 1_000)), max_size=60)


@given(st.integers(0, 10_000), steps)
def test_watermarks_never_move_backwards(
        first: int, moves: list[tuple[bool, Status, int]]) -> None:
    records: list[Status] = []
    offsets = starting_offsets(first)
    for read_more, status, pick in moves:
        if read_more or not records:
            records.append(status)
        else:
            index = pick % len(records)
            if records[index] is not Status.SKIPPED:  # states only move forward
                records[index] = Status(max(records[index].value, status.value, 1))
        moved = advance(offsets, first + len(records) - 1, open_positions(first, records))
        assert moved.read_offset >= offsets.read_offset
        assert moved.received_offset >= offsets.received_offset
        assert moved.terminal_offset >= offsets.terminal_offset
        assert moved.commit_offset >= offsets.commit_offset
        offsets = moved
