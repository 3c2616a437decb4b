"""Shore commands for a ship table without sync metadata (a DOWNLINK-only rule), applied by key
to a SQLite ship database: written once, kept in order per key by the command sequence, the
ship's own columns left alone, and no metadata added to the table."""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.integration.test_ship_downlink_support import SHORE, CommandLog, FakeShore
from tidesync.domain.change_event import RecordKey
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.values import Value
from tidesync.entrypoints.cli import main as cli_main
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import (
    DownlinkOnlyTables,
    RemoteApplier,
    ShipTargets,
    prepare,
)
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState
from tidesync.ship.transport import RetrySchedule
from tidesync.target.one_way_sqlite import SQLiteOneWayApplier, enable_one_way_sqlite
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

NODE = "ship-bykey-1"
NOW = dt.datetime.now(dt.UTC)


def by_key_change(log: CommandLog, key: str, operation: int,
                  values: Mapping[str, Value] | None = None, *, by_key: bool = True,
                  event_id: uuid.UUID | None = None, sequence: int | None = None
                  ) -> tuple[pb.DownlinkCommand, uuid.UUID]:
    """A row change as the shore sends it under a DOWNLINK-only rule: no revisions."""
    names, event_id = log.names, event_id or uuid.uuid4()
    change = pb.ShoreRowChange(operation=operation,  # type: ignore[arg-type]
                               origin_node_ref=names.ref(SHORE),
                               origin_event_id=event_id.bytes,
                               rule_id_ref=names.ref("prices"), rule_version=2, by_key=by_key)
    codec.record_key_to_wire(RecordKey.of("main", "price_list", {"item": key}), names,
                             change.record)
    codec.columns_to_wire((values or {}).items(), names, change.values)
    command = pb.DownlinkCommand(command_id=uuid.uuid4().bytes,
                                 sequence=sequence or len(log.commands) + 1,
                                 issued_at_micros=1_700_000_000_000_000, row_change=change)
    if sequence is None:
        log.commands.append(command)
    return command, event_id


def business(tmp_path: Path) -> Path:
    path = tmp_path / "ship-business.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE price_list (item TEXT PRIMARY KEY, amount INTEGER,"
                           " cost INTEGER)")
        connection.execute("INSERT INTO price_list VALUES ('A-1', 1, 99)")
    connection = sqlite3.connect(path, isolation_level=None)
    report = enable_one_way_sqlite(connection, "price_list", "DOWNLINK")
    connection.close()
    assert any("DOWNLINK" in note for note in report.notes)
    return path


def targets(path: Path, downlink_only: DownlinkOnlyTables | None = None) -> ShipTargets:
    return ShipTargets(SQLiteTargetApplier(path, node_id=NODE),
                       SQLiteOneWayApplier(path, node_id=NODE),
                       downlink_only or DownlinkOnlyTables(lambda: ()))


def rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as check:
        return check.execute("SELECT item, amount, cost FROM price_list ORDER BY item").fetchall()


def test_by_key_commands_apply_once_in_order_without_metadata(tmp_path: Path) -> None:
    path = business(tmp_path)
    shore = FakeShore(CommandLog())
    log = shore.log
    update, _ = by_key_change(log, "A-1", pb.UPDATE, {"amount": 2})
    insert, insert_id = by_key_change(log, "B-2", pb.INSERT, {"amount": 5})
    delete, delete_id = by_key_change(log, "B-2", pb.DELETE)
    state = SQLiteShipState(tmp_path / "state.sqlite", NODE, "g")
    ship = targets(path)
    downlink = Downlink(DownlinkSettings(NODE, SHORE), state, shore, RemoteApplier(ship, NODE),
                        set_health=lambda *a: None, link_failed=lambda *a: None,
                        retry=RetrySchedule())
    try:
        downlink.step()
        assert [shore.ack_of(c)[0].result for c in (update, insert, delete)] == [
            pb.COMMAND_APPLIED] * 3
        assert all(shore.ack_of(c)[0].local_revision == b"" for c in (update, insert, delete))
        assert state.cursor(COMMANDS_CURSOR) == "3"
        # Pulled again from the start: the ledger answers, nothing is written twice.
        with state.transaction() as conn:
            conn.execute("DELETE FROM sync_cursor")
        downlink.next_pull = 0.0
        downlink.step()
        assert [a.result for a in shore.ack_of(insert)] == [pb.COMMAND_APPLIED,
                                                           pb.COMMAND_ALREADY_APPLIED]
    finally:
        ship.close()
        state.close()
    # The ship's own column (sensitive on the shore side) stays as it was.
    assert rows(path) == [("A-1", 2, 99)]
    with sqlite3.connect(path) as check:
        columns = [row[1] for row in check.execute("PRAGMA table_info(price_list)")]
        ledger = {r[0] for r in check.execute("SELECT event_id FROM _sync_applied")}
    assert columns == ["item", "amount", "cost"]
    assert {str(insert_id), str(delete_id)} <= ledger


