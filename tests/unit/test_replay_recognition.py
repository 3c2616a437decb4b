"""Replay by range on the shore side: an event read again under a new replay epoch has a new id,
but names its original one, so a target that applied the original never applies it twice —
even after the row has changed since, or was deleted and inserted again."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.target_events import SHORE, insert, update
from tests.target_events import delete as delete_event
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.replay import (
    REPLAY_OF_EPOCH,
    ReplayRange,
    ReplayRangeError,
    as_replay,
    ledger_ids,
    original_event_id,
)
from tidesync.domain.values import frozen_row
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

DB = "fleet_erp"


@pytest.fixture
def applier(tmp_path: Path) -> Iterator[SQLiteTargetApplier]:
    path = tmp_path / "shore.sqlite"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE parts (id INTEGER PRIMARY KEY, name TEXT, qty INT)")
        enable_sqlite_table(connection, "parts", SHORE)
    target = SQLiteTargetApplier(path, node_id=SHORE)
    yield target
    target.close()


def _apply(applier: SQLiteTargetApplier, event: ChangeEvent) -> tuple[TargetOutcomeKind, str]:
    [outcome] = applier.apply_chunk([event])
    return outcome.kind, outcome.reason_code


def test_a_replay_names_its_original_event() -> None:
    original = insert(DB, "parts", {"id": 1, "name": "bolt", "qty": 1})
    replayed = as_replay(original, 3)
    assert replayed.event_id != original.event_id and replayed.replay_epoch == 3
    assert replayed.source_details[REPLAY_OF_EPOCH] == 0
    assert original_event_id(replayed) == original.event_id
    assert ledger_ids(replayed) == [replayed.event_id, original.event_id]
    assert original_event_id(original) is None
    # A replay of a replay still names the first reading.
    assert original_event_id(as_replay(replayed, 4)) == original.event_id


def test_replayed_events_already_applied_are_not_applied_again(
        applier: SQLiteTargetApplier) -> None:
    row = {"id": 1, "name": "bolt", "qty": 1}
    created = insert(DB, "parts", row)
    changed = update(DB, "parts", row, {"qty": 2}, base=created.result_revision)
    assert _apply(applier, created)[0] is TargetOutcomeKind.APPLIED
    assert _apply(applier, changed)[0] is TargetOutcomeKind.APPLIED
    removed = delete_event(DB, "parts", {**row, "qty": 2}, base=changed.result_revision)
    assert _apply(applier, removed)[0] is TargetOutcomeKind.APPLIED

    for event in (created, changed, removed):
        assert _apply(applier, as_replay(event, 1)) == (TargetOutcomeKind.ALREADY_APPLIED,
                                                        "REPLAY_IN_LEDGER")
    # Without its mark the same event would have been taken for a new one: the INSERT
    # would write the deleted row back.
    unmarked = dataclasses.replace(as_replay(created, 1), source_details=frozen_row({}))
    assert _apply(applier, unmarked)[0] is TargetOutcomeKind.APPLIED


def test_a_replayed_event_the_target_never_saw_is_applied(applier: SQLiteTargetApplier) -> None:
    lost = insert(DB, "parts", {"id": 7, "name": "nut", "qty": 5})
    assert _apply(applier, as_replay(lost, 2))[0] is TargetOutcomeKind.APPLIED


def test_replay_ranges_must_be_closed_and_in_the_queue() -> None:
    with pytest.raises(ReplayRangeError):
        ReplayRange("cdc.t", 0, 10, 5)
    window = ReplayRange("cdc.t", 0, 10, 20)
    window.check_closed(low_offset=0, terminal_offset=20)
    with pytest.raises(ReplayRangeError, match="not closed"):
        window.check_closed(low_offset=0, terminal_offset=19)
    with pytest.raises(ReplayRangeError, match="no longer in the queue"):
        window.check_closed(low_offset=11, terminal_offset=30)
