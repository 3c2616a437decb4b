"""SQLiteTargetApplier and `enable_sqlite_table`: the same §11.1 semantics as on MySQL, the
control-table trigger design, exact values within SQLite's limits, and busy → transient."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests import target_events
from tests.target_events import SHIP, SHORE, insert, update
from tests.target_events import delete as delete_event
from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.values import BitString, JsonText
from tidesync.entrypoints.cli import main as cli_main
from tidesync.target.contract import TargetOutcomeKind, TransientTargetError
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table, inspect_sqlite_table

DB = "fleet_erp"
PARTS_DDL = ("CREATE TABLE parts (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT, code VARCHAR(10) UNIQUE)")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "shore.sqlite"
    with contextlib.closing(_plain(file)) as connection:
        connection.execute(PARTS_DDL)
        enable_sqlite_table(connection, "parts", SHORE)
    return file


def _plain(file: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(file, isolation_level=None)
    return connection


@pytest.fixture
def applier(path: Path) -> Iterator[SQLiteTargetApplier]:
    target = SQLiteTargetApplier(path, node_id=SHORE)
    yield target
    target.close()


def _run(file: Path, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    connection = _plain(file)
    try:
        return connection.execute(statement, params).fetchall()
    finally:
        connection.close()


def _row(file: Path, key: int) -> tuple[Any, ...] | None:
    rows = _run(file, "SELECT id, name, qty, _sync_revision, _sync_origin, _sync_event_id"
                      " FROM parts WHERE id = ?", (key,))
    return tuple(rows[0]) if rows else None


def _seed(applier: SQLiteTargetApplier, key: int = 1) -> tuple[dict[str, Any], Revision]:
    row = {"id": key, "name": "pump", "qty": 1}
    event = insert(DB, "parts", row)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    assert event.result_revision is not None
    return row, event.result_revision


def test_enable_is_idempotent_and_backfills(tmp_path):
    file = tmp_path / "t.sqlite"
    with contextlib.closing(_plain(file)) as connection:
        connection.execute(PARTS_DDL)
        connection.execute("INSERT INTO parts (id, name) VALUES (1, 'a'), (2, 'b')")
        first = enable_sqlite_table(connection, "parts", SHORE)
        second = enable_sqlite_table(connection, "parts", SHORE)
        state = inspect_sqlite_table(connection, "parts")
    assert "back-filled 2 rows with fresh revisions" in first.actions
    assert not second.changed, second.actions
    assert state.enabled and state.trigger_node_ids() == {SHORE}
    revisions = {Revision.parse(r) for (r,) in _run(file, "SELECT _sync_revision FROM parts")}
    assert len(revisions) == 2


def test_cli_enable_and_status_on_a_sqlite_file(tmp_path, capsys):
    file = tmp_path / "c.sqlite"
    _run(file, PARTS_DDL)
    assert cli_main(["target", "status", "parts", "--sqlite", str(file)]) == 1
    assert cli_main(["target", "enable", "main.parts", "--sqlite", str(file),
                     "--node-id", SHORE]) == 0
    assert cli_main(["target", "status", "parts", "--sqlite", str(file)]) == 0
    assert "main.parts: enabled" in capsys.readouterr().out


def test_local_writes_are_stamped_and_remote_applies_keep_the_events(path, applier):
    _run(path, "INSERT INTO parts (id, name, _sync_revision, _sync_origin, _sync_event_id)"
               " VALUES (7, 'local', 'forged', 'someone', 'forged')")
    _, _, _, local_revision, origin, event_id = _row(path, 7)  # type: ignore[misc]
    assert Revision.parse(local_revision) and origin == SHORE and event_id is None
    _run(path, "UPDATE parts SET qty = 3, _sync_revision = 'x' WHERE id = 7")
    _, _, _, updated, origin, event_id = _row(path, 7)  # type: ignore[misc]
    assert updated not in (local_revision, "x") and origin == SHORE and event_id is None
    row, base = _seed(applier, key=8)
    event = update(DB, "parts", row, {"qty": 9}, base=base)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    assert event.result_revision is not None
    assert _row(path, 8)[2:] == (9, event.result_revision.text, SHIP,  # type: ignore[index]
                                 str(event.event_id))
    assert _run(path, "SELECT remote_apply FROM _sync_session") == [(0,)]


def test_every_row_of_the_no_conflict_table(path, applier):
    event = insert(DB, "parts", {"id": 1, "name": "pump", "qty": 1})
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    base = event.result_revision
    _run(path, "INSERT INTO parts (id, name) VALUES (2, 'shore-made')")
    [exists] = applier.apply_chunk([insert(DB, "parts", {"id": 2, "name": "ship-made"})])
    assert (exists.kind, exists.reason_code) == (TargetOutcomeKind.CONFLICT, "ROW_EXISTS")
    assert exists.current_row is not None and exists.current_row["name"] == "shore-made"
    row = {"id": 1, "name": "pump", "qty": 1}
    stale = update(DB, "parts", row, {"qty": 5}, base=Revision(uuid.uuid4().bytes))
    [mismatch] = applier.apply_chunk([stale])
    assert mismatch.kind is TargetOutcomeKind.CONFLICT and mismatch.current_revision == base
    good = update(DB, "parts", row, {"qty": 5}, base=base)
    assert applier.apply_chunk([good])[0].kind is TargetOutcomeKind.APPLIED
    late_delete = delete_event(DB, "parts", row, base=base)
    assert applier.apply_chunk([late_delete])[0].reason_code == "REVISION_MISMATCH"
    removal = delete_event(DB, "parts", {**row, "qty": 5}, base=good.result_revision)
    assert applier.apply_chunk([removal])[0].kind is TargetOutcomeKind.APPLIED
    again = delete_event(DB, "parts", {**row, "qty": 5}, base=good.result_revision)
    [missing] = applier.apply_chunk([again])
    assert (missing.kind, missing.reason_code) == (TargetOutcomeKind.CONFLICT, "ROW_MISSING")
    assert applier.apply_chunk([removal])[0].kind is TargetOutcomeKind.ALREADY_APPLIED
    assert applier.applied_event_ids([event.event_id, removal.event_id, again.event_id]) == {
        event.event_id, removal.event_id}


def test_the_same_event_twice_leaves_one_ledger_row(path, applier):
    event = insert(DB, "parts", {"id": 1, "name": "pump"})
    assert [o.kind for o in applier.apply_chunk([event, event])] == [
        TargetOutcomeKind.APPLIED, TargetOutcomeKind.ALREADY_APPLIED]
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.ALREADY_APPLIED
    assert _run(path, "SELECT COUNT(*) FROM _sync_applied") == [(1,)]


def test_snapshot_of_the_current_revision_is_already_applied(applier):
    row, base = _seed(applier)
    snapshot = target_events.change(Operation.SNAPSHOT, DB, "parts", {"id": 1},
                                    after=row, result=base)
    assert applier.apply_chunk([snapshot])[0].kind is TargetOutcomeKind.ALREADY_APPLIED


def test_a_failure_mid_chunk_rejects_only_that_event(path, applier):
    _run(path, "UPDATE parts SET code = 'C1'")  # no rows yet: nothing happens
    _run(path, "INSERT INTO parts (id, name, code) VALUES (9, 'local', 'C1')")
    events = [insert(DB, "parts", {"id": 1, "name": "a"}),
              insert(DB, "parts", {"id": 2, "name": "b", "code": "C1"}),
              insert(DB, "parts", {"id": 3, "name": None}),
              insert(DB, "parts", {"id": 4, "name": "d", "qty": 2**70}),
              insert(DB, "parts", {"id": 5, "name": "e"})]
    outcomes = applier.apply_chunk(events)
    assert [o.reason_code for o in outcomes] == [
        "", "DUPLICATE_UNIQUE_KEY", "CONSTRAINT_VIOLATION", "VALUE_OUT_OF_RANGE", ""]
    assert [_row(path, key) is not None for key in (1, 2, 3, 4, 5)] == [
        True, False, False, False, True]
    assert _run(path, "SELECT COUNT(*) FROM _sync_applied") == [(2,)]


def test_tables_not_enabled_or_elsewhere_are_refused(path, applier):
    _run(path, "CREATE TABLE plain (id INTEGER PRIMARY KEY)")
    outcomes = applier.apply_chunk([insert(DB, "plain", {"id": 1}),
                                    insert(DB, "nowhere", {"id": 1})])
    assert [o.reason_code for o in outcomes] == ["TABLE_NOT_ENABLED", "UNKNOWN_TABLE"]
    elsewhere = SQLiteTargetApplier(path, node_id=SHORE, route=lambda d, t: (d, t))
    try:
        [outcome] = elsewhere.apply_chunk([insert(DB, "parts", {"id": 1, "name": "x"})])
        assert outcome.reason_code == "UNKNOWN_DATABASE"
    finally:
        elsewhere.close()


TYPED_DDL = (
    "CREATE TABLE typed (id INTEGER PRIMARY KEY, price DECIMAL(12,4), whole NUMERIC,"
    " at_dt DATETIME(6), day DATE, clock TIME(6), doc JSON, flags BIT(12), flag BIT(1),"
    " blob_col BLOB, active TINYINT(1), ratio DOUBLE, note TEXT, big BIGINT)"
)
EXACT_ROW: dict[str, Any] = {
    "id": 1, "price": Decimal("12.5000"), "whole": Decimal("42"),
    "at_dt": dt.datetime(2025, 3, 1, 23, 59, 59, 123456, tzinfo=dt.UTC),
    "day": dt.date(2025, 2, 28), "clock": dt.time(13, 14, 15, 999999),
    "doc": JsonText('{"deck": 3, "zone": "A"}'), "flags": BitString(12, 0b1010_0000_0101),
    "flag": True, "blob_col": bytes(range(256)), "active": False, "ratio": 0.1,
    "note": "naïve 中文 ✓", "big": -(2**63),
}


def test_every_value_type_round_trips(path, applier):
    with contextlib.closing(_plain(path)) as connection:
        connection.execute(TYPED_DDL)
        enable_sqlite_table(connection, "typed", SHORE)
    event = insert(DB, "typed", EXACT_ROW)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    row, current = applier.current_row(DB, "typed", {"id": 1})
    assert row is not None and current == event.result_revision
    business = {name: row[name] for name in EXACT_ROW}
    assert business == EXACT_ROW
    assert {n: type(v) for n, v in business.items()} == {
        n: type(v) for n, v in EXACT_ROW.items()}
    assert str(business["price"]) == "12.5000"


def test_a_held_write_lock_is_transient_and_commits_nothing(path):
    impatient = SQLiteTargetApplier(path, node_id=SHORE, busy_timeout=0.1)
    holder = _plain(path)
    try:
        impatient.apply_chunk([insert(DB, "parts", {"id": 9, "name": "warm-up"})])
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientTargetError) as caught:
            impatient.apply_chunk([insert(DB, "parts", {"id": 1, "name": "x"})])
        assert caught.value.reason_code == "DATABASE_BUSY"
        holder.execute("ROLLBACK")
        assert _row(path, 1) is None
        assert impatient.apply_chunk([insert(DB, "parts", {"id": 1, "name": "x"})])[0].kind \
            is TargetOutcomeKind.APPLIED
    finally:
        holder.close()
        impatient.close()
