"""Every conflict can be decided: each ship operation × shore operation (INSERT, UPDATE, DELETE)
on the same key, decided for each side, ends ACKNOWLEDGED with the ship's row and the shore's
row identical, `_sync_revision` included, or both absent.

Real PostgreSQL (case and command streams, inbox), SQLite business databases on both sides.
The ship's change goes up as a received batch and is applied by the apply processor; the
shore's change goes down as the ROW_CHANGE command the shore's capture would issue, pulled and
applied by the ship's downlink loop, whose answers the arbiter follows up; the decision is made
through the ConflictService (the console's and the CLI's), applied and dispatched by the
arbiter, pulled and applied by the ship's downlink, and acknowledged from its answer.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration import test_apply_processor as processor_tests
from tests.integration.shore_support import pg_rows, receive
from tests.integration.test_apply_processor import drain, make_processor
from tidesync.apps.conflicts import ConflictService, Decision, replacement_from_text
from tidesync.domain.arbitration import Policy, PolicyName
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.conflict_case import (
    ConflictRefusal,
    ConflictRefused,
    ConflictState,
    DecisionSide,
    key_digest,
    rule_for_record,
)
from tidesync.domain.downlink_command import CommandKind, NewCommand, RowChangePayload
from tidesync.localservices import PostgresDatabase
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import RemoteApplier
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.transport import RetrySchedule
from tidesync.shore.arbiter import Arbiter, ArbiterSettings
from tidesync.shore.conflicts import PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

SHORE = processor_tests.SHORE_NODE
DATABASE = "shipdb"
# `name` is NOT NULL and never changed by the ship's UPDATE: a decision that wrote only the
# columns an UPDATE carried could not insert the row.
DDL = ("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL,"
       " note TEXT)")
COLUMNS = "id, name, qty, note, _sync_revision"
OPS = ("INSERT", "UPDATE", "DELETE")
SHIP_WRITES = {"INSERT": ("INSERT INTO items (id, name, qty, note) VALUES (?, 'ship', 1,"
                          " 'ship note')"),
               "UPDATE": "UPDATE items SET qty = qty + 2 WHERE id = ?",
               "DELETE": "DELETE FROM items WHERE id = ?"}
SHORE_WRITES = {"INSERT": ("INSERT INTO items (id, name, qty, note) VALUES (?, 'shore', 10,"
                           " 'shore note')"),
                "UPDATE": "UPDATE items SET note = 'shore edit' WHERE id = ?",
                "DELETE": "DELETE FROM items WHERE id = ?"}
BASE_ROW = "INSERT INTO items (id, name, qty, note) VALUES (?, 'base', 0, 'base note')"

shore = processor_tests.shore


def business_db(path: Path, node_id: str) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(DDL)
        enable_sqlite_table(conn, "items", node_id)
    return path


def write(path: Path, sql: str, key: int) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(sql, (key,))


def row(path: Path, key: int) -> dict[str, Any] | None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute(f"SELECT {COLUMNS} FROM items WHERE id = ?", (key,)).fetchone()
    return None if found is None else dict(found)


def image(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as a change carries it: its business columns."""
    return None if found is None else {k: v for k, v in found.items() if k != "_sync_revision"}


def revision(found: dict[str, Any] | None) -> Revision | None:
    return None if found is None else Revision.parse(str(found["_sync_revision"]))


@dataclass
class ShipUplink:
    """The ship's captured changes of `items`, numbered as its client numbers them."""

    node_id: str
    topic: str
    sequence: int = 0
    offsets: Iterator[int] = field(default_factory=lambda: itertools.count(0))

    def event(self, operation: Operation, key: int, before: dict[str, Any] | None,
              after: dict[str, Any] | None) -> ChangeEvent:
        record = RecordKey.of(DATABASE, "items", {"id": key})
        offset = next(self.offsets)
        self.sequence += 1
        event_id = event_id_for(SourceCoordinates(self.node_id, 0, self.topic, 0, offset),
                                record, operation)
        result = (tombstone_revision(event_id) if operation is Operation.DELETE
                  else revision(after))
        return ChangeEvent(
            event_id=event_id, origin_node_id=self.node_id, source_connector_id="test",
            source_topic=self.topic, source_partition=0, source_position=offset, record=record,
            operation=operation, captured_at=dt.datetime.now(dt.UTC), before=image(before),
            after=image(after), base_revision=revision(before), result_revision=result,
            source_sequence=self.sequence)


