"""The ship client runs sync rules, on the real broker and a real SQLite business file: the
rules the shore offers are fetched, checked against the ship's own table and reported in the
heartbeat; a version naming a missing column fails while the previous one stays active; and a
switch's recorded position survives a restart, so records read again are shaped by the rules
they were first read under.

The shore is an in-test link (as in the downlink tests): it serves the offered config, keeps
what is uploaded and answers each event APPLIED; the signed HTTP link is tested elsewhere."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ship_support import ItemsCapture, produce
from tidesync.bootstrap.ship import build_client
from tidesync.config import ShipConfig, ShipTargetConfig, ShipTargetKind
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.client import ExitCode, ShipClient
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.transport import LinkDown
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

PRICE = "4321.99"  # the sensitive column's value in every row


@dataclass
class RulesShore:
    """Offers `rules` under `config_version`; `down` fails uploads as a lost link would."""

    config_version: str = ""
    rules: list[pb.RuleSnapshot] = field(default_factory=list)
    down: bool = False
    uploaded: list[ChangeEvent] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    heartbeats: list[pb.Heartbeat] = field(default_factory=list)
    config_requests: int = 0

    def offer(self, version: str, *rules: SyncRule) -> None:
        self.config_version = version
        self.rules = [pb.RuleSnapshot(rule_id=r.rule_id, version=r.version,
                                      status=pb.DISTRIBUTING, content=r.canonical(),
                                      checksum=hashlib.sha256(r.canonical()).digest())
                      for r in rules]

    def config(self) -> pb.ConfigResponse:
        self.config_requests += 1
        return pb.ConfigResponse(config_version=self.config_version, rules=self.rules)

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        if self.down:
            raise LinkDown("NETWORK_ERROR", "down")
        self.uploaded.extend(batch.events)
        self.bodies.append(codec.decompress_bytes(batch.body, 1 << 24, 1 << 26))
        response = pb.UploadBatchResponse(batch_id=batch.batch_id.bytes)
        for event in batch.events:
            response.statuses.add(event_id=event.event_id.bytes, status=pb.RECEIVED,
                                  result=pb.EventResult(event_id=event.event_id.bytes,
                                                        result=pb.APPLIED))
        return response

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        return pb.ReceiptsPage(next_cursor=cursor)

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse:
        self.heartbeats.append(message)
        answer = pb.HeartbeatResponse()
        if self.config_version:
            answer.config_version = self.config_version
        return answer

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        return pb.CommandsPage(next_cursor=cursor)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        return pb.CommandAcksResponse()


def items_rule(database: str, version: int, **fields: Any) -> SyncRule:
    document: dict[str, Any] = {"id": "items", "version": version, "direction": "UPLINK",
                                "source": f"{database}.items", "select": {"nodes": ["*"]}}
    document.update(fields)
    return SyncRule.from_document(document)


def ship_database(path: Path) -> None:
    """The ship's business file with the `items` table the rules are checked against."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL,"
                 " qty INT NOT NULL, price DECIMAL(10,2) NOT NULL, _sync_revision CHAR(36))")
    conn.commit()
    conn.close()


def client_for(shore: RulesShore, broker: Any, tmp_path: Path, database: str) -> ShipClient:
    config = ShipConfig(node_id="ship-rules", shore_url="http://127.0.0.1:9",
                        state_path=str(tmp_path / "ship.sqlite"),
                        kafka_bootstrap_servers=broker.bootstrap_servers,
                        topic_pattern=rf"^sync\.cdc\.{database}\.",
                        heartbeat_interval_seconds=1, receipts_interval_seconds=1)
    business = tmp_path / "business.db"
    if not business.exists():
        ship_database(business)
    target = ShipTargetConfig(kind=ShipTargetKind.SQLITE, sqlite_path=str(business))
    return build_client(config, shore, ship_target=target)  # type: ignore[arg-type]


def step_until(client: ShipClient, done: Any, turns: int = 2000) -> None:
    for _ in range(turns):
        client.step()
        if done():
            return
    raise AssertionError("the client did not get there")


def activation(heartbeat: pb.Heartbeat, rule_id: str) -> pb.RuleActivation:
    return next(item for item in heartbeat.rules if item.rule_id == rule_id)


