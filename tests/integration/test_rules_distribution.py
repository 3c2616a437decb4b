"""Rule distribution end to end on a real server and PostgreSQL: nodes with groups and tags,
GET /sync/v1/config offering exactly the released rules that select the node (signed like every
answer), heartbeats' rule reports stored and read back, the heartbeat telling a node to fetch
only when its set differs, and the activation step.

The released rules come from a small in-memory `ReleasedRules` (the release application has its
own tests); everything else is the real thing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import secrets
import uuid
from collections.abc import Iterator

import pytest

from tests.integration import test_ingress as base
from tests.integration.sync_client import Answer, SyncClient, send
from tests.integration.test_ingress import (
    ACTOR,
    PREFIX,
    FakeClock,
    make_config,
    node_service,
    query,
    running,
)
from tidesync.apps.nodes import Actor, NodesApplication
from tidesync.bootstrap.event_store import event_store_env
from tidesync.config import Config
from tidesync.domain.node import NodeError, NodeLink, NodeProfile
from tidesync.domain.rules.release import NodeActivation, ReleaseStatus
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.ingress.auth import sign_request
from tidesync.ingress.database import open_pool
from tidesync.ingress.heartbeats import PostgresHeartbeats
from tidesync.ingress.rule_reports import MAX_RULE_REPORTS, PostgresRuleActivations
from tidesync.ingress.rules import NO_RULES_VERSION, OfferedRule, config_version
from tidesync.localservices import PostgresDatabase
from tidesync.shore.rule_activation import RuleActivationStep
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import RESPONSE_SIGNATURE_HEADER, response_signature_matches

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """A database of its own: once a rule is released in a database, the shore applies by
    rules there, which every other test sharing it would see."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


# The fixtures of the sync API's main test module: its database and clock.
database, clock = base.database, base.clock


@pytest.fixture(scope="module", autouse=True)
def forget_reports(database: PostgresDatabase) -> Iterator[None]:
    """This module's rule reports are removed when it ends (other modules share the table)."""
    yield
    with database.connect() as conn:
        conn.execute("DELETE FROM rule_activation WHERE node_id LIKE %s", (PREFIX + "%",))


class MemoryReleasedRules:
    """Releases the test publishes; `mark_active` moves one to ACTIVE as the real one does."""

    def __init__(self) -> None:
        self.releases: dict[tuple[str, int], tuple[SyncRule, ReleaseStatus]] = {}
        self.marked: list[tuple[str, int, str, str]] = []

    def publish(self, rule: SyncRule, status: ReleaseStatus = ReleaseStatus.DISTRIBUTING
                ) -> SyncRule:
        self.releases[(rule.rule_id, rule.version)] = (rule, status)
        return rule

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        newest: dict[str, tuple[SyncRule, ReleaseStatus]] = {}
        for (rule_id, _version), (rule, status) in sorted(self.releases.items()):
            if status in (ReleaseStatus.DISTRIBUTING, ReleaseStatus.ROLLBACK_TARGET,
                          ReleaseStatus.ACTIVE):
                newest[rule_id] = (rule, status)
        return list(newest.values())

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        found = self.releases.get((rule_id, version))
        return None if found is None else found[0]

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        self.marked.append((rule_id, version, actor, reason))
        for (other_id, other), (rule, status) in list(self.releases.items()):
            if other_id == rule_id and status is ReleaseStatus.ACTIVE:
                self.releases[(other_id, other)] = (rule, ReleaseStatus.SUPERSEDED)
        rule, _ = self.releases[(rule_id, version)]
        self.releases[(rule_id, version)] = (rule, ReleaseStatus.ACTIVE)


def rule(rule_id: str, version: int, *, nodes: tuple[str, ...] = (),
         groups: tuple[str, ...] = (), tags: tuple[str, ...] = ()) -> SyncRule:
    selector = Selector(frozenset(nodes), frozenset(groups), frozenset(tags))
    return SyncRule(rule_id, "fleet_erp", rule_id.replace("-", "_"), Direction.UPLINK,
                    selector, version=version, key_columns=("id",))


