"""Recording a large poll: capture look-ups over more records than one statement takes, and
the sequence-numbered copies of the events handed on to the send window."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_ship_state import NODE, event, event_record
from tidesync.ship.state import SQLiteShipState


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    yield state
    state.close()


def test_records_the_capture_emitted_again_are_duplicates_however_many_in_one_poll(
        store: SQLiteShipState) -> None:
    count = 1_234  # more than one look-up statement holds
    first = store.record([event_record(offset, offset, binlog_pos=10_000 + offset)
                          for offset in range(count)], 0)
    assert [e.source_sequence for e in first.sendable] == list(range(1, count + 1))
    again = store.record([event_record(count + offset, offset, binlog_pos=10_000 + offset)
                          for offset in range(count)]
                         + [event_record(2 * count, 99_999)], 0)
    assert again.duplicates == count
    assert [(e.source_position, e.source_sequence) for e in again.sendable] == [
        (2 * count, count + 1)]
    originals = dict(store.conn.execute(
        "SELECT kafka_offset, event_id FROM event_state WHERE kafka_offset < ?", (count,)))
    duplicates = dict(store.conn.execute(
        "SELECT kafka_offset - ?, duplicate_of FROM event_state"
        " WHERE kafka_offset >= ? AND kafka_offset < ?", (count, count, 2 * count)))
    assert duplicates == originals


def test_an_event_with_its_sequence_is_the_event_replaced_with_it() -> None:
    original = event(3, 7)
    numbered = original.with_source_sequence(42)
    assert numbered == dataclasses.replace(original, source_sequence=42)
    assert numbered.source_sequence == 42 and original.source_sequence is None
    assert numbered.with_source_sequence(42) is numbered
