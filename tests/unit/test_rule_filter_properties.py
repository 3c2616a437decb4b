"""Properties of row filters: reading never fails but with FilterError, the canonical text
reads back into the same tree, judging a row never raises, and LIKE agrees with a plain
dynamic-programming matcher."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.filter_strategies import rows, table_filter
from tidesync.domain.rules.filter import (
    And,
    Between,
    BusinessTime,
    Column,
    Compare,
    Condition,
    FilterError,
    InList,
    IsNull,
    Like,
    LikePattern,
    Literal,
    Not,
    Or,
    RowFilter,
    StartsWith,
    parse_filter,
    render,
)
from tidesync.domain.values import BitString, JsonText

SETTINGS = settings(max_examples=300, deadline=None, database=None)
ROW_SETTINGS = settings(max_examples=100, deadline=None, database=None)

# --- any text -------------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from([
    "a", "`b`", "$business_time", "$x", "=", "<>", "!=", "<", ">=", "(", ")", ",", "-", "1",
    "1.5", "'s'", "''", "'", "`", "AND", "or", "NOT", "IN", "BETWEEN", "IS", "NULL", "LIKE",
    "STARTS", "WITH", "TRUE", "false", "TIMESTAMP", "DATE", "'2031-01-01'",
    "'2031-01-01 00:00:00'", " ", "\n", "é", "\x00", "\ud800", "9" * 70,
])


@SETTINGS
@given(st.one_of(st.text(max_size=80), st.lists(_FRAGMENTS, max_size=30).map(" ".join),
                 st.lists(_FRAGMENTS, max_size=30).map("".join)))
def test_reading_any_text_gives_a_filter_or_a_filter_error(text: str):
    try:
        row_filter = parse_filter(text)
    except FilterError as error:
        assert 0 <= error.position <= len(text)
    else:
        assert parse_filter(render(row_filter.root)).root == row_filter.root


# --- canonical text -------------------------------------------------------------------------

_names = st.one_of(
    st.sampled_from(["a", "qty", "Status", "_x1", "and", "NULL", "date", "odd name", "back`q",
                     "$business_time", "ünï", "1st"]),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1,
            max_size=10),
)
_operands = st.one_of(st.builds(Column, _names), st.just(BusinessTime()))
_text_values = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                       max_size=20)
_literal_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), _text_values,
    st.decimals(allow_nan=False, allow_infinity=False, places=3,
                min_value=-(10**20), max_value=10**20),
    st.datetimes(min_value=dt.datetime(1000, 1, 1), timezones=st.just(dt.UTC)),
    st.dates(min_value=dt.date(1000, 1, 1)),
)
_literals = st.builds(Literal, _literal_values)
_predicates = st.one_of(
    st.builds(Compare, _operands, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), _literals),
    st.builds(InList, _operands, st.lists(_literals, min_size=1, max_size=4).map(tuple),
              st.booleans()),
    st.builds(Between, _operands, _literals, _literals, st.booleans()),
    st.builds(IsNull, _operands, st.booleans()),
    st.builds(Like, _operands, _text_values.map(LikePattern.parse), st.booleans()),
    st.builds(StartsWith, _operands, _text_values, st.booleans()),
)
trees: st.SearchStrategy[Condition] = st.recursive(_predicates, lambda children: st.one_of(
    st.lists(children, min_size=2, max_size=3).map(lambda items: And(tuple(items))),
    st.lists(children, min_size=2, max_size=3).map(lambda items: Or(tuple(items))),
    children.map(Not)), max_leaves=12)


@SETTINGS
@given(trees)
def test_the_canonical_text_reads_back_into_the_same_tree(tree: Condition):
    text = render(tree)
    row_filter = parse_filter(text)
    assert row_filter.root == tree
    assert render(row_filter.root) == text


# --- judging rows never raises --------------------------------------------------------------

_edge_values = st.one_of(
    st.none(), st.booleans(), st.sampled_from([10**4000, -(10**4000), 2**64, -(2**63) - 1]),
    st.integers(), st.floats(), st.sampled_from([-0.0, float("nan"), float("inf")]),
    st.decimals(), st.sampled_from([Decimal("1E+999999"), Decimal("-1E-999999"),
                                    Decimal("sNaN"), Decimal("-NaN"), Decimal("1." + "3" * 200)]),
    st.text(), st.sampled_from(["", "\U0001f600" * 3, "a ", "\x00"]), st.binary(max_size=8),
    st.datetimes(), st.datetimes(timezones=st.timezones()), st.dates(), st.times(),
    st.builds(JsonText, st.text(max_size=5)),
    st.integers(1, 64).flatmap(lambda n: st.builds(BitString, st.just(n),
                                                   st.integers(0, 2**n - 1))),
)
_column_names = ["i", "d", "f", "t", "b", "ts", "dd", "I", "T", "missing"]


@ROW_SETTINGS
@given(rows().flatmap(table_filter),
       st.lists(st.fixed_dictionaries({}, optional=dict.fromkeys(_column_names, _edge_values)),
                min_size=1, max_size=4),
       st.none() | _edge_values)
def test_judging_any_row_of_any_values_never_raises(tree: Condition,
                                                    sample: list[dict[str, object]],
                                                    business_time: object):
    row_filter = RowFilter(render(tree), tree)
    for row in sample:
        assert row_filter.matches(row, business_time) in (True, False)  # type: ignore[arg-type]


@ROW_SETTINGS
@given(rows().flatmap(lambda sample: st.tuples(st.just(sample), table_filter(sample))))
def test_a_row_and_its_negation_never_both_pass(case: tuple[list[dict[str, object]], Condition]):
    sample, tree = case
    row_filter, negation = RowFilter("", tree), RowFilter("", Not(tree))
    for row in sample:
        business_time = row["bt"]
        assert not (row_filter.matches(row, business_time)  # type: ignore[arg-type]
                    and negation.matches(row, business_time))  # type: ignore[arg-type]


# --- LIKE -----------------------------------------------------------------------------------


def _reference_like(pattern: str, text: str) -> bool:
    """The textbook O(n·m) table: matched[i][j] = pattern[:i] matches text[:j]."""
    matched = [[False] * (len(text) + 1) for _ in range(len(pattern) + 1)]
    matched[0][0] = True
    for i, symbol in enumerate(pattern, 1):
        matched[i][0] = matched[i - 1][0] and symbol == "%"
        for j, char in enumerate(text, 1):
            if symbol == "%":
                matched[i][j] = matched[i - 1][j] or matched[i][j - 1]
            else:
                matched[i][j] = matched[i - 1][j - 1] and symbol in ("_", char)
    return matched[len(pattern)][len(text)]


@settings(max_examples=1000, deadline=None, database=None)
@given(st.text("ab%_", max_size=10), st.text("abc", max_size=14))
def test_like_agrees_with_the_textbook_matcher(pattern: str, text: str):
    assert LikePattern.parse(pattern).matches(text) is _reference_like(pattern, text)
