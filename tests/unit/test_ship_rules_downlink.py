"""DOWNLINK-only rules checked against the ship's own table: it must be prepared for shore
changes by key (ledger and key-position table), keyed by the rule's key, and a DOWNLINK rule's
transforms, which would never run, fail it."""

from __future__ import annotations

from typing import Any

from tests.unit.test_ship_rules import Tables, rule, snapshot
from tidesync.domain.column_kinds import column_type
from tidesync.ship.rules import TableColumns, check_snapshot


def prepared(tables: Tables) -> Tables:
    for support in ("_sync_applied", "_sync_key_position"):
        tables.tables[("ops", support)] = TableColumns({"x": column_type("int")}, ("x",))
    return tables


def down(**fields: Any) -> Any:
    return rule(1, "crew-down", direction="DOWNLINK", target="hq.crew", **fields)


def test_a_downlink_rule_on_a_prepared_table_is_valid() -> None:
    checked = check_snapshot(snapshot(down()), prepared(Tables()))

    assert checked.valid and checked.rule is not None


def test_a_table_not_prepared_for_changes_by_key_fails_naming_the_command() -> None:
    checked = check_snapshot(snapshot(down()), Tables())

    assert not checked.valid
    assert any("tidesync target enable ops.crew --direction DOWNLINK" in problem
               for problem in checked.snapshot.problems)


def test_a_downlink_rule_is_checked_against_the_ships_columns() -> None:
    checked = check_snapshot(snapshot(down(columns={"exclude": ["missing"]})),
                             prepared(Tables()))

    assert not checked.valid
    assert any("missing" in problem for problem in checked.snapshot.problems)


def test_a_key_other_than_the_ships_primary_key_fails() -> None:
    checked = check_snapshot(snapshot(down(key=["name"])), prepared(Tables()))

    assert not checked.valid
    assert any(problem.startswith("key:") for problem in checked.snapshot.problems)


def test_transforms_on_a_downlink_rule_fail_even_without_a_schema() -> None:
    masked = down(transforms=[{"column": "name", "transform": "truncate@1",
                               "args": {"length": 3}}])

    assert not check_snapshot(snapshot(masked), None).valid
    assert check_snapshot(snapshot(down()), None).valid


def test_uplink_rules_need_no_key_position_table() -> None:
    assert check_snapshot(snapshot(rule(1)), Tables()).valid
