"""Shore commands applied to a SQLite ship database (the embedded default) by the downlink loop:
the same compare-and-set, ledger, mark-then-delete and ack results as on MariaDB."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.integration.test_ship_downlink_support import SHORE, CommandLog, FakeShore
from tidesync.domain.change_event import Revision, tombstone_revision
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import RemoteApplier
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState
from tidesync.ship.transport import LinkError, RetrySchedule
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table
from tidesync.wire import sync_pb2 as pb

NODE = "ship-sqlite-1"


def test_commands_apply_to_a_sqlite_ship_database(tmp_path: Path) -> None:
    business = tmp_path / "ship-business.sqlite"
    with sqlite3.connect(business) as connection:
        connection.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                           " qty INTEGER NOT NULL)")
    connection = sqlite3.connect(business, isolation_level=None)
    enable_sqlite_table(connection, "items", NODE)
    connection.execute("INSERT INTO items (id, name, qty) VALUES (7, 'local', 1)")
    connection.close()
    shore = FakeShore(CommandLog())
    log = shore.log
    insert, insert_id = log.row_change("shipdb", "items", {"id": 1}, pb.INSERT,
                                       {"name": "a", "qty": 1})
    delete, delete_id = log.row_change("shipdb", "items", {"id": 1}, pb.DELETE,
                                       expected=Revision(insert.row_change.result_revision))
    stale, _ = log.row_change("shipdb", "items", {"id": 7}, pb.UPDATE, {"name": "b", "qty": 2},
                              expected=Revision(insert.row_change.result_revision))
    state = SQLiteShipState(tmp_path / "state.sqlite", NODE, "g")
    target = SQLiteTargetApplier(business, node_id=NODE)
    failures: list[str] = []

    def link_failed(schedule: RetrySchedule, error: LinkError, what: str) -> None:
        failures.append(what)

    downlink = Downlink(DownlinkSettings(NODE, SHORE), state, shore,
                        RemoteApplier(target, NODE), set_health=lambda *a: None,
                        link_failed=link_failed, retry=RetrySchedule())
    try:
        downlink.step()
        assert [shore.ack_of(c)[0].result for c in (insert, delete, stale)] == [
            pb.COMMAND_APPLIED, pb.COMMAND_APPLIED, pb.COMMAND_CONFLICT_REPORTED]
        assert state.cursor(COMMANDS_CURSOR) == "3" and failures == []
        # Pulled again from the start: the ledger answers.
        with state.transaction() as conn:
            conn.execute("DELETE FROM sync_cursor")
        downlink.next_pull = 0.0
        downlink.step()
        assert [a.result for a in shore.ack_of(delete)] == [pb.COMMAND_APPLIED,
                                                           pb.COMMAND_ALREADY_APPLIED]
    finally:
        target.close()
        state.close()
    with sqlite3.connect(business) as check:
        assert check.execute("SELECT id, name FROM items").fetchall() == [(7, "local")]
        ledger = {r[0] for r in check.execute("SELECT event_id FROM _sync_applied")}
    assert {str(insert_id), str(delete_id)} == ledger
    assert tombstone_revision(delete_id).value == shore.ack_of(delete)[0].local_revision