@dataclasses.dataclass
class Fleet:
    """Registered nodes (name → node id, secret), one server offering `rules`, the names'
    group and tag (unique to the test, so other tests' nodes are never selected)."""

    config: Config
    clock: FakeClock
    rules: MemoryReleasedRules
    url: str
    nodes: dict[str, tuple[str, bytes]]
    group: str
    tag: str

    def client(self, name: str) -> SyncClient:
        node_id, secret = self.nodes[name]
        return SyncClient(self.url, node_id, secret, self.clock)

    def node_id(self, name: str) -> str:
        return self.nodes[name][0]


@pytest.fixture
def fleet(database: PostgresDatabase, clock: FakeClock) -> Iterator[Fleet]:
    """Nodes `north` (in the group), `tanker` (with the tag), `both`, `plain` (neither) and
    `revoked` (in the group, revoked); a server for them."""
    config = make_config(database)
    suffix = secrets.token_hex(3)
    group, tag = f"north-{suffix}", f"tanker-{suffix}"
    profiles = {"north": NodeProfile.of([group]), "tanker": NodeProfile.of(tags=[tag]),
                "both": NodeProfile.of([group], [tag]), "plain": NodeProfile(),
                "revoked": NodeProfile.of([group])}
    nodes: dict[str, tuple[str, bytes]] = {}
    with node_service(config) as service:
        for name, profile in profiles.items():
            node_id = f"{PREFIX}{name}-{suffix}"
            secret = service.register(node_id, ACTOR, clock()).secret
            service.change_profile(node_id, profile, ACTOR, clock())
            nodes[name] = (node_id, secret)
        service.revoke(nodes["revoked"][0], Actor("test-operator", "sold"), clock())
    rules = MemoryReleasedRules()
    with running(config, clock, released=rules) as url:
        yield Fleet(config, clock, rules, url, nodes, group, tag)


def micros(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def beat(node_id: str, sent_at: dt.datetime, config_version: str = "",
         reports: list[pb.RuleActivation] | None = None) -> pb.Heartbeat:
    return pb.Heartbeat(protocol_version=codec.PROTOCOL_VERSION, node_id=node_id,
                        client_version="0.1.0", sent_at_micros=micros(sent_at),
                        active_config_version=config_version, rules=reports or [])


def running_version(rule_id: str, version: int, *problems: str) -> pb.RuleActivation:
    """A report: the node runs `version`; with problems, the next version failed."""
    if problems:
        return pb.RuleActivation(rule_id=rule_id, active_version=version,
                                 candidate_version=version + 1, validation=pb.RULE_FAILED,
                                 problems=list(problems))
    return pb.RuleActivation(rule_id=rule_id, active_version=version, candidate_version=version,
                             validation=pb.RULE_VALID, activated_at_micros=1)


def offered(answer: Answer) -> pb.ConfigResponse:
    assert answer.status == 200, (answer.status, answer.error())
    return answer.message(pb.ConfigResponse)


@pytest.fixture
def reports(database: PostgresDatabase) -> Iterator[PostgresRuleActivations]:
    pool = open_pool(database.dsn, 2, 5)
    pool.open()
    activations = PostgresRuleActivations(pool)
    yield activations
    activations.close()


# ----------------------------------------------------------------------------- config


def test_config_offers_exactly_the_rules_that_select_the_node(fleet: Fleet) -> None:
    crew = fleet.rules.publish(rule("crew", 2, groups=(fleet.group,)))
    cargo = fleet.rules.publish(rule("cargo", 1, tags=(fleet.tag,)), ReleaseStatus.ACTIVE)
    logbook = fleet.rules.publish(rule("logbook", 4, nodes=(fleet.node_id("plain"),)),
                                  ReleaseStatus.ROLLBACK_TARGET)
    fleet.rules.publish(rule("south", 1, groups=("south-nobody",)), ReleaseStatus.ACTIVE)
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)), ReleaseStatus.ACTIVE)

    north = offered(fleet.client("north").config())
    (snapshot,) = north.rules
    assert (snapshot.rule_id, snapshot.version, snapshot.status) == ("crew", 2,
                                                                     pb.DISTRIBUTING)
    assert SyncRule.from_document(json.loads(snapshot.content)).checksum() == crew.checksum()
    assert snapshot.content == crew.canonical() and snapshot.checksum == crew.checksum()
    assert north.config_version == config_version(
        [OfferedRule.of(crew, ReleaseStatus.DISTRIBUTING)])
    # The control parameters are the shore's own settings of its upload limits.
    shore = fleet.config.shore
    assert (north.control.batch_max_events, north.control.heartbeat_interval_seconds,
            north.control.batch_max_uncompressed_bytes) == (
        shore.max_events_per_batch, shore.heartbeat_interval_seconds,
        shore.max_decompressed_bytes)

    both = offered(fleet.client("both").config())
    assert [(r.rule_id, r.version) for r in both.rules] == [("cargo", 1), ("crew", 2)]
    assert both.config_version == config_version(
        [OfferedRule.of(cargo, ReleaseStatus.ACTIVE),
         OfferedRule.of(crew, ReleaseStatus.DISTRIBUTING)])
    plain = offered(fleet.client("plain").config())
    assert [(r.rule_id, r.status) for r in plain.rules] == [("logbook", pb.ROLLBACK_TARGET)]
    assert plain.rules[0].content == logbook.canonical()


