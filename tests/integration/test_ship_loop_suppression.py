"""Loop suppression on the ship (§12) with real binlog capture and the real broker: shore
commands applied by the downlink are captured like any write, recognised as platform writes
proven by `applied_command` and never uploaded (their positions become terminal, so the
checkpoint passes them); a later local edit of the same row is a normal local event; a platform
write the ship never applied blocks with ORIGIN_UNPROVEN and is shown in `ship status`."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.shore_support import run_sql
from tests.integration.test_capture_mariadb import run_until_caught_up
from tests.integration.test_ship_downlink import (  # noqa: F401  (ship_db is a fixture)
    SHIP_NODE,
    make_world,
    ship_db,
)
from tests.integration.test_ship_downlink_support import CommandLog, FakeShore
from tidesync.bootstrap.ship import normalizer_for
from tidesync.cdc.kafka import KafkaQueue, QueueSettings
from tidesync.config import ShipConfig
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.state import platform_write_id
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services


def test_captured_remote_applies_are_not_uploaded_and_local_edits_are(
        ship_mariadb, ship_db, kafka_broker, tmp_path: Path) -> None:  # noqa: F811
    bootstrap = kafka_broker.bootstrap_servers
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position_path = tmp_path / "position.sqlite"
    run_until_caught_up(ship_mariadb, ship_db, bootstrap, position_path, name, 9301)

    world = make_world(ship_mariadb, ship_db, tmp_path / "ship.sqlite", FakeShore(CommandLog()))
    try:
        log = world.shore.log
        log.row_change(ship_db, "items", {"id": 1}, pb.INSERT, {"name": "from-shore", "qty": 1})
        second, _ = log.row_change(ship_db, "items", {"id": 2}, pb.INSERT,
                                   {"name": "doomed", "qty": 1})
        log.row_change(ship_db, "items", {"id": 2}, pb.DELETE,
                       expected=Revision(second.row_change.result_revision))
        world.run()
        assert {a.result for a in world.shore.acks} == {pb.COMMAND_APPLIED}
        # A local edit of the row the shore wrote: the trigger clears _sync_event_id.
        run_sql(ship_mariadb, ship_db, "UPDATE items SET qty = qty + 1 WHERE id = 1",
                "INSERT INTO items (id, name, qty) VALUES (10, 'local', 1)")
        # A remote apply this ship has no record of (not through the downlink).
        stray = MySQLTargetApplier(host=ship_mariadb.host, port=ship_mariadb.port,
                                   user=ship_mariadb.user, password=ship_mariadb.password,
                                   node_id=SHIP_NODE)
        try:
            stray_event = ChangeEvent(
                event_id=uuid.uuid4(), origin_node_id="shore", source_connector_id="x",
                source_topic="x", source_partition=0, source_position=1,
                record=RecordKey.of(ship_db, "items", {"id": 9}), operation=Operation.INSERT,
                captured_at=world.downlink.clock(), after={"id": 9, "name": "?", "qty": 1},
                result_revision=Revision(uuid.uuid4().bytes))
            assert stray.apply_chunk([stray_event])[0].kind.value == "APPLIED"
        finally:
            stray.close()
        run_until_caught_up(ship_mariadb, ship_db, bootstrap, position_path, name, 9301)

        config = ShipConfig(node_id=SHIP_NODE, kafka_bootstrap_servers=bootstrap,
                            bidirectional_tables=(f"{ship_db}.items",))
        sendable: list[ChangeEvent] = []
        consume(world, name, bootstrap, config, sendable=sendable,
                until=lambda: _rows(world) >= 7)

        uploaded = sorted((e.operation.value, e.primary_key["id"]) for e in sendable)
        assert uploaded == [("INSERT", 10), ("UPDATE", 1)]
        local_update = next(e for e in sendable if e.operation is Operation.UPDATE)
        assert local_update.after is not None and local_update.after["_sync_event_id"] is None
        assert platform_write_id(local_update) is None
        rows = world.state.conn.execute(
            "SELECT state, result, reason, count(*) FROM event_state GROUP BY 1, 2, 3"
        ).fetchall()
        assert sorted(rows, key=str) == sorted([
            ("TERMINAL", "PLATFORM_WRITE", "REMOTE_APPLY", 4),  # insert 1, insert 2, mark, delete
            ("READY", None, None, 2),
            ("BLOCKED", None, "ORIGIN_UNPROVEN", 1),
        ], key=str)
        # The checkpoint passes the suppressed records: every partition is terminal up to the
        # first record still open (sent but unanswered, or the blocked one).
        for wm in world.state.watermarks():
            first_open = world.state.conn.execute(
                "SELECT min(kafka_offset) FROM event_state WHERE topic = ? AND"
                " kafka_partition = ? AND state NOT IN ('TERMINAL')",
                (wm.topic, wm.partition)).fetchone()[0]
            expected = wm.read_offset if first_open is None else first_open - 1
            assert wm.terminal_offset == expected
        report = status_report(world.state, downlink=True)
        assert report["downlink"]["origin_unproven"] == 1
        assert report["downlink"]["commands_by_result"] == {"COMMAND_APPLIED": 3}
        assert report["blocked_reasons"] == {"ORIGIN_UNPROVEN": 1}
        assert [b["reason"] for b in report["blocked"]] == ["ORIGIN_UNPROVEN"]

        # A local edit of that row waits behind it. An operator who knows the stray write
        # came from the shore confirms its origin (it cannot expire: the table syncs both
        # ways); the edit goes up once the client reads again from the checkpoint.
        run_sql(ship_mariadb, ship_db, "UPDATE items SET qty = 5 WHERE id = 9")
        run_until_caught_up(ship_mariadb, ship_db, bootstrap, position_path, name, 9301)
        consume(world, name, bootstrap, config, until=lambda: _rows(world) == 8)
        assert world.state.blocked_reasons() == {"ORIGIN_UNPROVEN": 1,
                                                 "BEHIND_BLOCKED_RECORD": 1}
        (unproven,) = [b for b in world.state.blocked_records() if b.reason == "ORIGIN_UNPROVEN"]
        done = world.state.confirm_origin(unproven.topic, unproven.partition, unproven.offset,
                                          actor="user:ana", reason="restored from a backup")
        assert done.released == 1 and world.state.blocked_reasons() == {}

        resent: list[ChangeEvent] = []
        consume(world, name, bootstrap, config, sendable=resent,
                until=lambda: any(e.primary_key["id"] == 9 for e in resent))
        edit = next(e for e in resent if e.primary_key["id"] == 9)
        assert edit.operation is Operation.UPDATE and edit.source_sequence is None
        assert edit.after is not None and edit.after["qty"] == 5
    finally:
        world.downlink.applier.target.close()
        world.state.close()


def consume(world: Any, name: str, bootstrap: str, config: ShipConfig, *,
            until: Callable[[], bool], sendable: list[ChangeEvent] | None = None) -> None:
    """A new consumer on the ship state (as a restarted client: from the checkpoint) polls
    until `until()`; what it would send is appended to `sendable`."""
    queue = KafkaQueue(QueueSettings(bootstrap, f"loop-{secrets.token_hex(4)}",
                                     rf"^{re.escape(name)}\."))
    consumer = QueueConsumer(queue, normalizer_for(config), world.state, 0)
    try:
        deadline = time.monotonic() + 60
        while not until():
            assert time.monotonic() < deadline, "the captured records did not arrive"
            consumer.refresh()
            polled = consumer.poll(500, 0.2).sendable
            if sendable is not None:
                sendable += polled
    finally:
        queue.close()


def _rows(world: Any) -> int:
    return int(world.state.conn.execute("SELECT count(*) FROM event_state").fetchone()[0])
