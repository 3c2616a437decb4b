"""Node identity: the aggregate, the node commands, sealed secrets and the credential cache.

The nodes application runs on the library's in-memory store here; the integration tests run it
on PostgreSQL.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clocks import rounded_now
from tidesync.apps.master_key import MasterKeyError, SecretBox, load_master_key
from tidesync.apps.nodes import (
    Actor,
    NodeAlreadyRegistered,
    NodeIdReserved,
    NodeNotFound,
    NodesApplication,
    NodeService,
)
from tidesync.config import ShoreConfig, load_config
from tidesync.domain.node import (
    InvalidNodeId,
    Node,
    NodeError,
    NodeRevoked,
    NodeStatus,
    node_uuid,
    secret_from_text,
)
from tidesync.ingress.nodes import NodeDirectory

NOW = rounded_now()
ACTOR = Actor("alice", "commissioning", "trace-1")
KEY = bytes(range(32))


@pytest.fixture
def app() -> Iterator[NodesApplication]:
    application = NodesApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    yield application
    application.close()


@pytest.fixture
def service(app: NodesApplication) -> NodeService:
    return NodeService(app, SecretBox(KEY))


# ----------------------------------------------------------------------------- aggregate


def test_a_node_id_names_one_stream() -> None:
    assert node_uuid("ship-0042") == node_uuid("ship-0042") != node_uuid("ship-0043")
    node = Node(node_id="ship-0042", sealed_secret="s1", at=NOW, actor="a", reason="r")
    assert node.id == node_uuid("ship-0042")


@pytest.mark.parametrize("bad", ["", "Ship", "-ship", "ship_1", "a" * 64, "ship 1", "schiff-ü"])
def test_node_ids_are_lower_case_dns_like_labels(bad: str) -> None:
    with pytest.raises(InvalidNodeId):
        Node(node_id=bad, sealed_secret="s", at=NOW, actor="a", reason="r")


def test_rotation_keeps_the_old_credential_for_the_overlap() -> None:
    node = Node(node_id="ship-1", sealed_secret="s1", at=NOW, actor="a", reason="r")
    node.rotate("s2", NOW, dt.timedelta(hours=2), "a", "scheduled")
    assert [c.sealed_secret for c in node.valid_credentials(NOW)] == ["s1", "s2"]
    later = NOW + dt.timedelta(hours=2)
    assert [c.sealed_secret for c in node.valid_credentials(later)] == ["s2"]
    # A second rotation drops what already expired and never extends an earlier end.
    node.rotate("s3", NOW + dt.timedelta(hours=1), dt.timedelta(hours=5), "a", "again")
    ends = {c.sealed_secret: c.valid_until for c in node.credentials}
    assert ends == {"s1": NOW + dt.timedelta(hours=2), "s2": NOW + dt.timedelta(hours=6),
                    "s3": None}
    assert [c.number for c in node.credentials] == [1, 2, 3]


def test_revoking_ends_every_credential_and_is_final() -> None:
    node = Node(node_id="ship-1", sealed_secret="s1", at=NOW, actor="a", reason="r")
    with pytest.raises(NodeError):
        node.revoke(NOW, "a", " ")
    node.revoke(NOW, "security", "ship sold")
    assert node.status is NodeStatus.REVOKED and node.valid_credentials(NOW) == []
    with pytest.raises(NodeRevoked):
        node.revoke(NOW, "a", "again")
    with pytest.raises(NodeRevoked):
        node.rotate("s2", NOW, dt.timedelta(0), "a", "r")


def test_every_event_records_actor_reason_time_and_trace(
    service: NodeService, app: NodesApplication,
) -> None:
    service.register("ship-1", ACTOR, NOW)
    service.rotate("ship-1", dt.timedelta(hours=1), Actor("bob", "yearly", "t2"),
                   NOW + dt.timedelta(days=1))
    service.revoke("ship-1", Actor("carol", "decommissioned", "t3"), NOW + dt.timedelta(days=2))
    events = list(app.events.get(node_uuid("ship-1")))
    assert [type(e).__name__ for e in events] == ["Registered", "CredentialRotated", "Revoked"]
    assert [(e.actor, e.reason, e.trace_id) for e in events] == [  # type: ignore[attr-defined]
        ("alice", "commissioning", "trace-1"), ("bob", "yearly", "t2"),
        ("carol", "decommissioned", "t3")]
    assert [e.at for e in events] == [  # type: ignore[attr-defined]
        NOW, NOW + dt.timedelta(days=1), NOW + dt.timedelta(days=2)]


# ----------------------------------------------------------------------------- service


def test_register_issues_a_secret_stored_only_sealed(
    service: NodeService, app: NodesApplication,
) -> None:
    issued = service.register("ship-1", ACTOR, NOW)
    assert len(issued.secret) == 32 and secret_from_text(issued.text) == issued.secret
    node = app.node("ship-1")
    sealed = node.credentials[0].sealed_secret
    assert issued.text not in sealed and base64.b64encode(issued.secret).decode() not in sealed
    assert SecretBox(KEY).open(sealed, "ship-1", 1) == issued.secret


def test_registering_twice_fails_clearly(service: NodeService) -> None:
    service.register("ship-1", ACTOR, NOW)
    with pytest.raises(NodeAlreadyRegistered, match="ship-1 is already registered"):
        service.register("ship-1", ACTOR, NOW)


def test_commands_on_unknown_nodes_fail(service: NodeService) -> None:
    with pytest.raises(NodeNotFound):
        service.rotate("ship-9", dt.timedelta(hours=1), ACTOR, NOW)
    with pytest.raises(NodeNotFound):
        service.revoke("ship-9", ACTOR, NOW)


def test_list_shows_every_node(service: NodeService) -> None:
    service.register("ship-1", ACTOR, NOW)
    service.register("ship-2", ACTOR, NOW)
    service.rotate("ship-1", dt.timedelta(hours=3), ACTOR, NOW)
    service.revoke("ship-2", Actor("x", "sold"), NOW)
    summaries = {s.node_id: s for s in service.list(NOW)}
    assert summaries["ship-1"].valid_credentials == 2
    assert summaries["ship-1"].credentials_expiring == NOW + dt.timedelta(hours=3)
    assert summaries["ship-2"].status is NodeStatus.REVOKED
    assert summaries["ship-2"].revoke_reason == "sold"


def test_without_the_master_key_no_secret_can_be_issued(app: NodesApplication) -> None:
    with pytest.raises(MasterKeyError):
        NodeService(app, None).register("ship-1", ACTOR, NOW)


# ----------------------------------------------------------------------------- directory


class Ticks:
    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> float:
        return self.value


def test_the_directory_caches_for_its_ttl(service: NodeService, app: NodesApplication) -> None:
    ticks = Ticks()
    directory = NodeDirectory(lambda: app, lambda: SecretBox(KEY), ttl=5.0, monotonic=ticks)
    assert directory.lookup("ship-1").status is None  # unknown, cached as unknown
    issued = service.register("ship-1", ACTOR, NOW)
    assert directory.lookup("ship-1").status is None
    assert directory.lookup("ship-1", max_age=0).secrets_at(NOW) == [issued.secret]
    service.revoke("ship-1", Actor("x", "lost"), NOW)
    ticks.value = 4.9
    assert directory.cached("ship-1") is not None
    ticks.value = 5.0
    assert directory.cached("ship-1") is None
    assert directory.lookup("ship-1").status is NodeStatus.REVOKED


def test_the_directory_does_not_look_up_impossible_ids(app: NodesApplication) -> None:
    def no_app() -> NodesApplication:
        raise AssertionError("looked up")

    directory = NodeDirectory(no_app, lambda: SecretBox(KEY))
    assert directory.lookup("../etc/passwd").status is None


# ----------------------------------------------------------------------------- master key


def test_sealed_secrets_open_only_for_their_node_and_number() -> None:
    box = SecretBox(KEY)
    sealed = box.seal(b"s" * 32, "ship-1", 2, os.urandom(12))
    assert box.open(sealed, "ship-1", 2) == b"s" * 32
    for node, number in (("ship-2", 2), ("ship-1", 1)):
        with pytest.raises(MasterKeyError):
            box.open(sealed, node, number)
    with pytest.raises(MasterKeyError):
        SecretBox(bytes(32)).open(sealed, "ship-1", 2)


def test_the_key_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "master.key"
    shore = ShoreConfig(master_key_file=str(path))
    with pytest.raises(MasterKeyError, match="does not exist"):
        load_master_key(shore.master_key, shore.master_key_file)
    key = load_master_key(shore.master_key, shore.master_key_file, create=True)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_master_key(shore.master_key, shore.master_key_file) == key
    path.chmod(0o640)
    with pytest.raises(MasterKeyError, match="group or others"):
        load_master_key(shore.master_key, shore.master_key_file)


def test_the_key_from_configuration_wins(tmp_path: Path) -> None:
    text = base64.b64encode(KEY).decode()
    shore = ShoreConfig(master_key=text, master_key_file=str(tmp_path / "absent"))
    assert load_master_key(shore.master_key, shore.master_key_file, create=True) == KEY
    assert not (tmp_path / "absent").exists()
    with pytest.raises(MasterKeyError):
        load_master_key(base64.b64encode(b"short").decode(), '')


class CountingNodes:
    """The nodes application's reads, counted (the real one is used in the tests above)."""

    def __init__(self, app: NodesApplication) -> None:
        self.app, self.reads = app, 0

    def node(self, node_id: str) -> object:
        self.reads += 1
        return self.app.node(node_id)


