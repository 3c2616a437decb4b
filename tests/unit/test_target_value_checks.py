"""Decoded values and names no target may write (issue 13, item 1), on the SQLite target and
as the pure checks: a ship never sets the sync metadata itself, in any spelling, and an error
the database gives one event's statement rejects that event only."""

from __future__ import annotations

import contextlib
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tests.target_events import SHORE, insert
from tidesync.domain.value_checks import ValueProblem, values_problem
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

DB = "fleet_erp"


@pytest.fixture
def applier(tmp_path: Path):
    file = tmp_path / "shore.sqlite"
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE parts (id INTEGER PRIMARY KEY, name TEXT, qty INT,"
                           " twice INT GENERATED ALWAYS AS (qty * 2) STORED)")
        enable_sqlite_table(connection, "parts", SHORE)
    target = SQLiteTargetApplier(file, node_id=SHORE)
    yield target, file
    target.close()


def _row(file: Path, key: int) -> tuple[object, ...] | None:
    with contextlib.closing(sqlite3.connect(file)) as connection:
        return connection.execute("SELECT name, qty, twice, _sync_origin FROM parts"
                                  " WHERE id = ?", (key,)).fetchone()


@pytest.mark.parametrize(("column", "reason"), [
    ("_SYNC_ORIGIN", "METADATA_COLUMN"), ("_Sync_Revision", "METADATA_COLUMN"),
    ("QTY", "DUPLICATE_COLUMN"),
])
def test_a_ship_cannot_set_metadata_or_a_column_twice_on_sqlite(applier, column, reason):
    target, file = applier
    poison = insert(DB, "parts", {"id": 1, "name": "a", "qty": 1, column: "ship-forged"})
    fine = insert(DB, "parts", {"id": 2, "name": "b", "qty": 2})

    outcomes = target.apply_chunk([poison, fine])

    assert [(o.kind, o.reason_code) for o in outcomes] == [
        (TargetOutcomeKind.REJECTED, reason), (TargetOutcomeKind.APPLIED, "")]
    assert _row(file, 1) is None
    assert _row(file, 2) == ("b", 2, 4, "ship-0042")


def test_a_generated_column_in_the_image_is_computed_by_sqlite(applier):
    target, file = applier
    event = insert(DB, "parts", {"id": 1, "name": "a", "qty": 3, "twice": 99})

    assert [o.kind for o in target.apply_chunk([event])] == [TargetOutcomeKind.APPLIED]
    assert _row(file, 1) == ("a", 3, 6, "ship-0042")


def test_a_database_error_no_reason_names_rejects_only_its_event_on_sqlite(applier):
    target, file = applier
    with contextlib.closing(sqlite3.connect(file, isolation_level=None)) as connection:
        connection.execute("CREATE TRIGGER refuse_poison BEFORE INSERT ON parts"
                           " WHEN NEW.name = 'poison' BEGIN SELECT json('not json'); END")
    events = [insert(DB, "parts", {"id": key, "name": name, "qty": 1})
              for key, name in ((1, "a"), (2, "poison"), (3, "c"))]

    outcomes = target.apply_chunk(events)

    assert [(o.kind, o.reason_code) for o in outcomes] == [
        (TargetOutcomeKind.APPLIED, ""), (TargetOutcomeKind.REJECTED, "DATABASE_REFUSED"),
        (TargetOutcomeKind.APPLIED, "")]
    assert _row(file, 2) is None and _row(file, 3) is not None


@pytest.mark.parametrize(("value", "problem"), [
    (Decimal("NaN"), ValueProblem.INVALID_VALUE), (Decimal("-sNaN"), ValueProblem.INVALID_VALUE),
    (Decimal("-Infinity"), ValueProblem.INVALID_VALUE),
    (Decimal("1E+999999999"), ValueProblem.VALUE_OUT_OF_RANGE),
    (Decimal("1E-101"), ValueProblem.VALUE_OUT_OF_RANGE),
    (Decimal("9" * 66), ValueProblem.VALUE_OUT_OF_RANGE),
    (float("nan"), ValueProblem.INVALID_VALUE),
    (ManualClock().now.replace(tzinfo=None), ValueProblem.INVALID_VALUE),
])
def test_values_no_target_can_take(value, problem):
    found = values_problem([1, "text", value])
    assert found is not None and found[0] is problem


@given(st.integers(-(10**65 - 1), 10**65 - 1), st.integers(0, 30))
def test_every_decimal_a_mysql_column_can_hold_passes(digits, scale):
    # Any DECIMAL(M, D) value: at most 65 digits, at most 30 of them after the point.
    assert values_problem([Decimal(digits).scaleb(-scale)]) is None
