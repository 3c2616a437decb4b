"""Snapshot and catch-up state from the ship to the console: a ship client built as `ship run`
builds it (its rules, its capture's position file, its state store) reports its rules' snapshot
phases on the heartbeat, the shore server stores them per node and subject, and the console's
`ruleSyncStates` query answers them to signed-in users only. A heartbeat carrying more states
than the limit is refused whole."""

from __future__ import annotations

import datetime as dt
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.console_support import ConsoleWorld, console_world, data
from tests.unit.test_ship_rules import config, rule
from tidesync.bootstrap.ship import build_client
from tidesync.capture.snapshot_activation import ActivationSnapshots
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.config import ShipConfig
from tidesync.domain.node import secret_from_text
from tidesync.ingress.auth import sign_request
from tidesync.ingress.sync_states import MAX_SYNC_STATE_REPORTS
from tidesync.ship.client import ShipClient
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

CAPTURE = "sync.cdc.ship"
STATES = """query($node: String, $rule: String, $after: String) {
  ruleSyncStates(nodeId: $node, ruleId: $rule, first: 1, after: $after) {
    items { nodeId subject ruleId ruleVersion table phase snapshotId rowsSent rowsTotal
            progress startedAt finishedAt lagRecords sentAt reportedAt inSyncSince }
    pageInfo { endCursor hasNextPage } } }"""


@pytest.fixture(scope="module")
def world(pg_database, shore_mariadb) -> Iterator[ConsoleWorld]:
    with console_world(shore_mariadb) as opened:
        yield opened


class NoLink:
    """The ship's link is not used here: the test sends the heartbeat the client builds."""

    remote = False


def register(world: ConsoleWorld) -> tuple[str, bytes]:
    node_id = f"sync-{secrets.token_hex(4)}"
    issued = data(world.query(
        "mutation($input: RegisterNodeInput!) { registerNode(input: $input) {"
        " __typename ... on NodeSecretIssued { secret } } }",
        {"input": {"nodeId": node_id, "reason": "sync state test"}}))["registerNode"]
    assert issued["__typename"] == "NodeSecretIssued", issued
    return node_id, secret_from_text(issued["secret"])


def send_heartbeat(world: ConsoleWorld, node_id: str, secret: bytes,
                   heartbeat: pb.Heartbeat) -> Any:
    body = codec.compress(heartbeat)
    headers = sign_request(node_id, secret, "POST", "/sync/v1/heartbeat", body,
                           dt.datetime.now(dt.UTC), str(uuid.uuid4()))
    return world.client.post("/sync/v1/heartbeat", content=body, headers={
        "Content-Type": "application/x-protobuf", "Content-Encoding": "zstd", **headers})


def ship_client(node_id: str, broker: Any, tmp_path: Path) -> ShipClient:
    ship = ShipConfig(node_id=node_id, shore_url="http://127.0.0.1:9", secret="",
                      state_path=str(tmp_path / "ship.sqlite"),
                      kafka_bootstrap_servers=broker.bootstrap_servers,
                      topic_pattern=rf"^{CAPTURE}\.{node_id}\.")
    return build_client(ship, NoLink(),  # type: ignore[arg-type]
                        activated=ActivationSnapshots(tmp_path / "position.sqlite", CAPTURE))


def states(world: ConsoleWorld, role: str = "viewer", **variables: Any) -> list[dict[str, Any]]:
    """Every page of the query, one state a page."""
    found: list[dict[str, Any]] = []
    after = None
    while True:
        page = data(world.query(STATES, {**variables, "after": after}, role=role))[
            "ruleSyncStates"]
        found += page["items"]
        if not page["pageInfo"]["hasNextPage"]:
            return found
        after = page["pageInfo"]["endCursor"]


