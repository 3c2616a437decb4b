"""Rule authorization of received events on the shore (§10.2): which released rule version an
event may be applied under, the shape it is applied in, and when `[apply.node_tables]` still
decides (no rule released at all)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from tests.target_events import insert, revision, update
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.rules.authorization import RuleRefusal, refusal, shaped
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.shore.rule_scope import Admitted, Refused, RuleScope
from tidesync.shore.settings import ApplyConfig

SHIP = "ship-0042"


def rule(**changes: object) -> SyncRule:
    base = SyncRule(rule_id="items-up", source_database="fleet", source_table="items",
                    direction=Direction.UPLINK, selector=Selector(nodes=frozenset({SHIP})),
                    version=3, target_database="hq", target_table="ship_items",
                    exclude_columns=("cost",), sensitive_columns=("owner",),
                    rename={"qty": "quantity"})
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def named(event: ChangeEvent, rule_id: str | None = "items-up",
          version: int | None = 3) -> ChangeEvent:
    return dataclasses.replace(event, rule_id=rule_id, rule_version=version)


def item(**extra: object) -> ChangeEvent:
    return named(insert("fleet", "items", {"id": 7, "name": "anchor", "qty": 2, **extra}))


class Releases:
    """The shore's released rule versions, in memory, counting the lookups."""

    def __init__(self, *rules: SyncRule) -> None:
        self.rules = {(r.rule_id, r.version): r for r in rules}
        self.lookups = 0
        self.offers = 0

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        self.offers += 1
        return [(r, ReleaseStatus.ACTIVE) for r in self.rules.values()]

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        self.lookups += 1
        return self.rules.get((rule_id, version))

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise AssertionError("not used by the apply scope")


class Profiles:
    def __init__(self, **groups: frozenset[str]) -> None:
        self.groups = groups

    def profile(self, node_id: str) -> tuple[frozenset[str], frozenset[str]]:
        return self.groups.get(node_id, frozenset()), frozenset()


def decide(scope: RuleScope, event: ChangeEvent) -> Admitted | Refused:
    (decision,) = scope.admit([event])
    return decision


@pytest.mark.parametrize(("event", "the_rule", "reason"), [
    (item(), None, RuleRefusal.RULE_NOT_RELEASED),
    (named(item(), version=4), rule(), RuleRefusal.RULE_NOT_RELEASED),
    (named(item(), rule_id=None), rule(), RuleRefusal.RULE_NOT_RELEASED),
    (dataclasses.replace(item(), origin_node_id="ship-other"), rule(),
     RuleRefusal.RULE_NOT_FOR_NODE),
    (item(), rule(direction=Direction.DOWNLINK), RuleRefusal.RULE_DIRECTION),
    (named(insert("fleet", "crew", {"id": 7, "name": "x"})), rule(),
     RuleRefusal.NOT_AUTHORIZED_FOR_TABLE),
    (item(cost=Decimal("1.00")), rule(), RuleRefusal.COLUMN_OUTSIDE_RULE),
    (item(OWNER="x"), rule(), RuleRefusal.COLUMN_OUTSIDE_RULE),
    (item(), rule(include_columns=("id", "name")), RuleRefusal.COLUMN_OUTSIDE_RULE),
    (item(quantity=3), rule(), RuleRefusal.COLUMN_OUTSIDE_RULE),  # two columns, one name
    (item(), rule(), None),
    (item(_sync_revision="r"), rule(), None),  # the platform's own columns pass
])
def test_an_event_is_authorized_only_by_the_rule_version_it_names(event, the_rule, reason):
    assert refusal(the_rule, event) == reason


def test_a_selector_by_group_selects_the_nodes_of_that_group():
    by_group = rule(selector=Selector(groups=frozenset({"tankers"})))
    assert refusal(by_group, item(), groups={"tankers"}) is None
    assert refusal(by_group, item(), groups={"ferries"}) is RuleRefusal.RULE_NOT_FOR_NODE


