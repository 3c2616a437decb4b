"""The arbiter decides a case by the conflict policy of the rule version the case names; a
table's implicit rule keeps `[conflicts].policies`."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from tests.unit.test_rule_scope import Releases
from tidesync.domain.arbitration import Policy, PolicyName
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.shore.arbiter import Arbiter, ArbiterSettings

RULE = SyncRule(rule_id="stores-both", version=4, source_database="fleet",
                source_table="stores", direction=Direction.BIDIRECTIONAL,
                selector=Selector(nodes=frozenset({"*"})),
                conflict_policy=PolicyName.LAST_WRITER_WINS, conflict_time_column="changed",
                rename={"changed": "changed_at"})


def arbiter(rules: Releases | None) -> Arbiter:
    settings = ArbiterSettings(
        shore_node_id="shore", policy_for=lambda db, table: Policy(PolicyName.SHORE_WINS),
        max_clock_skew=dt.timedelta(seconds=90), lower_node_id_wins=False)
    return Arbiter(None, None, None, None, None, None, None, list,  # type: ignore[arg-type]
                   settings, lambda: dt.datetime.now(dt.UTC), rules=rules)


def case(rule_id: str, version: int | None) -> SimpleNamespace:
    return SimpleNamespace(rule_id=rule_id, rule_version=version, database="fleet",
                           table="stores")


def test_a_released_rule_decides_with_its_policy_and_the_shore_name_of_its_time_column():
    policy = arbiter(Releases(RULE)).policy_of(case("stores-both", 4))  # type: ignore[arg-type]
    assert policy == Policy(PolicyName.LAST_WRITER_WINS, "changed_at",
                            dt.timedelta(seconds=90), False)


def test_an_implicit_rule_keeps_the_configured_table_policy():
    policy = arbiter(Releases(RULE)).policy_of(case("table:fleet.stores", None))  # type: ignore[arg-type]
    assert policy.name is PolicyName.SHORE_WINS


def test_a_rule_the_shore_cannot_find_goes_to_a_person():
    for rules, version in ((Releases(RULE), 9), (None, 4), (Releases(RULE), None)):
        policy = arbiter(rules).policy_of(case("stores-both", version))  # type: ignore[arg-type]
        assert policy.name is PolicyName.MANUAL
