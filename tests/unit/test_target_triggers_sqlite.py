"""Business triggers on a SQLite target: listed, quiet during the back-fill when guarded, and a
row one of them changed is applied and marked TRIGGER_MODIFIED; plus the comparison of written
and stored values that decides it."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.target_events import SHORE, insert, update
from tidesync.domain.values import JsonText
from tidesync.target.contract import (
    TRIGGER_MODIFIED,
    TargetOutcomeKind,
    trigger_modified_outcome,
)
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table, inspect_sqlite_table
from tidesync.target.table_state import status_lines
from tidesync.target.trigger_checks import changed_columns, same_value

PARTS_DDL = ("CREATE TABLE parts (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT NOT NULL DEFAULT 0, edits INT NOT NULL DEFAULT 0)")
UPPER_NAME = ("CREATE TRIGGER parts_upper AFTER INSERT ON parts BEGIN"
              " UPDATE parts SET name = upper(NEW.name) WHERE id = NEW.id; END")
GUARDED_EDITS = ("CREATE TRIGGER parts_edits AFTER UPDATE OF name, qty ON parts"
                 " WHEN (SELECT remote_apply FROM _sync_session WHERE id = 1) IS NOT 1 BEGIN"
                 " UPDATE parts SET edits = OLD.edits + 1 WHERE id = NEW.id; END")
UNGUARDED_EDITS = ("CREATE TRIGGER parts_edits AFTER UPDATE ON parts BEGIN"
                   " UPDATE parts SET edits = OLD.edits + 1 WHERE id = NEW.id; END")


def _database(file: Path, *statements: str) -> Path:
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute(PARTS_DDL)
        connection.execute("INSERT INTO parts (id, name, qty)"
                           " VALUES (1, 'pump', 2), (2, 'hose', 5)")
        for statement in statements:
            connection.execute(statement)
    return file


def _enable(file: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        return enable_sqlite_table(connection, "parts", SHORE).notes


def _rows(file: Path) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(file)) as connection:
        return connection.execute("SELECT id, name, qty, edits FROM parts ORDER BY id").fetchall()


def test_an_applied_row_a_business_trigger_changed_is_marked(tmp_path):
    file = _database(tmp_path / "t.sqlite", UPPER_NAME)
    _enable(file)
    applier = SQLiteTargetApplier(file, node_id=SHORE)
    try:
        row = {"id": 3, "name": "valve", "qty": 1, "edits": 0}
        inserted = insert("main", "parts", row)
        [outcome] = applier.apply_chunk([inserted])
        [plain] = applier.apply_chunk([update("main", "parts", row, {"qty": 4},
                                              inserted.result_revision)])
    finally:
        applier.close()
    assert outcome.kind is TargetOutcomeKind.APPLIED
    assert (outcome.reason_code, outcome.trigger_modified) == (f"{TRIGGER_MODIFIED}:name",
                                                               ("name",))
    assert (plain.kind, plain.reason_code) == (TargetOutcomeKind.APPLIED, "")
    assert _rows(file)[-1] == (3, "VALVE", 4, 0)


def test_a_guarded_trigger_stays_quiet_for_the_backfill_and_applies(tmp_path):
    file = _database(tmp_path / "t.sqlite", GUARDED_EDITS)
    before = _rows(file)
    notes = _enable(file)
    assert _rows(file) == before
    assert ("business trigger parts_edits (AFTER UPDATE): reads the remote-apply flag"
            in notes)
    applier = SQLiteTargetApplier(file, node_id=SHORE)
    try:
        seeded = insert("main", "parts", {"id": 3, "name": "valve", "qty": 1, "edits": 0})
        applier.apply_chunk([seeded])
        [outcome] = applier.apply_chunk([update(
            "main", "parts", {"id": 3, "name": "valve", "qty": 1, "edits": 0}, {"qty": 9},
            seeded.result_revision)])
    finally:
        applier.close()
    assert (outcome.kind, outcome.reason_code) == (TargetOutcomeKind.APPLIED, "")
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute("UPDATE parts SET qty = 3 WHERE id = 1")  # a local write counts
    assert _rows(file)[0] == (1, "pump", 3, 1)


def test_an_unguarded_trigger_that_changes_the_backfill_is_reported(tmp_path):
    file = _database(tmp_path / "t.sqlite", UNGUARDED_EDITS)
    notes = _enable(file)
    assert any("parts_edits (AFTER UPDATE)" in note and "CHANGED" in note for note in notes)
    with contextlib.closing(sqlite3.connect(file)) as connection:
        state = inspect_sqlite_table(connection, "parts")
    lines = status_lines(state, SHORE)
    assert "  metadata columns: visible (SQLite cannot hide columns)" in lines
    assert ("  business trigger parts_edits (AFTER UPDATE): fires again when a row from"
            " another node is applied unless guarded (docs/shore.md, Business triggers)"
            in lines)
    assert state.shape().trigger_rewrites == frozenset({"UPDATE"})


# --- written versus stored ------------------------------------------------------------------


def test_what_a_column_does_to_a_value_is_not_a_change():
    moment = dt.datetime.now(dt.UTC).replace(microsecond=654321)
    assert same_value(moment, moment.replace(microsecond=0))  # DATETIME(0), truncated
    assert same_value(moment, moment.replace(microsecond=0) + dt.timedelta(seconds=1))  # rounded
    assert same_value(moment, moment.replace(microsecond=654000))  # DATETIME(3)
    assert same_value("abc  ", "abc")  # CHAR strips trailing spaces
    assert same_value(b"ab", b"ab\0\0")  # BINARY pads
    assert same_value(1.1, 1.100000023841858)  # FLOAT
    assert same_value(Decimal("1.5"), Decimal("1.50"))
    assert same_value(True, 1)
    assert same_value(JsonText('{"a": [1, 2]}'), JsonText('{"a":[1,2]}'))
    assert not same_value(moment, moment - dt.timedelta(days=30))
    assert not same_value("abc", "ABC")
    assert not same_value(None, "x") and not same_value("x", None)
    assert not same_value(JsonText('{"a": 1}'), JsonText('{"a": 2}'))
    assert changed_columns(("a", "b"), (1, "x"), None) == ["a", "b"]
    assert changed_columns(("a", "b"), (1, "x"), {"a": 1, "b": "y"}) == ["b"]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=20)
       | st.decimals(allow_nan=False, allow_infinity=False, places=4, max_value=10**9,
                     min_value=-10**9) | st.none())
def test_a_value_stored_as_written_is_never_a_change(value):
    assert same_value(value, value)
    assert changed_columns(("c",), (value,), {"c": value}) == []


def test_the_marker_names_the_columns_and_no_more_than_eight():
    outcome = trigger_modified_outcome(uuid.uuid4(), [f"c{index}" for index in range(10)])
    assert outcome.kind is TargetOutcomeKind.APPLIED
    assert outcome.reason_code == f"{TRIGGER_MODIFIED}:c0,c1,c2,c3,c4,c5,c6,c7,+2 more"
    assert outcome.trigger_modified == tuple(f"c{index}" for index in range(10))


@pytest.mark.parametrize("text, timing, event", [
    ("CREATE TRIGGER t1 INSERT ON parts BEGIN SELECT 1; END", "BEFORE", "INSERT"),
    ('create trigger if not exists "a b" after update of qty on parts begin select 1; end',
     "AFTER", "UPDATE"),
    ("CREATE TRIGGER [t 3]  BEFORE\n DELETE ON parts BEGIN SELECT 1; END", "BEFORE", "DELETE"),
])
def test_sqlite_trigger_timing_and_event_are_read_from_its_text(tmp_path, text, timing, event):
    with contextlib.closing(sqlite3.connect(tmp_path / "t.sqlite")) as connection:
        connection.execute(PARTS_DDL)
        connection.execute(text)
        [trigger] = inspect_sqlite_table(connection, "parts").business_triggers
    assert (trigger.timing, trigger.event, trigger.guarded) == (timing, event, False)