def test_the_shore_applies_to_the_rule_target_under_its_column_names():
    event = named(update("fleet", "items", {"id": 7, "qty": 1}, {"qty": 2}, revision()))
    out = shaped(rule(rename={"qty": "quantity", "id": "item_id"}), event)
    assert (out.database, out.table) == ("hq", "ship_items")
    assert out.primary_key == {"item_id": 7}
    assert dict(out.after or {}) == {"item_id": 7, "quantity": 2}
    assert dict(out.before or {}) == {"item_id": 7, "quantity": 1}
    assert (out.rule_id, out.rule_version, out.event_id) == ("items-up", 3, event.event_id)


def test_without_any_released_rule_the_node_allow_list_decides():
    scope = RuleScope(Releases(), None, ApplyConfig({SHIP: "fleet.items"}))
    plain = insert("fleet", "items", {"id": 1, "name": "a"})
    other = insert("fleet", "crew", {"id": 1, "name": "a"})
    claimed = dataclasses.replace(plain, rule_id="table:fleet.items", rule_version=9)

    allowed, refused, implicit = scope.admit([plain, other, claimed])

    assert isinstance(allowed, Admitted) and allowed.rule_id == "table:fleet.items"
    assert not allowed.one_way and allowed.event == plain
    assert isinstance(refused, Refused)
    assert (refused.reason_code, refused.rule_id) == ("NOT_AUTHORIZED_FOR_TABLE",
                                                      "table:fleet.crew")
    # The ship's word on an implicit rule is not kept: the shore derives it.
    assert isinstance(implicit, Admitted) and implicit.event.rule_version is None


def test_once_a_rule_is_released_every_event_needs_one_and_the_allow_list_is_not_read():
    releases = Releases(rule())
    scope = RuleScope(releases, None, ApplyConfig({SHIP: "fleet.*"}))
    unnamed = insert("fleet", "items", {"id": 1, "name": "a"})

    refused, admitted = scope.admit([unnamed, item()])

    assert isinstance(refused, Refused) and refused.reason_code == "RULE_NOT_RELEASED"
    assert isinstance(admitted, Admitted)
    assert (admitted.rule_id, admitted.one_way) == ("items-up", True)
    assert (admitted.event.database, admitted.event.table) == ("hq", "ship_items")
    # The allow-list does not widen a rule: a table no rule covers stays refused.
    crew = named(insert("fleet", "crew", {"id": 1}))
    assert decide(scope, crew) == Refused(crew, "NOT_AUTHORIZED_FOR_TABLE", "table:fleet.crew")


def test_an_event_naming_a_rule_is_judged_by_rules_even_before_any_offer():
    scope = RuleScope(Releases(), None, ApplyConfig())
    decision = decide(scope, item())
    assert isinstance(decision, Refused) and decision.reason_code == "RULE_NOT_RELEASED"
    without_releases = decide(RuleScope(None, None, ApplyConfig()), item())
    assert isinstance(without_releases, Refused)
    assert without_releases.reason_code == "RULE_NOT_RELEASED"


def test_released_versions_are_looked_up_once_and_unknown_ones_again_after_a_while():
    releases = Releases(rule(selector=Selector(groups=frozenset({"tankers"}))))
    seconds = [0.0]
    scope = RuleScope(releases, Profiles(**{SHIP: frozenset({"tankers"})}), ApplyConfig(),
                      monotonic=lambda: seconds[0])
    unknown = named(item(), version=8)

    for _ in range(5):
        assert isinstance(decide(scope, item()), Admitted)
        assert isinstance(decide(scope, unknown), Refused)
    assert releases.lookups == 2 and releases.offers == 1

    seconds[0] += 60
    releases.rules[("items-up", 8)] = rule(version=8)
    assert isinstance(decide(scope, unknown), Admitted)


def test_a_node_leaving_the_selected_group_is_refused_once_its_profile_is_read_again():
    profiles = Profiles(**{SHIP: frozenset({"tankers"})})
    seconds = [0.0]
    scope = RuleScope(Releases(rule(selector=Selector(groups=frozenset({"tankers"})))),
                      profiles, ApplyConfig(), monotonic=lambda: seconds[0])
    assert isinstance(decide(scope, item()), Admitted)
    profiles.groups[SHIP] = frozenset()
    seconds[0] += 60
    decision = decide(scope, item())
    assert isinstance(decision, Refused) and decision.reason_code == "RULE_NOT_FOR_NODE"