class InProcessShore:
    """The ship's link to the shore's command API, in process (what /sync/v1/commands and
    /sync/v1/command-acks call)."""

    def __init__(self, service: DownlinkService, node_id: str) -> None:
        self.service, self.node_id = service, node_id

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        return self.service.page(self.node_id, cursor, limit)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        return self.service.acknowledge(self.node_id, message)


@dataclass
class World:
    ship_path: Path
    shore_path: Path
    ship_node: str
    uplink: ShipUplink
    processor: Any
    arbiter: Arbiter
    service: ConflictService
    downlink: DownlinkService
    ship_downlink: Downlink
    apps: Any
    pool: Any

    def ship_turn(self) -> None:
        """The ship pulls and applies its commands and sends its answers."""
        for _ in range(3):
            self.ship_downlink.retry.succeeded()
            self.ship_downlink.next_pull = 0.0
            self.ship_downlink.step()

    def settle(self) -> None:
        """Arbiter and ship take turns until neither has anything left to do."""
        for _ in range(10):
            self.ship_turn()
            if self.arbiter.run_once() == 0 and self.ship_downlink.idle():
                self.ship_turn()
                if self.arbiter.run_once() == 0:
                    return
        raise AssertionError("the arbiter and the ship never went quiet")


@pytest.fixture
def world(shore, downlink_service, tmp_path: Path) -> Iterator[World]:
    pool, apps = shore
    ship_node = f"ship-{uuid.uuid4().hex[:8]}"
    ship_path = business_db(tmp_path / "ship.sqlite", ship_node)
    shore_path = business_db(tmp_path / "shore.sqlite", SHORE)
    clock = ManualClock()
    processor = make_processor(shore, SQLiteTargetApplier(shore_path, node_id=SHORE), clock)
    keys = PostgresRecordKeys(pool)
    reader = TargetRevisionReader(lambda: SQLiteTargetApplier(shore_path, node_id=SHORE), keys)
    arbiter = Arbiter(apps.conflicts, downlink_service, pool, PostgresWorkQueue(pool), reader,
                      keys, lambda: SQLiteTargetApplier(shore_path, node_id=f"{SHORE}.arbiter"),
                      lambda: [ship_node],
                      ArbiterSettings(shore_node_id=SHORE,
                                      policy_for=lambda db, table: Policy(PolicyName.MANUAL),
                                      worker_id="arb-matrix"), clock)
    state = SQLiteShipState(tmp_path / "ship-state.sqlite", ship_node, "group")
    ship_target = SQLiteTargetApplier(ship_path, node_id=ship_node)
    ship_downlink = Downlink(DownlinkSettings(node_id=ship_node, shore_node_id=SHORE), state,
                             InProcessShore(downlink_service, ship_node),
                             RemoteApplier(ship_target, ship_node),
                             set_health=lambda *_: None,
                             link_failed=lambda schedule, error, what: schedule.failed(0.0),
                             retry=RetrySchedule())
    yield World(ship_path, shore_path, ship_node,
                ShipUplink(ship_node, f"sync.cdc.{ship_node}.items"), processor, arbiter,
                ConflictService(apps.conflicts, reader), downlink_service, ship_downlink, apps,
                pool)
    arbiter.close()
    reader.close()
    ship_target.close()
    state.close()


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """A database of its own: every pair decides the same keys of the same table, which
    another test's cases, commands or arbiter leases on them would hold."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def downlink_service(pg_database) -> Iterator[DownlinkService]:
    service = open_downlink(pg_database.eventsourcing_env(), pg_database.dsn)
    yield service
    service.close()


def prepare(world: World, key: int, ship_op: str, shore_op: str) -> None:
    """The row as it stands before the concurrent changes: where both sides change an existing
    row, the same row (the ship's, applied on the shore); where one side inserts, that side has
    no row; the other side's existing row is its own."""
    ship_has, shore_has = ship_op != "INSERT", shore_op != "INSERT"
    if ship_has:
        write(world.ship_path, BASE_ROW, key)
    if ship_has and shore_has:
        receive(world.pool, world.ship_node,
                [world.uplink.event(Operation.INSERT, key, None, row(world.ship_path, key))])
        drain(world.processor)
        assert row(world.shore_path, key) == row(world.ship_path, key)
    elif shore_has:
        write(world.shore_path, BASE_ROW, key)


def concurrent_changes(world: World, key: int, ship_op: str, shore_op: str) -> None:
    """Both sides change the row; the ship's change reaches the shore, the shore's change the
    ship (each meeting the other side's row), and the ship's answer is followed up."""
    shore_before = row(world.shore_path, key)
    write(world.shore_path, SHORE_WRITES[shore_op], key)
    shore_after = row(world.shore_path, key)
    ship_before = row(world.ship_path, key)
    write(world.ship_path, SHIP_WRITES[ship_op], key)
    ship_after = row(world.ship_path, key)

    receive(world.pool, world.ship_node,
            [world.uplink.event(Operation(ship_op), key, ship_before, ship_after)])
    drain(world.processor)

    shore_event = uuid.uuid4()
    operation = Operation(shore_op)
    values = image(shore_after)
    world.downlink.issue([NewCommand(
        node_id=world.ship_node, kind=CommandKind.ROW_CHANGE, source_id=shore_event,
        payload=RowChangePayload(
            RecordKey.of(DATABASE, "items", {"id": key}), operation,
            None if values is None else {k: v for k, v in values.items() if k != "id"},
            revision(shore_before),
            tombstone_revision(shore_event) if operation is Operation.DELETE
            else revision(shore_after), SHORE, shore_event))])
    world.ship_turn()
    world.arbiter.run_once()


def active_case(world: World, key: int) -> uuid.UUID:
    record = RecordKey.of(DATABASE, "items", {"id": key})
    rule = rule_for_record(record)
    rows = pg_rows(world.pool, "SELECT conflict_id FROM active_conflict"
                               " WHERE rule_id = %s AND key_digest = %s",
                   (rule, key_digest(rule, record.canonical())))
    assert len(rows) == 1, f"expected one active conflict, found {len(rows)}"
    return uuid.UUID(str(rows[0][0]))


def decide(world: World, conflict_id: uuid.UUID, key: int, side: DecisionSide) -> bool:
    """Decide; when refused as stale, refresh the evidence and decide again. True when a
    refresh was needed."""
    texts: dict[str, str | None] = {"id": str(key), "name": "replaced", "qty": "99",
                                    "note": None}

    def attempt() -> None:
        replacement = None
        if side is DecisionSide.REPLACEMENT:
            case = world.service.case(conflict_id)
            replacement = replacement_from_text(
                case, [(column, texts[column]) for column in case.evidence_columns()])
        world.service.decide(Decision(conflict_id, side, "matrix decision", "user:tester",
                                      replacement))

    try:
        attempt()
    except ConflictRefused as refused:
        assert refused.refusal is ConflictRefusal.EVIDENCE_STALE, refused.message
        outcome = world.service.refresh(conflict_id, "user:tester", "the shore row moved")
        assert outcome.recorded
        attempt()
        return True
    return False


# Pairs whose conflict the shore captures from the ship's report of a shore change after the
# ship's change had already applied on the shore: the report shows the shore's row as it was
# before, so the evidence is refreshed before deciding.
REFRESHED = {("INSERT", "DELETE")}
RETARGETED = {("DELETE", "INSERT")}


@pytest.mark.parametrize("ship_op", OPS)
@pytest.mark.parametrize("shore_op", OPS)
def test_every_pair_of_changes_is_decided_to_equal_rows_for_every_side(world: World, ship_op,
                                                                       shore_op):
    for number, side in enumerate(DecisionSide, start=1):
        key = number
        prepare(world, key, ship_op, shore_op)
        concurrent_changes(world, key, ship_op, shore_op)
        conflict_id = active_case(world, key)

        refreshed = decide(world, conflict_id, key, side)
        world.settle()

        case = world.apps.conflicts.get_case(conflict_id)
        assert (side, case.state) == (side, ConflictState.ACKNOWLEDGED), case.expiry
        assert refreshed == ((ship_op, shore_op) in REFRESHED)
        # The ship applied the shore's insert after reporting its delete: a decision other
        # than the shore's row finds the ship holding that row, and is sent again expecting it.
        assert case.retargets_to(world.ship_node) == (
            1 if (ship_op, shore_op) in RETARGETED and side is not DecisionSide.SHORE else 0)
        ship_row, shore_row = row(world.ship_path, key), row(world.shore_path, key)
        assert (side, ship_row) == (side, shore_row)
        if side is DecisionSide.REPLACEMENT:
            assert shore_row is not None and shore_row["name"] == "replaced"
        assert pg_rows(world.pool, "SELECT 1 FROM active_conflict WHERE conflict_id = %s",
                       (conflict_id,)) == []
