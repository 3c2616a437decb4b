"""Request limits of the console, checked during validation against the real schema: depth,
aliases counted through every fragment spread, estimated cost, literal page sizes, and
introspection off by default. Fragments are measured once, so nested spreads stay cheap."""

from __future__ import annotations

import time

import pytest
from graphql import GraphQLError, parse, specified_rules, validate
from strawberry.extensions.max_aliases import create_validator

from tidesync.graphql.limits import QueryLimits, limits_rule
from tidesync.graphql.schema import build_schema, schema_sdl
from tidesync.graphql.settings import ConsoleSettings

SCHEMA = build_schema(ConsoleSettings())._schema


def check(document: str, **limits: int) -> list[GraphQLError]:
    rules = [*specified_rules, limits_rule(QueryLimits(**limits))]
    return validate(SCHEMA, parse(document), rules)


def reasons(errors: list[GraphQLError]) -> list[str]:
    return [str((error.extensions or {}).get("reason")) for error in errors]


DEEP = "{ conflicts { items { detail { evidence { columns { shore { value } } } } } } }"


def test_depth():
    assert check(DEEP, max_depth=7) == []
    assert reasons(check(DEEP, max_depth=6)) == ["QUERY_TOO_DEEP"]
    via_fragment = ("fragment E on Evidence { columns { shore { value } } }\n"
                    "{ conflicts { items { detail { evidence { ...E } } } } }")
    assert reasons(check(via_fragment, max_depth=6)) == ["QUERY_TOO_DEEP"]


ALIASES_IN_FRAGMENTS = """
fragment Names on Query { a: me { name } b: me { name } }
fragment Twice on Query { ...Names ...Names }
{ ...Twice ...Twice }
"""


def test_aliases_are_counted_through_every_fragment_spread():
    # Two aliases, spread twice inside a fragment that is itself spread twice: 8.
    assert check(ALIASES_IN_FRAGMENTS, max_aliases=8) == []
    assert reasons(check(ALIASES_IN_FRAGMENTS, max_aliases=7)) == ["TOO_MANY_ALIASES"]
    inline = "{ ... on Query { a: me { name } } b: me { n: name } }"
    assert reasons(check(inline, max_aliases=2)) == ["TOO_MANY_ALIASES"]


def test_strawberrys_alias_limiter_agrees_on_counts_but_expands_every_spread():
    """strawberry 0.341's MaxAliasesLimiter also counts through fragments (8 here), but it
    walks every spread again, so its work doubles with each level of nested spreads (2**40
    steps for the document of the next test); ours measures each fragment once."""
    assert validate(SCHEMA, parse(ALIASES_IN_FRAGMENTS), [create_validator(8)]) == []
    builtin = validate(SCHEMA, parse(ALIASES_IN_FRAGMENTS), [create_validator(7)])
    assert [error.message for error in builtin] == ["8 aliases found. Allowed: 7"]


def test_nested_fragment_spreads_are_measured_in_linear_time():
    levels = 40
    fragments = [f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}"
                 for i in range(levels)]
    fragments.append(f"fragment F{levels} on Query {{ a: me {{ name }} }}")
    document = "\n".join(fragments) + "\n{ ...F0 }"
    started = time.perf_counter()
    errors = check(document, max_aliases=15)
    assert time.perf_counter() - started < 2.0
    assert "TOO_MANY_ALIASES" in reasons(errors)  # 2**40 aliases once expanded


def test_cost_grows_with_page_size_and_nested_lists():
    small = "{ conflicts(first: 5) { items { conflictId } } }"
    assert check(small, max_cost=20) == []
    assert reasons(check(small, max_cost=5)) == ["QUERY_TOO_COSTLY"]
    nested = ("{ conflicts(first: 200) { items { detail { evidence { columns {"
              " shore { value } } } } } } }")
    assert reasons(check(nested)) == ["QUERY_TOO_COSTLY"]
    by_variable = ("query($n: Int) { conflicts(first: $n) { items { detail {"
                   " evidence { columns { shore { value } } } } } } }")
    assert reasons(check(by_variable)) == ["QUERY_TOO_COSTLY"]  # assumed the largest page


def test_literal_page_sizes_outside_the_cap_are_refused():
    assert reasons(check("{ nodes(first: 201) { items { nodeId } } }")) == ["PAGE_TOO_LARGE"]
    assert reasons(check("{ nodes(first: 0) { items { nodeId } } }")) == ["PAGE_TOO_LARGE"]
    assert check("{ nodes(first: 200) { items { nodeId } } }") == []


@pytest.mark.parametrize("document", [
    "{ __schema { types { name } } }", '{ __type(name: "Node") { fields { name } } }',
])
def test_introspection_is_off_unless_configured(document):
    closed = build_schema(ConsoleSettings()).execute_sync(document)
    assert closed.errors and closed.data is None
    opened = build_schema(ConsoleSettings(introspection=True)).execute_sync(document)
    assert not opened.errors


def test_the_schema_prints_as_sdl():
    sdl = schema_sdl()
    for part in ("type Query", "type Mutation", "decideConflict(input: DecideConflictInput!)",
                 "union DecideConflictResult = ConflictDecided | ConflictError", "scalar Long"):
        assert part in sdl