def test_a_ship_heartbeat_carries_its_rule_sync_states_to_the_console(
        world: ConsoleWorld, kafka_broker, tmp_path: Path):
    node_id, secret = register(world)
    client = ship_client(node_id, kafka_broker, tmp_path)
    try:
        assert client.rules is not None
        now = dt.datetime.now(dt.UTC)
        client.rules.apply_config(config("cfg-1", rule(3, "crew-list", snapshot="on_activation"),
                                         rule(1, "cargo", source="ops.cargo")), now)
        # The capture reads the snapshot the activation asked for and puts it on the queue.
        store = SnapshotStore(tmp_path / "position.sqlite")
        try:
            (request,) = store.requests()
            started = now.replace(microsecond=0)
            store.start(request.id, rows_total=250, chunks_total=1, now=started)
            store.chunk_done(request.id, (250,), 250, {(f"{CAPTURE}.ops.crew", 0): 5},
                             started + dt.timedelta(seconds=3), last=True)
        finally:
            store.close()
        heartbeat = client.heartbeat_message()
    finally:
        client.close()
    answer = send_heartbeat(world, node_id, secret, heartbeat)
    assert answer.status_code == 200, answer.content

    shown = states(world, node=node_id)
    assert [(s["subject"], s["phase"]) for s in shown] == [
        ("rule:cargo", "NONE"), ("rule:crew-list", "CATCHING_UP")]
    cargo, crew = shown
    assert (cargo["ruleVersion"], cargo["table"], cargo["snapshotId"], cargo["rowsTotal"]) == (
        1, "ops.cargo", None, None)
    assert (crew["ruleId"], crew["ruleVersion"], crew["table"], crew["snapshotId"]) == (
        "crew-list", 3, "ops.crew", request.id)
    # No record up to the snapshot's last (offset 5) has an answer from the shore yet.
    assert (crew["rowsSent"], crew["rowsTotal"], crew["progress"], crew["lagRecords"]) == (
        250, 250, 1.0, 6)
    assert dt.datetime.fromisoformat(crew["startedAt"]) == started
    assert dt.datetime.fromisoformat(crew["finishedAt"]) == started + dt.timedelta(seconds=3)
    assert crew["inSyncSince"] is None  # still catching up
    assert [s["subject"] for s in states(world, role="operator", rule="crew-list")] == [
        "rule:crew-list"]

    # A newer heartbeat replaces the node's states: a rule no longer active is forgotten.
    newer = pb.Heartbeat()
    newer.CopyFrom(heartbeat)
    newer.sent_at_micros += 60_000_000
    del newer.sync_states[0]
    newer.sync_states[0].phase = pb.SYNC_IN_SYNC
    newer.sync_states[0].lag_records = 0
    assert send_heartbeat(world, node_id, secret, newer).status_code == 200
    shown = states(world, node=node_id)
    assert [(s["subject"], s["phase"], s["lagRecords"])
            for s in shown] == [("rule:crew-list", "IN_SYNC", 0)]
    reached = dt.datetime.fromisoformat(shown[0]["inSyncSince"])
    assert reached == dt.datetime.fromisoformat(shown[0]["sentAt"])

    # Later heartbeats of the same snapshot, still IN_SYNC, keep the time it got there...
    later = pb.Heartbeat()
    later.CopyFrom(newer)
    later.sent_at_micros += 60_000_000
    assert send_heartbeat(world, node_id, secret, later).status_code == 200
    (still,) = states(world, node=node_id)
    assert dt.datetime.fromisoformat(still["inSyncSince"]) == reached
    assert dt.datetime.fromisoformat(still["sentAt"]) == reached + dt.timedelta(minutes=1)
    # ...a new snapshot (another rule version) starts over.
    again = pb.Heartbeat()
    again.CopyFrom(later)
    again.sent_at_micros += 60_000_000
    again.sync_states[0].rule_version = 4
    again.sync_states[0].snapshot_id += 1
    again.sync_states[0].phase = pb.SYNC_SNAPSHOTTING
    assert send_heartbeat(world, node_id, secret, again).status_code == 200
    (restarted,) = states(world, node=node_id)
    assert (restarted["phase"], restarted["inSyncSince"]) == ("SNAPSHOTTING", None)


def test_only_signed_in_users_read_sync_states(world: ConsoleWorld):
    for token in (None, "tsu_" + secrets.token_urlsafe(32)):
        refused = world.post(STATES, {"node": "any"}, token)
        assert refused.status_code == 401
        assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert refused.json().get("data") is None


def test_a_heartbeat_over_the_limit_is_refused_and_stores_nothing(world: ConsoleWorld):
    node_id, secret = register(world)
    heartbeat = pb.Heartbeat(
        protocol_version=codec.PROTOCOL_VERSION, node_id=node_id,
        sent_at_micros=(dt.datetime.now(dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
        // dt.timedelta(microseconds=1),
        sync_states=[pb.SyncState(rule_id=f"r{number}", rule_version=1, table="erp.t",
                                  phase=pb.SYNC_NONE)
                     for number in range(MAX_SYNC_STATE_REPORTS + 1)])
    answer = send_heartbeat(world, node_id, secret, heartbeat)
    assert answer.status_code == 413
    assert states(world, node=node_id) == []
    del heartbeat.sync_states[1:]
    heartbeat.sync_states[0].snapshot_id = 7  # NONE has no snapshot
    assert send_heartbeat(world, node_id, secret, heartbeat).status_code == 400
    assert states(world, node=node_id) == []
