"""SNAPSHOT events on the shore: upsert-if-not-newer under the revision condition
(docs/onboarding.md): insert when absent, nothing when the row holds the same revision, an
overwrite when the row was last written from the snapshot's origin, a conflict when the row
was changed here (or by another node), and never a second write of a snapshot row."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import target_events
from tests.target_events import SHIP, SHORE, insert, update
from tidesync.domain.change_event import ChangeEvent, Operation, Revision
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

DB = "fleet_erp"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "shore.sqlite"
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE parts (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                           " qty INT)")
        enable_sqlite_table(connection, "parts", SHORE)
    return file


@pytest.fixture
def applier(path: Path) -> Iterator[SQLiteTargetApplier]:
    target = SQLiteTargetApplier(path, node_id=SHORE)
    yield target
    target.close()


def _rows(file: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(file)) as connection:
        return connection.execute("SELECT id, name, qty, _sync_origin FROM parts"
                                  " ORDER BY id").fetchall()


def _snapshot(row: dict[str, Any], result: Revision | None = None) -> ChangeEvent:
    return target_events.change(Operation.SNAPSHOT, DB, "parts", {"id": row["id"]},
                                after=row, result=result)


def _apply(applier: SQLiteTargetApplier, event: ChangeEvent) -> tuple[TargetOutcomeKind, str]:
    [outcome] = applier.apply_chunk([event])
    return outcome.kind, outcome.reason_code


def test_a_snapshot_row_missing_on_the_shore_is_inserted(path, applier):
    assert _apply(applier, _snapshot({"id": 1, "name": "pump", "qty": 3})) == (
        TargetOutcomeKind.APPLIED, "")
    assert _rows(path) == [(1, "pump", 3, SHIP)]


def test_a_snapshot_row_with_the_shore_revision_writes_nothing(path, applier):
    first = insert(DB, "parts", {"id": 1, "name": "pump", "qty": 3})
    applier.apply_chunk([first])
    again = _snapshot({"id": 1, "name": "pump", "qty": 3}, result=first.result_revision)
    assert _apply(applier, again) == (TargetOutcomeKind.ALREADY_APPLIED, "SAME_REVISION")
    assert _rows(path) == [(1, "pump", 3, SHIP)]


def test_a_row_last_written_from_the_ship_is_overwritten_by_its_snapshot(path, applier):
    """The shore holds an older version from this ship (its later change never landed): the
    snapshot, which follows every earlier change of its partition, brings it up to date, and
    the ship's next change applies on top of the snapshot's revision."""
    applier.apply_chunk([insert(DB, "parts", {"id": 1, "name": "pump", "qty": 3})])
    snapshot = _snapshot({"id": 1, "name": "pump", "qty": 7})
    assert _apply(applier, snapshot) == (TargetOutcomeKind.APPLIED, "")
    assert _rows(path) == [(1, "pump", 7, SHIP)]
    later = update(DB, "parts", {"id": 1, "name": "pump", "qty": 7}, {"qty": 8},
                   base=snapshot.result_revision)
    assert _apply(applier, later)[0] is TargetOutcomeKind.APPLIED
    assert _rows(path) == [(1, "pump", 8, SHIP)]


def test_a_row_changed_on_the_shore_is_a_conflict_not_an_overwrite(path, applier):
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("INSERT INTO parts (id, name, qty) VALUES (1, 'shore edit', 5)")
    kind, reason = _apply(applier, _snapshot({"id": 1, "name": "pump", "qty": 7}))
    assert (kind, reason) == (TargetOutcomeKind.CONFLICT, "ROW_EXISTS")
    assert _rows(path) == [(1, "shore edit", 5, SHORE)]


def test_a_row_written_by_another_ship_is_a_conflict(path, applier):
    applier.apply_chunk([insert(DB, "parts", {"id": 1, "name": "other", "qty": 1},
                                origin="ship-0099")])
    kind, _ = _apply(applier, _snapshot({"id": 1, "name": "pump", "qty": 7}))
    assert kind is TargetOutcomeKind.CONFLICT
    assert _rows(path) == [(1, "other", 1, "ship-0099")]


def test_a_snapshot_row_sent_again_never_undoes_a_newer_change(path, applier):
    snapshot = _snapshot({"id": 1, "name": "pump", "qty": 7})
    applier.apply_chunk([snapshot])
    newer = update(DB, "parts", {"id": 1, "name": "pump", "qty": 7}, {"qty": 9},
                   base=snapshot.result_revision)
    applier.apply_chunk([newer])
    assert _apply(applier, snapshot) == (TargetOutcomeKind.ALREADY_APPLIED, "IN_LEDGER")
    assert _rows(path) == [(1, "pump", 9, SHIP)]


def test_snapshot_and_changes_in_one_chunk_apply_in_order(path, applier):
    applier.apply_chunk([insert(DB, "parts", {"id": 2, "name": "old", "qty": 1})])
    snapshot = _snapshot({"id": 2, "name": "new", "qty": 2})
    newer = update(DB, "parts", {"id": 2, "name": "new", "qty": 2}, {"qty": 4},
                   base=snapshot.result_revision)
    outcomes = applier.apply_chunk([snapshot, _snapshot({"id": 3, "name": "x", "qty": 0}),
                                    newer])
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 3
    assert _rows(path) == [(2, "new", 4, SHIP), (3, "x", 0, SHIP)]