def test_a_node_no_rule_selects_gets_the_empty_set(fleet: Fleet) -> None:
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)))
    plain = offered(fleet.client("plain").config())
    assert (plain.config_version, list(plain.rules)) == (NO_RULES_VERSION, [])


def test_the_config_answer_is_signed_with_the_nodes_secret(fleet: Fleet) -> None:
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)))
    node_id, secret = fleet.nodes["north"]
    signed = sign_request(node_id, secret, "GET", "/sync/v1/config", b"", fleet.clock(),
                          str(uuid.uuid4()))
    headers = {codec.PROTOCOL_VERSION_HEADER: codec.PROTOCOL_VERSION, **signed}
    answer = send(fleet.url, "GET", "/sync/v1/config", b"", headers)
    assert answer.status == 200
    claimed = answer.headers[RESPONSE_SIGNATURE_HEADER.lower()]
    assert response_signature_matches(secret, signed, "GET", "/sync/v1/config", 200,
                                      answer.body, claimed)
    assert not response_signature_matches(fleet.nodes["plain"][1], signed, "GET",
                                          "/sync/v1/config", 200, answer.body, claimed)
    unsigned = send(fleet.url, "GET", "/sync/v1/config", b"", {})
    assert unsigned.status == 401



# ----------------------------------------------------------------------------- heartbeats


def test_rule_reports_are_stored_and_read_back_per_rule(
    fleet: Fleet, reports: PostgresRuleActivations,
) -> None:
    north, tanker = fleet.node_id("north"), fleet.node_id("tanker")
    sent = fleet.clock()
    failed = running_version("crew", 1, "column crew.rank is missing", "table crew_log is absent")
    assert fleet.client("north").heartbeat(beat(north, sent, reports=[
        failed, running_version("cargo", 3)])).status == 200
    assert fleet.client("tanker").heartbeat(beat(tanker, sent, reports=[
        running_version("crew", 2)])).status == 200
    assert reports.activations("crew") == [
        NodeActivation(north, 1, 2, "RULE_FAILED",
                       ("column crew.rank is missing", "table crew_log is absent"), sent),
        NodeActivation(tanker, 2, 2, "RULE_VALID", (), sent),
    ]
    assert [(a.node_id, a.active_version) for a in reports.activations("cargo")] == [
        (north, 3)]

    # A newer heartbeat replaces the node's reports; a late older one changes nothing.
    fleet.clock.advance(60)
    assert fleet.client("north").heartbeat(beat(north, fleet.clock(), reports=[
        running_version("crew", 2)])).status == 200
    assert fleet.client("north").heartbeat(beat(north, sent, reports=[failed])).status == 200
    assert [(a.node_id, a.active_version, a.validation, a.reported_at)
            for a in reports.activations("crew")] == [
        (north, 2, "RULE_VALID", fleet.clock()), (tanker, 2, "RULE_VALID", sent)]
    assert reports.activations("cargo") == []


