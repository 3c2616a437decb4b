"""Rule distribution without services: node groups and tags, which rules a node is offered and
the version of that set, and the limits on what heartbeats report about rules.

The nodes application runs on the library's in-memory store; the integration tests
(tests/integration/test_rules_distribution.py) run everything on PostgreSQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock, rounded_now
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import Actor, NodesApplication, NodeService
from tidesync.domain.node import (
    MAX_PROFILE_NAMES,
    InvalidNodeProfile,
    NodeError,
    NodeProfile,
    NodeRevoked,
)
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.ingress.nodes import NodeDirectory
from tidesync.ingress.rule_reports import (
    MAX_PROBLEM_CHARS,
    MAX_RULE_PROBLEMS,
    MAX_RULE_REPORTS,
    BadRuleReport,
    TooManyRuleReports,
    checked_reports,
)
from tidesync.ingress.rules import NO_RULES_VERSION, OfferedRule, RuleOffer, config_version
from tidesync.wire import sync_pb2 as pb

NOW = rounded_now()
ACTOR = Actor("alice", "fleet layout", "trace-1")
KEY = bytes(range(32))


@pytest.fixture
def app() -> Iterator[NodesApplication]:
    application = NodesApplication(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    yield application
    application.close()


@pytest.fixture
def service(app: NodesApplication) -> NodeService:
    return NodeService(app, SecretBox(KEY))


def rule(rule_id: str, version: int = 1, *, nodes: tuple[str, ...] = (),
         groups: tuple[str, ...] = (), tags: tuple[str, ...] = (),
         table: str = "crew") -> SyncRule:
    selector = Selector(frozenset(nodes), frozenset(groups), frozenset(tags))
    return SyncRule(rule_id, "fleet_erp", table, Direction.UPLINK, selector, version=version)


class ListedRules:
    """`ReleasedRules` over a list the test edits; counts how often it is read."""

    def __init__(self, offered: list[tuple[SyncRule, ReleaseStatus]]) -> None:
        self.listed, self.reads = offered, 0

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        self.reads += 1
        return list(self.listed)

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return None

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise AssertionError("not used here")


# ----------------------------------------------------------------------------- node profile


def test_groups_and_tags_are_recorded_with_who_and_why(
    app: NodesApplication, service: NodeService,
) -> None:
    service.register("ship-1", ACTOR, NOW)
    wanted = NodeProfile.of(["north-sea", "tankers"], ["ice-class"])
    assert service.change_profile("ship-1", wanted, ACTOR, NOW) == wanted
    node = app.node("ship-1")  # read back from the stream
    assert node.profile == NodeProfile(frozenset({"north-sea", "tankers"}),
                                       frozenset({"ice-class"}))
    events: list[Any] = list(app.repository.event_store.get(node.id))
    (changed,) = [e for e in events if type(e).__name__ == "ProfileChanged"]
    assert (changed.groups, changed.tags) == (["north-sea", "tankers"], ["ice-class"])
    assert (changed.actor, changed.reason) == ("alice", "fleet layout")
    assert service.show("ship-1", NOW).profile == wanted
    service.change_profile("ship-1", NodeProfile(), ACTOR, NOW)
    assert app.node("ship-1").profile == NodeProfile()


@pytest.mark.parametrize("groups, tags", [
    (["North-Sea"], []), (["a\x00b"], []), ([], ["x" * 64]), ([], [""]), (["-lead"], []),
    ([f"g{n}" for n in range(MAX_PROFILE_NAMES + 1)], []),
])
def test_group_and_tag_names_follow_the_node_id_rules(
    groups: list[str], tags: list[str],
) -> None:
    with pytest.raises(InvalidNodeProfile):
        NodeProfile.of(groups, tags)


def test_a_revoked_node_keeps_its_profile_and_a_change_needs_a_reason(
    app: NodesApplication, service: NodeService,
) -> None:
    service.register("ship-1", ACTOR, NOW)
    with pytest.raises(NodeError, match="needs a reason"):
        service.change_profile("ship-1", NodeProfile.of(["a"]), Actor("alice", " "), NOW)
    service.change_profile("ship-1", NodeProfile.of(["a"]), ACTOR, NOW)
    service.register("ship-2", ACTOR, NOW)
    service.revoke("ship-1", Actor("alice", "sold"), NOW)
    with pytest.raises(NodeRevoked):
        service.change_profile("ship-1", NodeProfile(), ACTOR, NOW)
    assert app.active_profiles() == {"ship-2": NodeProfile()}


def test_the_credential_directory_carries_the_profile(
    app: NodesApplication, service: NodeService,
) -> None:
    service.register("ship-1", ACTOR, NOW)
    service.change_profile("ship-1", NodeProfile.of(tags=["tanker"]), ACTOR, NOW)
    directory = NodeDirectory(lambda: app, lambda: SecretBox(KEY))
    assert directory.lookup("ship-1").profile.tags == frozenset({"tanker"})


# ----------------------------------------------------------------------------- offer


def test_a_node_is_offered_the_rules_that_select_it_by_id_group_or_tag() -> None:
    released = ListedRules([
        (rule("by-group", groups=("north",)), ReleaseStatus.DISTRIBUTING),
        (rule("by-tag", tags=("tanker",)), ReleaseStatus.ACTIVE),
        (rule("by-id", nodes=("ship-1",)), ReleaseStatus.ROLLBACK_TARGET),
        (rule("everyone", nodes=("*",)), ReleaseStatus.ACTIVE),
        (rule("elsewhere", groups=("south",), tags=("ferry",)), ReleaseStatus.ACTIVE),
    ])
    offer = RuleOffer(released)
    config = offer.for_node("ship-1", NodeProfile.of(["north"], ["tanker"]))
    assert [o.rule.rule_id for o in config.rules] == ["by-group", "by-id", "by-tag", "everyone"]
    assert config.version == config_version(config.rules) != NO_RULES_VERSION
    other = offer.for_node("ship-2", NodeProfile())
    assert [o.rule.rule_id for o in other.rules] == ["everyone"]
    assert other.version != config.version


def test_the_offer_is_read_again_only_after_its_ttl() -> None:
    clock = ManualClock()
    released = ListedRules([])
    offer = RuleOffer(released, ttl=5.0, monotonic=clock.monotonic)
    assert offer.for_node("ship-1", NodeProfile()).version == NO_RULES_VERSION
    released.listed = [(rule("everyone", nodes=("*",)), ReleaseStatus.DISTRIBUTING)]
    clock.advance(4.9)
    assert offer.for_node("ship-1", NodeProfile()).version == NO_RULES_VERSION
    clock.advance(0.1)
    assert offer.for_node("ship-1", NodeProfile()).version != NO_RULES_VERSION
    assert released.reads == 2


def test_a_snapshot_carries_the_canonical_content_and_its_checksum() -> None:
    offered = OfferedRule.of(rule("crew", 3, nodes=("*",)), ReleaseStatus.ROLLBACK_TARGET)
    snapshot = offered.snapshot()
    assert (snapshot.rule_id, snapshot.version) == ("crew", 3)
    assert snapshot.status == pb.ROLLBACK_TARGET
    assert snapshot.content == rule("crew", 3, nodes=("*",)).canonical()
    assert snapshot.checksum == hashlib.sha256(snapshot.content).digest()


_RULES = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 3),
                            st.sampled_from(["crew", "cargo"])),
                  unique_by=lambda item: item[0], max_size=4)


@settings(max_examples=60, deadline=None)
@given(_RULES, st.randoms(use_true_random=False), st.sampled_from(list(ReleaseStatus)))
def test_the_config_version_names_the_set_of_versions_not_its_order_or_status(
    listed: list[tuple[str, int, str]], shuffler: object, status: ReleaseStatus,
) -> None:
    offers = [OfferedRule.of(rule(i, v, nodes=("*",), table=t), ReleaseStatus.ACTIVE)
              for i, v, t in listed]
    shuffled = [OfferedRule.of(o.rule, status) for o in offers]
    shuffler.shuffle(shuffled)  # type: ignore[attr-defined]
    assert config_version(shuffled) == config_version(offers)
    assert (config_version(offers) == NO_RULES_VERSION) == (not offers)
    for index, (rule_id, version, table) in enumerate(listed):
        changed = list(offers)
        changed[index] = OfferedRule.of(rule(rule_id, version + 1, nodes=("*",), table=table),
                                        ReleaseStatus.ACTIVE)
        assert config_version(changed) != config_version(offers)
        other_table = "cargo" if table == "crew" else "crew"
        changed[index] = OfferedRule.of(rule(rule_id, version, nodes=("*",), table=other_table),
                                        ReleaseStatus.ACTIVE)
        assert config_version(changed) != config_version(offers)


# ----------------------------------------------------------------------------- reports


def report(rule_id: str = "crew", *problems: str) -> pb.RuleActivation:
    return pb.RuleActivation(rule_id=rule_id, active_version=1, candidate_version=2,
                             validation=pb.RULE_FAILED if problems else pb.RULE_VALID,
                             problems=list(problems), activated_at_micros=1)


def test_reports_within_the_limits_are_kept_as_sent() -> None:
    problems = ["x" * MAX_PROBLEM_CHARS] * MAX_RULE_PROBLEMS
    rows = checked_reports([report(f"r{n}") for n in range(MAX_RULE_REPORTS - 1)]
                           + [report("crew", *problems)])
    assert len(rows) == MAX_RULE_REPORTS
    assert (rows[-1].validation, rows[-1].problems) == ("RULE_FAILED", tuple(problems))
    assert rows[0].validation == "RULE_VALID" and rows[0].activated_at is not None


@pytest.mark.parametrize("reports, error, reason", [
    ([report(f"r{n}") for n in range(MAX_RULE_REPORTS + 1)], TooManyRuleReports,
     "TOO_MANY_RULE_REPORTS"),
    ([report("crew", *["p"] * (MAX_RULE_PROBLEMS + 1))], TooManyRuleReports,
     "TOO_MANY_RULE_REPORTS"),
    ([report("crew", "x" * (MAX_PROBLEM_CHARS + 1))], TooManyRuleReports,
     "TOO_MANY_RULE_REPORTS"),
    ([report("crew", "column a\x00b")], BadRuleReport, "BAD_RULE_REPORT"),
    ([report("Crew Rule")], BadRuleReport, "BAD_RULE_REPORT"),
    ([report("crew"), report("crew")], BadRuleReport, "BAD_RULE_REPORT"),
    ([pb.RuleActivation(rule_id="crew", active_version=-1)], BadRuleReport, "BAD_RULE_REPORT"),
    ([pb.RuleActivation(rule_id="crew", validation=9)], BadRuleReport,  # type: ignore[arg-type]
     "BAD_RULE_REPORT"),
])
def test_reports_beyond_the_limits_are_refused_with_a_reason(
    reports: list[pb.RuleActivation], error: type[BadRuleReport], reason: str,
) -> None:
    with pytest.raises(error) as raised:
        checked_reports(reports)
    assert raised.value.reason == reason
