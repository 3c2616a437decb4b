"""Shore commands applied to a real ship MariaDB by the downlink loop (§12): compare-and-set +
ledger keep the command's revision, origin and event id; repeats answer ALREADY_APPLIED; stale
revisions are reported with evidence; decisions apply or are DECISION_STALE; an unknown table is
REJECTED without stopping later commands; acks are kept and resent until the shore accepts them,
and only then does the commands cursor move."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.shore_support import run_sql
from tests.integration.test_ship_downlink_support import (
    SHORE,
    CommandLog,
    FakeShore,
    new_revision,
)
from tidesync.domain.change_event import Revision
from tidesync.localservices import MariaDBInstance
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import RemoteApplier
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState
from tidesync.ship.telemetry import Subsystem
from tidesync.ship.transport import LinkError, RetrySchedule, ShoreRefused
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

SHIP_NODE = "ship-downlink-1"
ITEMS_DDL = ("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT NOT NULL) ENGINE=InnoDB")




@pytest.fixture
def ship_db(ship_mariadb: MariaDBInstance,
            make_mariadb_database: Callable[[MariaDBInstance], str]) -> str:
    database = make_mariadb_database(ship_mariadb)
    run_sql(ship_mariadb, database, ITEMS_DDL)
    connection = ship_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "items", SHIP_NODE)
    finally:
        connection.close()
    return database


@dataclass
class World:
    instance: MariaDBInstance
    database: str
    shore: FakeShore
    state: SQLiteShipState
    downlink: Downlink
    health: dict[str, tuple[str, str]] = field(default_factory=dict)
    link_failures: list[str] = field(default_factory=list)

    def row(self, key: int) -> tuple[Any, ...] | None:
        rows = run_sql(self.instance, self.database,
                       "SELECT id, name, qty, _sync_revision, _sync_origin, _sync_event_id"
                       f" FROM items WHERE id = {key}")
        return rows[0] if rows else None

    def ledger(self) -> set[str]:
        return {r[0] for r in run_sql(self.instance, self.database,
                                      "SELECT event_id FROM _sync_applied")}

    def run(self, turns: int = 3) -> None:
        """A few loop turns; the retry schedule is cleared so no turn waits on a clock."""
        for _ in range(turns):
            self.downlink.retry.succeeded()
            self.downlink.next_pull = 0.0
            self.downlink.step()


def make_world(instance: MariaDBInstance, database: str, state_path: Path,
               shore: FakeShore) -> World:
    state = SQLiteShipState(state_path, SHIP_NODE, "group")
    target = MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                                password=instance.password, node_id=SHIP_NODE)
    world: World

    def set_health(subsystem: Subsystem, state_: Any, reason: str, detail: str) -> None:
        world.health[subsystem.value] = (str(state_), reason)

    def link_failed(schedule: RetrySchedule, error: LinkError, what: str) -> None:
        world.link_failures.append(what)
        schedule.failed(0.0)

    downlink = Downlink(DownlinkSettings(node_id=SHIP_NODE, shore_node_id=SHORE, page_size=50),
                        state, shore, RemoteApplier(target, SHIP_NODE),
                        set_health=set_health, link_failed=link_failed,
                        retry=RetrySchedule())
    world = World(instance, database, shore, state, downlink)
    return world


@pytest.fixture
def world(ship_mariadb: MariaDBInstance, ship_db: str, tmp_path: Path) -> Iterator[World]:
    made = make_world(ship_mariadb, ship_db, tmp_path / "ship.sqlite", FakeShore(CommandLog()))
    yield made
    made.downlink.applier.target.close()
    made.state.close()


def only_ack(world: World, command: pb.DownlinkCommand) -> pb.CommandAck:
    acks = world.shore.ack_of(command)
    assert len(acks) == 1, acks
    return acks[0]


def test_row_changes_apply_with_cas_and_ledger_and_keep_the_commands_metadata(world: World):
    log, db = world.shore.log, world.database
    insert, insert_id = log.row_change(db, "items", {"id": 1}, pb.INSERT,
                                       {"name": "pump", "qty": 1})
    insert_rev = Revision(insert.row_change.result_revision)
    update, update_id = log.row_change(db, "items", {"id": 1}, pb.UPDATE,
                                       {"name": "pump", "qty": 2}, expected=insert_rev)
    update_rev = Revision(update.row_change.result_revision)
    world.run()
    assert world.row(1) == (1, "pump", 2, update_rev.text, SHORE, str(update_id))
    assert {str(insert_id), str(update_id)} <= world.ledger()
    first, second = only_ack(world, insert), only_ack(world, update)
    assert (first.result, second.result) == (pb.COMMAND_APPLIED, pb.COMMAND_APPLIED)
    assert (first.local_revision, second.local_revision) == (insert_rev.value, update_rev.value)
    assert first.processed_at_micros > 0
    assert world.state.cursor(COMMANDS_CURSOR) == "2"
    assert world.state.pending_ack_count() == 0
    assert world.state.applied_command(update_id.bytes) == ("DONE", "COMMAND_APPLIED", None)
    assert world.health[Subsystem.DOWNLINK_APPLY.value][0] == "HEALTHY"

    delete, delete_id = log.row_change(db, "items", {"id": 1}, pb.DELETE, expected=update_rev)
    world.run()
    assert world.row(1) is None
    assert str(delete_id) in world.ledger()
    assert only_ack(world, delete).result == pb.COMMAND_APPLIED
    assert world.state.cursor(COMMANDS_CURSOR) == "3"
    assert world.state.command_counts() == {"COMMAND_APPLIED": 3}


def test_a_repeated_command_answers_already_applied(world: World):
    log, db = world.shore.log, world.database
    first, event_id = log.row_change(db, "items", {"id": 5}, pb.INSERT,
                                     {"name": "valve", "qty": 3})
    world.run()
    # The shore issues the same change again (another command, same origin event id) …
    again, _ = log.row_change(db, "items", {"id": 5}, pb.INSERT, {"name": "valve", "qty": 3},
                              event_id=event_id,
                              result=Revision(first.row_change.result_revision))
    world.run()
    assert only_ack(world, again).result == pb.COMMAND_ALREADY_APPLIED
    # … and a ship whose cursor went back pulls both again: the ledger answers both times.
    with world.state.transaction() as conn:
        conn.execute("DELETE FROM sync_cursor WHERE name = ?", (COMMANDS_CURSOR,))
    world.run()
    assert [a.result for a in world.shore.ack_of(first)] == [
        pb.COMMAND_APPLIED, pb.COMMAND_ALREADY_APPLIED]
    assert world.row(5) == (5, "valve", 3, Revision(first.row_change.result_revision).text,
                            SHORE, str(event_id))
    assert run_sql(world.instance, world.database, "SELECT count(*) FROM _sync_applied") == [
        (1,)]


def test_a_stale_expected_revision_is_reported_with_the_ships_row(world: World):
    db = world.database
    run_sql(world.instance, db, "INSERT INTO items (id, name, qty) VALUES (7, 'local', 9)")
    local = world.row(7)
    assert local is not None and local[4] == SHIP_NODE
    update, _ = world.shore.log.row_change(db, "items", {"id": 7}, pb.UPDATE,
                                           {"name": "shore", "qty": 1},
                                           expected=new_revision())
    insert, _ = world.shore.log.row_change(db, "items", {"id": 7}, pb.INSERT,
                                           {"name": "shore", "qty": 1})
    world.run()
    for command in (update, insert):
        ack = only_ack(world, command)
        assert ack.result == pb.COMMAND_CONFLICT_REPORTED
        assert ack.reason_code == "REVISION_MISMATCH"
        assert ack.row_exists
        assert ack.local_revision == Revision.parse(local[3]).value
        names = codec.NameTable(world.shore.ack_strings[world.shore.acks.index(ack)])
        assert codec.columns_from_wire(ack.current_row, names) == [("name", "local"),
                                                                    ("qty", 9)]
    assert world.row(7) == local
    missing, _ = world.shore.log.row_change(db, "items", {"id": 8}, pb.UPDATE,
                                            {"name": "x", "qty": 1}, expected=new_revision())
    world.run()
    ack = only_ack(world, missing)
    assert (ack.result, ack.row_exists, ack.local_revision, len(ack.current_row)) == (
        pb.COMMAND_CONFLICT_REPORTED, False, b"", 0)


def test_decisions_apply_or_are_stale_or_already_hold(world: World):
    db, log = world.database, world.shore.log
    run_sql(world.instance, db, "INSERT INTO items (id, name, qty) VALUES (3, 'mine', 1)")
    local = world.row(3)
    assert local is not None
    decided, decision_id, decided_rev = log.decision(
        db, "items", {"id": 3}, {"name": "decided", "qty": 4},
        expected=Revision.parse(local[3]))
    stale, _, _ = log.decision(db, "items", {"id": 3}, {"name": "late", "qty": 5},
                               expected=new_revision())
    # Another decision that wants exactly what the row already is.
    holds, _, _ = log.decision(db, "items", {"id": 3}, {"name": "decided", "qty": 4},
                               expected=new_revision(), decided=decided_rev)
    fresh, fresh_id, fresh_rev = log.decision(db, "items", {"id": 4},
                                              {"name": "new", "qty": 2}, expected=None)
    world.run()
    assert only_ack(world, decided).result == pb.COMMAND_APPLIED
    assert only_ack(world, decided).local_revision == decided_rev.value
    assert world.row(3) == (3, "decided", 4, decided_rev.text, SHORE, str(decision_id))
    stale_ack = only_ack(world, stale)
    assert (stale_ack.result, stale_ack.reason_code) == (pb.COMMAND_CONFLICT_REPORTED,
                                                         "DECISION_STALE")
    assert stale_ack.local_revision == decided_rev.value
    assert only_ack(world, holds).result == pb.COMMAND_ALREADY_APPLIED
    assert only_ack(world, fresh).result == pb.COMMAND_APPLIED
    assert world.row(4) == (4, "new", 2, fresh_rev.text, SHORE, str(fresh_id))
    # A tombstone decision deletes the row (mark then delete) …
    tomb, tomb_id, _ = log.decision(db, "items", {"id": 4}, None, expected=fresh_rev)
    # … and one for a row the ship does not have finds the decision already holds.
    absent, _, _ = log.decision(db, "items", {"id": 99}, None, expected=None)
    world.run()
    assert only_ack(world, tomb).result == pb.COMMAND_APPLIED
    assert world.row(4) is None and str(tomb_id) in world.ledger()
    assert only_ack(world, absent).result == pb.COMMAND_ALREADY_APPLIED


def test_an_unknown_table_is_rejected_and_later_commands_still_apply(world: World):
    db, log = world.database, world.shore.log
    bad, bad_id = log.row_change(db, "nope", {"id": 1}, pb.INSERT, {"name": "x", "qty": 1})
    good, _ = log.row_change(db, "items", {"id": 2}, pb.INSERT, {"name": "ok", "qty": 1})
    malformed = pb.DownlinkCommand(command_id=uuid.uuid4().bytes, sequence=3)
    malformed.row_change.origin_event_id = b"short"
    log.commands.append(malformed)
    world.run()
    bad_ack = only_ack(world, bad)
    assert (bad_ack.result, bad_ack.reason_code) == (pb.COMMAND_REJECTED, "UNKNOWN_TABLE")
    assert only_ack(world, good).result == pb.COMMAND_APPLIED
    malformed_ack = only_ack(world, malformed)
    assert (malformed_ack.result, malformed_ack.reason_code) == (pb.COMMAND_REJECTED,
                                                                 "MALFORMED_COMMAND")
    assert world.row(2) is not None
    assert world.state.cursor(COMMANDS_CURSOR) == "3"
    assert world.state.applied_command(bad_id.bytes) == ("DONE", "COMMAND_REJECTED",
                                                          "UNKNOWN_TABLE")
    assert world.state.command_counts() == {"COMMAND_REJECTED": 2, "COMMAND_APPLIED": 1}


def test_acks_are_kept_and_resent_and_the_cursor_waits_for_them(world: World):
    db, log = world.database, world.shore.log
    first, _ = log.row_change(db, "items", {"id": 1}, pb.INSERT, {"name": "a", "qty": 1})
    second, _ = log.row_change(db, "items", {"id": 2}, pb.INSERT, {"name": "b", "qty": 1})
    world.shore.accept = False
    world.run(turns=1)
    assert world.state.pending_ack_count() == 2
    assert world.state.cursor(COMMANDS_CURSOR) == ""
    world.shore.down = True
    world.run(turns=2)
    assert "command acks" in world.link_failures
    assert world.state.pending_ack_count() == 2 and world.state.cursor(COMMANDS_CURSOR) == ""
    # A restart in between: the acks are in SQLite, not in memory.
    world.state.close()
    world.state = SQLiteShipState(world.state.path, SHIP_NODE, "group")
    world.downlink.state = world.state
    world.shore.down, world.shore.accept = False, True
    world.run(turns=1)
    assert world.state.pending_ack_count() == 0
    assert world.state.cursor(COMMANDS_CURSOR) == "2"
    # Every ack sent carried the first results: both APPLIED, never re-applied.
    assert {a.result for a in world.shore.acks} == {pb.COMMAND_APPLIED}
    assert len(world.shore.ack_of(first)) >= 2 and len(world.shore.ack_of(second)) >= 2
    assert world.shore.cursors_asked[-1] == "2"


def test_a_refused_commands_request_stops_only_the_downlink(world: World):
    world.shore.refuse = ShoreRefused("BAD_CURSOR", "the cursor is not a sequence", status=400)
    world.run(turns=1)
    assert world.downlink.blocked is not None and world.downlink.blocked[0] == "BAD_CURSOR"
    assert world.health[Subsystem.DOWNLINK_APPLY.value] == ("BLOCKED", "BAD_CURSOR")
    assert world.link_failures == []  # the node is not blocked: the uplink goes on
    assert world.downlink.idle()
    world.shore.refuse = ShoreRefused("UNAUTHENTICATED", "bad signature", status=401)
    world.downlink.blocked = None
    world.run(turns=1)
    assert world.link_failures == ["commands"]  # identity refusals go to the client