def test_the_heartbeat_names_the_config_only_when_the_node_runs_another(fleet: Fleet) -> None:
    north = fleet.node_id("north")
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)))
    offered_now = offered(fleet.client("north").config()).config_version

    def answer(active: str) -> pb.HeartbeatResponse:
        fleet.clock.advance(1)
        reply = fleet.client("north").heartbeat(beat(north, fleet.clock(), active))
        assert reply.status == 200, reply.error()
        return reply.message(pb.HeartbeatResponse)

    assert answer("").config_version == offered_now
    assert not answer(offered_now).HasField("config_version")
    # A new version reaches the heartbeat once the offer is read again (at most 5 s later).
    fleet.rules.publish(rule("crew", 2, groups=(fleet.group,)))
    fleet.clock.advance(5)
    newer = answer(offered_now)
    assert newer.HasField("config_version") and newer.config_version != offered_now
    assert newer.config_version == offered(fleet.client("north").config()).config_version
    plain = fleet.client("plain").heartbeat(beat(fleet.node_id("plain"), fleet.clock(),
                                                 NO_RULES_VERSION))
    assert not plain.message(pb.HeartbeatResponse).HasField("config_version")


@pytest.mark.parametrize("reports, status, reason", [
    ([running_version(f"r{n}", 1) for n in range(MAX_RULE_REPORTS + 1)], 413,
     "TOO_MANY_RULE_REPORTS"),
    ([running_version("crew", 1, *["a problem"] * 21)], 413, "TOO_MANY_RULE_REPORTS"),
    ([running_version("crew", 1, "p" * 301)], 413, "TOO_MANY_RULE_REPORTS"),
    # The wire refuses a NUL in any string before the reports are looked at.
    ([running_version("crew", 1, "column \x00 rank")], 400, "NUL_IN_STRING"),
    ([running_version("Crew!", 1)], 400, "BAD_RULE_REPORT"),
])
def test_oversized_or_unstorable_reports_are_refused_with_a_reason(
    fleet: Fleet, reports: list[pb.RuleActivation], status: int, reason: str,
    database: PostgresDatabase,
) -> None:
    north = fleet.node_id("north")
    refused = fleet.client("north").heartbeat(beat(north, fleet.clock(), reports=reports))
    assert (refused.status, refused.error().reason_code) == (status, reason)
    assert query(database, "SELECT count(*) FROM rule_activation WHERE node_id = %s",
                 north) == [(0,)]
    assert query(database, "SELECT count(*) FROM node_heartbeat WHERE node_id = %s",
                 north) == [(0,)]


# ----------------------------------------------------------------------------- activation