def test_an_older_command_for_a_key_never_overwrites_a_newer_one(tmp_path: Path) -> None:
    path = business(tmp_path)
    log = CommandLog()
    newer, _ = by_key_change(log, "A-1", pb.UPDATE, {"amount": 7}, sequence=9)
    older, _ = by_key_change(log, "A-1", pb.UPDATE, {"amount": 3}, sequence=4)
    names = codec.NameTable(log.names.names)
    ship = targets(path)
    applier = RemoteApplier(ship, NODE)
    try:
        first = applier.apply(prepare(newer, names, SHORE, NOW), NOW)
        late = applier.apply(prepare(older, names, SHORE, NOW), NOW)
    finally:
        ship.close()
    assert first.ack.result == pb.COMMAND_APPLIED
    assert late.ack.result == pb.COMMAND_ALREADY_APPLIED and late.reason == "SUPERSEDED"
    assert rows(path) == [("A-1", 7, 99)]


def test_the_ships_downlink_only_rule_sends_a_command_by_key(tmp_path: Path) -> None:
    path = business(tmp_path)
    log = CommandLog()
    # A command that does not say by_key, with revisions, for a table whose active rule on
    # this ship is DOWNLINK-only: applied by key all the same.
    command, _ = by_key_change(log, "C-3", pb.INSERT, {"amount": 4}, by_key=False)
    command.row_change.result_revision = uuid.uuid4().bytes
    active = [SyncRule.from_document({"id": "prices", "version": 2, "direction": "DOWNLINK",
                                      "source": "main.price_list", "target": "hq.prices",
                                      "select": {"nodes": ["*"]}})]
    ship = targets(path, DownlinkOnlyTables(lambda: active))
    try:
        answer = RemoteApplier(ship, NODE).apply(
            prepare(command, codec.NameTable(log.names.names), SHORE, NOW), NOW)
    finally:
        ship.close()
    assert answer.ack.result == pb.COMMAND_APPLIED and answer.local_revision == b""
    assert ("C-3", 4, None) in rows(path)


def test_prepare_reads_the_rule_and_drops_revisions_by_key() -> None:
    log = CommandLog()
    command, event_id = by_key_change(log, "A-1", pb.DELETE)
    prepared = prepare(command, codec.NameTable(log.names.names), SHORE, NOW)

    assert prepared.by_key and prepared.event is not None
    assert (prepared.event.rule_id, prepared.event.rule_version) == ("prices", 2)
    assert prepared.event.base_revision is None and prepared.event.result_revision is None
    assert prepared.event.event_id == event_id and prepared.event.source_position == 1


def test_target_enable_direction_downlink_prepares_only_the_ledger_and_positions(
        tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "ship.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE price_list (item TEXT PRIMARY KEY, amount INTEGER)")

    assert cli_main(["target", "enable", "price_list", "--sqlite", str(path),
                     "--direction", "DOWNLINK"]) == 0
    out = capsys.readouterr().out
    assert "created _sync_applied" in out and "created _sync_key_position" in out
    assert "one-way (DOWNLINK)" in out
    with sqlite3.connect(path) as check:
        columns = [row[1] for row in check.execute("PRAGMA table_info(price_list)")]
        triggers = check.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'"
                                 ).fetchone()
    assert columns == ["item", "amount"] and triggers == (0,)
