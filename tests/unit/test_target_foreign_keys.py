"""An applier that waits for foreign keys answers a broken one with ForeignKeyPending and
commits nothing of the chunk; one that does not (the default) rejects that event only."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.target_events import SHORE, insert
from tidesync.target.cas import ForeignKeyPending
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

DB = "fleet"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "shore.sqlite"
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY, note VARCHAR(20))")
        connection.execute("CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER"
                           " NOT NULL REFERENCES parent (id))")
        for table in ("parent", "child"):
            enable_sqlite_table(connection, table, SHORE)
    return file


def rows(path: Path, table: str) -> list[tuple[int, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()


def chunk() -> list:
    return [insert(DB, "parent", {"id": 1, "note": "p"}),
            insert(DB, "child", {"id": 10, "parent_id": 1}),
            insert(DB, "child", {"id": 11, "parent_id": 2})]


def test_a_waiting_applier_raises_pending_and_commits_nothing(path):
    applier = SQLiteTargetApplier(path, node_id=SHORE)
    applier.wait_for_foreign_keys(True)
    events = chunk()
    try:
        with pytest.raises(ForeignKeyPending) as pending:
            applier.apply_chunk(events)
    finally:
        applier.close()
    assert pending.value.event_id == events[2].event_id
    assert pending.value.reason_code == "FK_WAITING"
    assert pending.value.table.endswith("child")
    assert rows(path, "parent") == [] and rows(path, "child") == []


def test_by_default_the_violating_event_alone_is_rejected(path):
    applier = SQLiteTargetApplier(path, node_id=SHORE)
    try:
        outcomes = applier.apply_chunk(chunk())
    finally:
        applier.close()
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 2 + [
        TargetOutcomeKind.REJECTED]
    assert outcomes[2].reason_code == "CONSTRAINT_VIOLATION"
    assert rows(path, "parent") == [(1,)] and rows(path, "child") == [(10,)]