def test_a_release_becomes_active_once_every_selected_node_runs_it(
    fleet: Fleet, database: PostgresDatabase, reports: PostgresRuleActivations,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`north` and `both` are in the group; `revoked` is too but no longer counts."""
    caplog.set_level(logging.INFO, logger="tidesync.shore.rule_activation")
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)), ReleaseStatus.ACTIVE)
    fleet.rules.publish(rule("crew", 2, groups=(fleet.group,)))
    fleet.rules.publish(rule("cargo", 3, tags=(fleet.tag,)), ReleaseStatus.ROLLBACK_TARGET)
    fleet.rules.publish(rule("unheard", 1, groups=("nobody-" + fleet.group,)))
    pool = open_pool(database.dsn, 2, 5)
    pool.open()
    heartbeats = PostgresHeartbeats(pool)
    nodes = NodesApplication(env=event_store_env(fleet.config.event_store))
    step = RuleActivationStep(fleet.rules, reports, nodes)

    def report(name: str, *activations: pb.RuleActivation) -> None:
        fleet.clock.advance(1)
        heartbeats.record(fleet.node_id(name), beat(fleet.node_id(name), fleet.clock(),
                                                    reports=list(activations)), fleet.clock())

    try:
        report("north", running_version("crew", 2))
        report("both", running_version("crew", 1, "column crew.rank is missing"),
               running_version("cargo", 3))
        report("tanker", running_version("cargo", 2))
        assert step.check() == 0 and step.check() == 0
        assert fleet.rules.marked == []
        failures = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert failures == [f"node {fleet.node_id('both')} cannot run rule crew version 2:"
                            " ('column crew.rank is missing',)"]

        report("both", running_version("crew", 2), running_version("cargo", 3))
        assert step.check() == 1
        assert fleet.rules.marked == [("crew", 2, "system:rules",
                                       "all 2 selected nodes run version 2")]
        report("tanker", running_version("cargo", 3))
        assert step.check() == 1
        assert [m[:2] for m in fleet.rules.marked] == [("crew", 2), ("cargo", 3)]
        # Nothing selects "unheard": it stays DISTRIBUTING; active releases are left alone.
        assert step.check() == 0
        assert dict(((r.rule_id, r.version), s) for r, s in fleet.rules.offered()) == {
            ("crew", 2): ReleaseStatus.ACTIVE, ("cargo", 3): ReleaseStatus.ACTIVE,
            ("unheard", 1): ReleaseStatus.DISTRIBUTING}
    finally:
        nodes.close()
        pool.close()


def test_the_step_runs_once_per_interval(fleet: Fleet,
                                         reports: PostgresRuleActivations) -> None:
    nodes = NodesApplication(env=event_store_env(fleet.config.event_store))
    step = RuleActivationStep(fleet.rules, reports, nodes, interval=15,
                              monotonic=fleet.clock.monotonic)
    try:
        fleet.rules.publish(rule("crew", 1, nodes=(fleet.node_id("plain"),)))
        assert fleet.client("plain").heartbeat(beat(fleet.node_id("plain"), fleet.clock(),
                                                    reports=[running_version("crew", 1)])
                                               ).status == 200
        fleet.clock.advance(1)
        assert step.run_once() == 1
        fleet.rules.publish(rule("crew", 2, nodes=(fleet.node_id("plain"),)))
        assert fleet.client("plain").heartbeat(beat(fleet.node_id("plain"), fleet.clock(),
                                                    reports=[running_version("crew", 2)])
                                               ).status == 200
        fleet.clock.advance(14)
        assert step.run_once() == 0 and fleet.rules.marked[-1][:2] == ("crew", 1)
        fleet.clock.advance(1)
        assert step.run_once() == 1 and fleet.rules.marked[-1][:2] == ("crew", 2)
    finally:
        nodes.close()


def test_a_nodes_uplink_limit_reaches_its_config_and_a_change_asks_for_a_new_one(
        fleet: Fleet) -> None:
    north, node_id = fleet.client("north"), fleet.node_id("north")
    fleet.rules.publish(rule("crew", 1, groups=(fleet.group,)))
    before = offered(north.config())
    assert (before.control.rate_bytes_per_sec, before.control.burst_bytes) == (0, 0)

    with node_service(fleet.config) as service:
        link = service.change_link(node_id, NodeLink.of(128 * 1024), Actor("ops", "VSAT plan"),
                                   fleet.clock())
        assert link == NodeLink(128 * 1024, 16 * 1024)  # the burst: an eighth of a second
        with pytest.raises(NodeError, match="needs a reason"):
            service.change_link(node_id, NodeLink.of(64 * 1024), Actor("ops", " "),
                                fleet.clock())
    fleet.clock.advance(6)  # the credential directory reads the node again after 5 s
    limited = offered(north.config())
    assert (limited.control.rate_bytes_per_sec, limited.control.burst_bytes) == (
        128 * 1024, 16 * 1024)
    assert [r.rule_id for r in limited.rules] == ["crew"]
    # The same rules under another version: a ship that runs the old one is told to fetch.
    assert limited.config_version != before.config_version
    reply = north.heartbeat(beat(node_id, fleet.clock(), before.config_version))
    assert reply.message(pb.HeartbeatResponse).config_version == limited.config_version
    fleet.clock.advance(1)
    reply = north.heartbeat(beat(node_id, fleet.clock(), limited.config_version))
    assert not reply.message(pb.HeartbeatResponse).HasField("config_version")

    with node_service(fleet.config) as service:
        assert service.show(node_id, fleet.clock()).link.uplink_rate == 128 * 1024
        service.change_link(node_id, NodeLink.of(0), Actor("ops", "unmetered now"),
                            fleet.clock())
        with pytest.raises(NodeError, match="revoked"):
            service.change_link(fleet.node_id("revoked"), NodeLink.of(64 * 1024), ACTOR,
                                fleet.clock())
    fleet.clock.advance(6)
    lifted = offered(north.config())
    assert (lifted.control.rate_bytes_per_sec, lifted.config_version) == (
        0, before.config_version)


def test_the_heartbeat_keeps_the_zone_the_node_reads_its_schedules_in(
        fleet: Fleet, database: PostgresDatabase) -> None:
    north, node_id = fleet.client("north"), fleet.node_id("north")
    for zone, stored in (("Europe/Oslo", "Europe/Oslo"), ("../../etc/passwd", None),
                         ("", None)):
        fleet.clock.advance(1)
        message = beat(node_id, fleet.clock())
        message.timezone = zone
        assert north.heartbeat(message).status == 200
        assert query(database, "SELECT timezone FROM node_heartbeat WHERE node_id = %s",
                     node_id) == [(stored,)]


def test_a_nodes_old_samples_are_deleted_as_it_sends_heartbeats(
        database: PostgresDatabase, clock: FakeClock) -> None:
    node_id, other = (f"{PREFIX}samples-{secrets.token_hex(3)}" for _ in range(2))
    pool = open_pool(database.dsn, 2, 5)
    pool.open()
    ticks = [0.0]
    heartbeats = PostgresHeartbeats(pool, dt.timedelta(days=14), monotonic=lambda: ticks[0])

    def send(node: str, age: dt.timedelta, window: int = 60) -> None:
        moment = clock() - age
        message = beat(node, moment)
        message.throughput.add(direction=pb.UPLINK, window_start_micros=micros(moment),
                               window_seconds=window, payload_bytes_confirmed=1000,
                               physical_bytes=1000, active_transfer_seconds=1.0)
        heartbeats.record(node, message, moment)

    def ages(node: str) -> list[int]:
        rows = query(database, "SELECT sampled_at FROM metric_sample WHERE node_id = %s"
                     " ORDER BY sampled_at", node)
        return [(clock() - at).days for (at,) in rows]

    try:
        for days in (40, 20, 15):
            send(node_id, dt.timedelta(days=days))
            send(other, dt.timedelta(days=days))
        assert ages(node_id) == [40, 20, 15]  # each was recent when it came; purged at most
        # once per ten minutes: the heartbeat just now purges the ones past fourteen days
        ticks[0] += 601
        send(node_id, dt.timedelta(0))
        assert ages(node_id) == [0]
        assert ages(other) == [40, 20, 15]  # another node's samples go with its heartbeats
        send(node_id, dt.timedelta(0), window=30)  # within ten minutes: no purge again
        assert len(ages(node_id)) == 2
    finally:
        pool.close()
        with database.connect() as conn:
            conn.execute("DELETE FROM metric_sample WHERE node_id = ANY(%s)", ([node_id, other],))
            conn.execute("DELETE FROM node_heartbeat WHERE node_id = ANY(%s)",
                         ([node_id, other],))
