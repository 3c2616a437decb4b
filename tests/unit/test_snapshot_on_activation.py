"""Snapshots per rule activation: the `snapshot` field of a rule (absent from the canonical
form of rules that do not set it), the ship asking its capture for one snapshot per activated
rule version once the switch is stored, and the capture's store holding that request once."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_ship_rules import Tables, config, rule
from tidesync.capture.snapshot_activation import ActivationSnapshots
from tidesync.capture.snapshot_store import SnapshotState, SnapshotStore
from tidesync.domain.rules.sync_rule import RuleError, SnapshotWhen, SyncRule
from tidesync.entrypoints.snapshot_cli import status_json
from tidesync.ship.rules import MaskKeyFile, ShipRules
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.rules import SQLiteRules

NOW = dt.datetime.now(dt.UTC)
# The canonical form of a rule written before rules had a `snapshot` field: it must not move.
OLD_CANONICAL = (
    b'{"business_time":"","columns":{"exclude":[],"include":[],"rename":{},"sensitive":[]},'
    b'"conflicts":{"policy":"MANUAL","time_column":""},"description":"","direction":"UPLINK",'
    b'"filter":"","id":"crew","key":[],"priority":"NORMAL","quota_bytes_per_day":0,'
    b'"rate_class":"","retention_days":0,"schedule":"","select":{"groups":[],"nodes":["*"],'
    b'"tags":[]},"source":"ops.crew","target":"ops.crew","transforms":[],"version":1,'
    b'"window":""}')


def test_a_rule_without_snapshot_keeps_its_canonical_form_and_checksum() -> None:
    plain = rule(1)
    assert plain.snapshot is SnapshotWhen.NEVER
    assert plain.canonical() == OLD_CANONICAL


def test_snapshot_on_activation_is_read_kept_and_checksummed() -> None:
    asking = rule(1, snapshot="on_activation")
    assert asking.snapshot is SnapshotWhen.ON_ACTIVATION
    assert SyncRule.from_json(asking.canonical()) == asking
    assert b'"snapshot":"ON_ACTIVATION"' in asking.canonical()
    assert asking.checksum() != rule(1).checksum()
    assert asking.problems() == []
    with pytest.raises(RuleError, match="snapshot"):
        rule(1, snapshot="hourly")
    downlink = rule(1, snapshot="on_activation", direction="DOWNLINK")
    assert any(problem.startswith("snapshot:") for problem in downlink.problems())


class Asked:
    """What the ship asked its capture for, and whether the switch was stored by then."""

    def __init__(self, state: SQLiteShipState) -> None:
        self.state = state
        self.calls: list[tuple[list[str], int]] = []

    def __call__(self, rules: Sequence[SyncRule], now: dt.datetime) -> None:
        stored = len(SQLiteRules(self.state.database).generations())
        self.calls.append(([f"{r.rule_id}@{r.version}" for r in rules], stored))


@pytest.fixture
def state(tmp_path: Path) -> Any:
    store = SQLiteShipState(tmp_path / "ship.sqlite", "ship-1", "group-1")
    yield store
    store.close()


def test_the_ship_asks_after_storing_the_switch_for_rules_that_want_a_snapshot(
        state: SQLiteShipState, tmp_path: Path) -> None:
    asked = Asked(state)
    rules = ShipRules(SQLiteRules(state.database), Tables(), MaskKeyFile(tmp_path / "mask.key"),
                      asked)
    rules.apply_config(config("cfg-1", rule(1, "plain")), NOW)
    assert asked.calls == []  # no rule asks
    rules.apply_config(config("cfg-2", rule(1, "plain"), rule(1, snapshot="on_activation")),
                       NOW)
    rules.apply_config(config("cfg-3", rule(1, "plain"), rule(2, snapshot="on_activation")),
                       NOW)
    # Each time with the active versions, after the generation holding them was stored.
    assert asked.calls == [(["crew@1"], 2), (["crew@2"], 3)]


def test_the_capture_store_holds_one_request_per_rule_version(tmp_path: Path) -> None:
    position = tmp_path / "position.sqlite"
    ask = ActivationSnapshots(position, "sync.cdc.ship-1", chunk_rows=500)
    first, second = rule(3, snapshot="on_activation"), rule(4, snapshot="on_activation")
    ask([first], NOW)
    ask([first], NOW)  # asked again (another config, a restart): nothing new
    ask([second], NOW)
    store = SnapshotStore(position)
    try:
        requests = store.requests()
    finally:
        store.close()
    assert [(r.rule_id, r.rule_version, r.database, r.table, r.keys, r.chunk_rows, r.state)
            for r in requests] == [("crew", 3, "ops", "crew", None, 500, SnapshotState.QUEUED),
                                   ("crew", 4, "ops", "crew", None, 500, SnapshotState.QUEUED)]
    assert requests[0].actor == "system:rule-activation"
    assert requests[0].reason == "rule crew@3 activated"
    shown = status_json(requests[0], None)
    assert (shown["rule"], shown["phase"]) == ("crew@3", "QUEUED")
    assert (shown["started_at"], shown["finished_at"]) == (None, None)


def test_snapshot_status_shows_when_a_snapshot_started_and_finished(tmp_path: Path) -> None:
    position = tmp_path / "position.sqlite"
    ActivationSnapshots(position, "sync.cdc.ship-1", chunk_rows=500)(
        [rule(3, snapshot="on_activation")], NOW)
    started, finished = NOW + dt.timedelta(minutes=1), NOW + dt.timedelta(minutes=7)
    store = SnapshotStore(position)
    try:
        request_id = store.requests()[0].id
        store.start(request_id, rows_total=800, chunks_total=2, now=started)
        running = status_json(store.requests()[0], None)
        store.chunk_done(request_id, 800, 800, {("sync.cdc.ship-1.ops.crew", 0): 41},
                         finished, last=True)
        done = status_json(store.requests()[0], None)
    finally:
        store.close()
    assert (running["started_at"], running["finished_at"]) == (started.isoformat(), None)
    assert (done["started_at"], done["finished_at"]) == (started.isoformat(),
                                                         finished.isoformat())


def test_a_position_file_from_before_rule_snapshots_gets_the_columns(tmp_path: Path) -> None:
    position = tmp_path / "position.sqlite"
    with closing(sqlite3.connect(position)) as old:
        old.execute(
            "CREATE TABLE snapshot_request (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " capture TEXT NOT NULL, database_name TEXT NOT NULL, table_name TEXT NOT NULL,"
            " keys_json TEXT, chunk_rows INTEGER NOT NULL, reason TEXT NOT NULL,"
            " actor TEXT NOT NULL, requested_at TEXT NOT NULL, state TEXT NOT NULL,"
            " cursor_json TEXT, chunks_done INTEGER NOT NULL DEFAULT 0,"
            " chunks_total INTEGER NOT NULL DEFAULT 0, rows_total INTEGER NOT NULL DEFAULT 0,"
            " rows_emitted INTEGER NOT NULL DEFAULT 0, barrier_json TEXT NOT NULL DEFAULT '[]',"
            " error TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL)")
        old.execute("INSERT INTO snapshot_request (capture, database_name, table_name,"
                    " chunk_rows, reason, actor, requested_at, state, updated_at) VALUES"
                    " ('c', 'ops', 'crew', 10, 'onboarding', 'user:ann', 'now', 'QUEUED', 'now')")
        old.commit()
    store = SnapshotStore(position)
    try:
        (kept,) = store.requests()
    finally:
        store.close()
    assert (kept.reason, kept.rule_id, kept.rule_version) == ("onboarding", "", 0)
    assert status_json(kept, None)["rule"] is None