def test_offered_rules_are_checked_applied_and_reported(kafka_broker, tmp_path):
    database = f"r_{secrets.token_hex(5)}"
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    shore = RulesShore()
    shore.offer("cfg-1", items_rule(database, 1, filter="qty > 1",
                                    columns={"sensitive": ["price"]}))
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"part-{k}", k, PRICE) for k in range(1, 5)])
    client = client_for(shore, kafka_broker, tmp_path, database)
    try:
        assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
        # Only rows with qty > 1 travel, without their price, under rule items@1.
        assert sorted(e.primary_key["id"] for e in shore.uploaded) == [2, 3, 4]
        assert {(e.rule_id, e.rule_version) for e in shore.uploaded} == {("items", 1)}
        assert all(e.after is not None and "price" not in e.after for e in shore.uploaded)
        assert not any(PRICE.encode() in body for body in shore.bodies)
        last = shore.heartbeats[-1]
        assert last.active_config_version == "cfg-1"
        first = activation(last, "items")
        assert (first.active_version, first.candidate_version, first.validation) == (
            1, 1, pb.RULE_VALID)

        # The shore offers a version naming a column the ship's table does not have.
        shore.offer("cfg-2", items_rule(database, 2, columns={"sensitive": ["passport"]}))
        step_until(client, lambda: client.rules is not None
                   and client.rules.config_version == "cfg-2")
        produce(kafka_broker.bootstrap_servers, [capture.insert(9, "part-9", 9, PRICE)])
        shore.uploaded.clear()
        assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
        # Still shaped by items@1: no price, and the failed version never ran.
        assert [(e.primary_key["id"], e.rule_version) for e in shore.uploaded] == [(9, 1)]
        assert shore.uploaded[0].after is not None and "price" not in shore.uploaded[0].after
        failed = activation(shore.heartbeats[-1], "items")
        assert (failed.active_version, failed.candidate_version, failed.validation) == (
            1, 2, pb.RULE_FAILED)
        assert any("passport" in problem for problem in failed.problems)
    finally:
        client.close()
    state = SQLiteShipState(tmp_path / "ship.sqlite", "ship-rules", "g", read_only=True)
    try:
        report = status_report(state)["rules"]
    finally:
        state.close()
    assert report["rules"]["items"]["active_version"] == 1
    assert report["rules"]["items"]["candidate_version"] == 2
    assert report["rules"]["items"]["validation"] == "RULE_FAILED"


def test_records_read_again_after_a_restart_keep_the_rules_they_were_read_under(
        kafka_broker, tmp_path):
    database = f"r_{secrets.token_hex(5)}"
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    shore = RulesShore(down=True)
    shore.offer("cfg-1", items_rule(database, 1))
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"part-{k}", k, PRICE) for k in range(1, 4)])
    client = client_for(shore, kafka_broker, tmp_path, database)
    try:
        # Read under items@1; nothing reaches the shore (the link is down).
        step_until(client, lambda: any(wm.read_offset == 2
                                       for wm in client.state.watermarks()))
        # The shore releases items@2, which filters every row out; the ship switches.
        shore.offer("cfg-2", items_rule(database, 2, filter="qty > 100"))
        step_until(client, lambda: client.rules is not None
                   and client.rules.config_version == "cfg-2")
        produce(kafka_broker.bootstrap_servers,
                [capture.insert(k, f"part-{k}", k, PRICE) for k in range(4, 6)])
        step_until(client, lambda: any(wm.read_offset == 4
                                       for wm in client.state.watermarks()))
    finally:
        client.close()
    assert shore.uploaded == []

    shore.down = False
    restarted = client_for(shore, kafka_broker, tmp_path, database)
    try:
        assert restarted.run(until_idle=True, timeout=60) is ExitCode.IDLE
        blocked = restarted.state.blocked_reasons()
    finally:
        restarted.close()
    # Offsets 0..2 were read under items@1 and go as items@1; 3 and 4 never go.
    assert sorted((e.source_position, e.rule_version) for e in shore.uploaded) == [
        (0, 1), (1, 1), (2, 1)]
    assert not blocked