def test_invented_node_ids_are_cached_apart_and_never_evict_real_nodes(
    service: NodeService, app: NodesApplication,
) -> None:
    ticks = Ticks()
    counting = CountingNodes(app)
    directory = NodeDirectory(lambda: counting, lambda: SecretBox(KEY),  # type: ignore[arg-type,return-value]
                              ttl=5.0, monotonic=ticks, max_entries=50, max_unknown=20)
    service.register("ship-1", ACTOR, NOW)
    assert directory.lookup("ship-1").status is NodeStatus.ACTIVE
    for n in range(200):
        assert directory.lookup(f"invented-{n}").status is None
    assert counting.reads == 201
    # The real node is still cached; the latest unknown ids are answered from the cache.
    assert directory.cached("ship-1") is not None
    assert directory.lookup("invented-199").status is None
    assert directory.lookup("ship-1").status is NodeStatus.ACTIVE
    assert counting.reads == 201


def test_the_shores_own_ids_are_never_registered(app: NodesApplication) -> None:
    service = NodeService(app, SecretBox(KEY), reserved=frozenset({"office-hq"}))
    for node_id in ("shore", "office-hq"):
        with pytest.raises(NodeIdReserved):
            service.register(node_id, ACTOR, NOW)
    assert service.register("ship-1", ACTOR, NOW).secret
    with pytest.raises(NodeIdReserved):
        NodeService(app, SecretBox(KEY)).register("shore", ACTOR, NOW)


def test_the_key_file_setting_is_made_absolute(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(env={"TIDESYNC_SHORE__MASTER_KEY_FILE": "keys/master.key"})
    assert config.shore.master_key_file == str(tmp_path / "keys" / "master.key")
    assert load_config(env={}).shore.master_key_file == str(
        tmp_path / "tidesync-data" / "master.key")
