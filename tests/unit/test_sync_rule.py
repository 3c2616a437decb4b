"""Sync rules as operators write them: reading a rule file, its canonical form, and the checks
that refuse a rule before it reaches any ship."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.domain.arbitration import PolicyName
from tidesync.domain.column_kinds import column_type
from tidesync.domain.rules.sync_rule import Direction, RuleError, SyncRule

CREW_RULE = """
id = "crew"
description = "Crew list, without passports"
direction = "BIDIRECTIONAL"
source = "fleet.crew"
target = "office.crew_members"
key = ["crew_id"]
filter = "status <> 'DRAFT'"
business_time = "updated_at"

[select]
groups = ["tankers"]
nodes = ["ship-a"]

[columns]
exclude = ["notes"]
sensitive = ["passport_no"]
rename = { name = "full_name" }

[conflicts]
policy = "LAST_WRITER_WINS"
time_column = "updated_at"

[[transforms]]
column = "name"
transform = "trim@1"
"""

CREW_COLUMNS = {name: column_type(declared) for name, declared in {
    "crew_id": "int", "name": "varchar(80)", "passport_no": "varchar(20)",
    "status": "enum('DRAFT','ACTIVE')", "notes": "text", "updated_at": "datetime(6)",
}.items()}


def crew() -> SyncRule:
    return SyncRule.from_document(tomllib.loads(CREW_RULE))


def test_a_rule_file_reads_into_every_field() -> None:
    rule = crew()
    assert rule.rule_id == "crew" and rule.direction is Direction.BIDIRECTIONAL
    assert rule.source == ("fleet", "crew") and rule.target == ("office", "crew_members")
    assert rule.selector.matches("ship-a") and rule.selector.matches("ship-z", groups=["tankers"])
    assert not rule.selector.matches("ship-z", groups=["ferries"])
    assert rule.conflict_policy is PolicyName.LAST_WRITER_WINS
    assert [spec.ref() for spec in rule.transforms] == ["trim@1"]
    assert rule.problems() == []
    assert rule.schema_problems(CREW_COLUMNS, ["crew_id"]) == []


def test_excluded_and_sensitive_columns_are_dropped_and_keys_kept() -> None:
    rule = crew()
    assert not rule.keeps("passport_no") and not rule.keeps("NOTES")
    assert rule.keeps("crew_id") and rule.keeps("status")
    assert rule.target_column("Name") == "full_name" and rule.target_column("status") == "status"
    included = dataclasses.replace(rule, include_columns=("status",))
    assert included.keeps("crew_id") and included.keeps("status") and not included.keeps("name")


def test_the_canonical_form_round_trips_and_changes_with_any_field() -> None:
    rule = crew().pinned().with_version(3)
    assert SyncRule.from_json(rule.canonical()) == rule
    assert b'"fingerprint"' in rule.canonical()  # transforms are pinned to their implementation
    changed = dataclasses.replace(rule, row_filter="status = 'ACTIVE'")
    assert changed.checksum() != rule.checksum()


@pytest.mark.parametrize(("edit", "problem"), [
    ({"id": "Crew List"}, "id:"),
    ({"select": {}}, "names no node"),
    ({"columns": {"include": ["passport_no"], "sensitive": ["passport_no"]}},
     "never leave the ship"),
    ({"columns": {"exclude": ["crew_id"]}}, "key: crew_id cannot be excluded"),
    ({"filter": "status <> "}, "filter:"),
    ({"conflicts": {"policy": "LAST_WRITER_WINS"}}, "takes a time_column"),
    ({"direction": "UPLINK"}, "one-way rule has no conflicts"),
    ({"transforms": [{"column": "name", "transform": "trim@9"}]}, "transforms:"),
])
def test_invalid_rules_are_refused_with_the_field_named(edit: dict[str, object],
                                                        problem: str) -> None:
    document = {**tomllib.loads(CREW_RULE), **edit}
    problems = SyncRule.from_document(document).problems()
    assert any(problem in text for text in problems), problems


@pytest.mark.parametrize(("document", "message"), [
    ({"direction": "UPLINK", "source": "a.b"}, "id: required"),
    ({"id": "x", "direction": "SIDEWAYS", "source": "a.b"}, "direction: 'SIDEWAYS' is not"),
    ({"id": "x", "direction": "UPLINK", "source": "ab"}, "is not database.table"),
    ({"id": "x", "direction": "UPLINK", "source": "a.b", "colums": {}}, "unknown field"),
    ({"id": "x", "direction": "UPLINK", "source": "a.b", "key": "id"}, "list of names"),
    ({"id": "x\x00", "direction": "UPLINK", "source": "a.b"}, "NUL"),
])
def test_malformed_documents_name_the_field(document: dict[str, object], message: str) -> None:
    with pytest.raises(RuleError, match=message):
        SyncRule.from_document(document)


def test_schema_problems_name_what_the_table_lacks() -> None:
    rule = crew()
    assert rule.schema_problems(None) == ["table fleet.crew does not exist"]
    without_passport = {k: v for k, v in CREW_COLUMNS.items() if k != "passport_no"}
    assert any("no column passport_no" in problem
               for problem in rule.schema_problems(without_passport, ["crew_id"]))
    text_time = {**CREW_COLUMNS, "updated_at": column_type("varchar(30)")}
    assert any("not a date or time column" in problem
               for problem in rule.schema_problems(text_time, ["crew_id"]))
    mistyped = dataclasses.replace(rule, row_filter="status > 5")
    assert any(problem.startswith("filter:")
               for problem in mistyped.schema_problems(CREW_COLUMNS, ["crew_id"]))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "direction", "source", "target", "key", "filter",
                                        "select", "columns", "transforms", "conflicts",
                                        "priority", "quota_bytes_per_day"]),
                       st.one_of(st.none(), st.text(max_size=20), st.integers(),
                                 st.lists(st.text(max_size=10), max_size=3),
                                 st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                 max_size=3))))
def test_any_document_is_read_or_refused_with_a_rule_error(document: dict[str, object]) -> None:
    try:
        rule = SyncRule.from_document(document)
    except RuleError:
        return
    rule.problems()  # never raises either
