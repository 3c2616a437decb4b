"""Hypothesis strategies for row filters: syntax trees, rows of a fixed test table, and filters
whose literals come from those rows (so that many comparisons are near the edge of TRUE).

The table is the one the agreement tests create on SQLite and MariaDB:
`i` BIGINT, `d` DECIMAL(12,2), `f` DOUBLE, `t` VARCHAR(40), `b` BOOLEAN, `ts` DATETIME(6),
`dd` DATE and `bt` DATETIME(6), the business time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.rules.filter import (
    And,
    Between,
    BusinessTime,
    Column,
    Compare,
    Condition,
    InList,
    IsNull,
    Like,
    LikePattern,
    Literal,
    Not,
    Operand,
    Or,
    StartsWith,
)
from tidesync.domain.values import Value

UTC = dt.UTC
KINDS: dict[str, ColumnKind] = {
    "i": ColumnKind.INTEGER, "d": ColumnKind.DECIMAL, "f": ColumnKind.FLOAT,
    "t": ColumnKind.TEXT, "b": ColumnKind.BOOL, "ts": ColumnKind.DATETIME,
    "dd": ColumnKind.DATE, "bt": ColumnKind.DATETIME,
}
ORDERED = ("i", "d", "f", "t", "ts", "dd", "bt")

# --- values of the table's columns ----------------------------------------------------------

# Each column mixes a small pool (so rows and literals often meet), edge values and any value.
texts = st.one_of(
    st.text("aAbB ß😀_%", max_size=4),
    st.sampled_from(["", "a", "A", "a ", " a", "PO-1", "po-1", "PO_1", "PO%1", "ß", "SS", "é",
                     "e\u0301", "\U0001f600", "a\U0001f600b", "[x]", "*?", "!a", "a\\b", "'"]),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12),
)
integers = st.one_of(st.integers(-3, 3),
                     st.sampled_from([2**63 - 1, -(2**63), 2**31, 9007199254740993]),
                     st.integers(-(2**63), 2**63 - 1))
decimals = st.one_of(
    st.sampled_from([Decimal("0.00"), Decimal("-0.00"), Decimal("0.01"), Decimal("-0.01"),
                     Decimal("1.50"), Decimal("9999999999.99"), Decimal("-9999999999.99")]),
    st.decimals(min_value=Decimal("-9999999999.99"), max_value=Decimal("9999999999.99"),
                places=2, allow_nan=False, allow_infinity=False),
)
floats = st.one_of(st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.30000000000000004, 1.5, -2.5]),
                   st.sampled_from([1e300, -1e-300, 5e-324, 2.0**53 + 2,
                                    1.7976931348623157e308]),
                   st.floats(allow_nan=False, allow_infinity=False))
_MOMENT = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
datetimes = st.one_of(
    st.sampled_from([_MOMENT, _MOMENT.replace(microsecond=1), _MOMENT.replace(second=10)]),
    st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31),
                 timezones=st.just(UTC)))
dates = st.one_of(st.sampled_from([dt.date(2031, 5, 6), dt.date(2031, 5, 7)]),
                  st.dates(min_value=dt.date(1000, 1, 1)))
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "i": integers, "d": decimals, "f": floats, "t": texts, "b": st.booleans(),
    "ts": datetimes, "dd": dates, "bt": datetimes,
}


def rows(count: int = 6) -> st.SearchStrategy[list[dict[str, Value]]]:
    """Rows of the table (ids 1..n), any column possibly NULL."""
    row = st.fixed_dictionaries({name: st.none() | values for name, values in VALUES.items()})
    return st.lists(row, min_size=1, max_size=count).map(
        lambda items: [{"id": index, **item} for index, item in enumerate(items, 1)])


# --- filters over the table -----------------------------------------------------------------


def table_filter(sample: Sequence[dict[str, Value]]) -> st.SearchStrategy[Condition]:
    """A filter that fits the table, its literals mostly taken from (or next to) `sample`."""
    return st.recursive(table_predicate(sample), lambda children: st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda items: And(tuple(items))),
        st.lists(children, min_size=2, max_size=3).map(lambda items: Or(tuple(items))),
        children.map(Not)), max_leaves=6)


@st.composite
def table_predicate(draw: st.DrawFn, sample: Sequence[dict[str, Value]],
                    name: str | None = None) -> Condition:
    """One comparison (on column `name`, or any) that fits the table, its literal mostly taken
    from (or next to) `sample`."""
    name = name or draw(st.sampled_from(sorted(KINDS)))
    operand: Operand = BusinessTime() if name == "bt" else Column(draw(
        st.sampled_from([name, name.upper()])))
    negated = draw(st.booleans())
    if name == "b":
        choice = draw(st.sampled_from(["compare", "null"]))
        if choice == "null":
            return IsNull(operand, negated)
        return Compare(operand, draw(st.sampled_from(["=", "<>"])), Literal(draw(st.booleans())))
    literal = _literal_for(name, sample)
    shapes = ["compare", "in", "between", "null"] + (["like", "starts"] if name == "t" else [])
    shape = draw(st.sampled_from(shapes))
    if shape == "compare":
        operator = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        return Compare(operand, operator, Literal(draw(literal)))
    if shape == "in":
        items = draw(st.lists(st.one_of(literal, st.just(None)), min_size=1, max_size=4))
        return InList(operand, tuple(Literal(item) for item in items), negated)
    if shape == "between":
        return Between(operand, Literal(draw(literal)), Literal(draw(literal)), negated)
    if shape == "null":
        return IsNull(operand, negated)
    text = draw(st.sampled_from([row["t"] for row in sample if isinstance(row["t"], str)] or [""]))
    if shape == "starts":
        return StartsWith(operand, text[:draw(st.integers(0, len(text)))], negated)
    return Like(operand, LikePattern.parse(draw(_pattern_from(text))), negated)


def _literal_for(name: str, sample: Sequence[dict[str, Value]]) -> st.SearchStrategy[Any]:
    seen = [row[name] for row in sample if row[name] is not None]
    nearby = _NEARBY[name]
    fresh = _FRESH[name]
    if not seen:
        return fresh
    return st.one_of(st.sampled_from(seen).flatmap(nearby), fresh)


def _float_literal(value: float) -> Decimal | int:
    """The float as a filter literal, or 0 when its digits pass the literal limits."""
    exact = Decimal(repr(value))
    whole, _, fraction = format(exact, "f").lstrip("-").partition(".")
    return 0 if len(fraction) > 30 or len(whole) + len(fraction) > 65 else exact


def _shifted_decimal(value: Decimal) -> st.SearchStrategy[Decimal]:
    return st.sampled_from([value, value + Decimal("0.01"), value - Decimal("0.001"),
                            value.quantize(Decimal(1)) if abs(value) < 10**10 else value])


_NEARBY: dict[str, Callable[[Any], st.SearchStrategy[Any]]] = {
    "i": lambda value: st.sampled_from([value, value + 1, value - 1]).filter(
        lambda number: -(2**63) <= number <= 2**64 - 1),
    "d": _shifted_decimal,
    "f": lambda value: st.just(_float_literal(value)),
    "t": lambda value: st.sampled_from([value, value.upper(), value.lower(), value.swapcase(),
                                        value + " ", value.rstrip(), value[:-1]]),
    "ts": lambda value: st.sampled_from([value, value + dt.timedelta(microseconds=1),
                                         value.replace(microsecond=0)]),
    "dd": lambda value: st.just(value),
    "bt": lambda value: st.sampled_from([value, value.replace(microsecond=0)]),
}
_FRESH: dict[str, st.SearchStrategy[Any]] = {
    "i": st.one_of(integers, st.sampled_from([2**63, 2**64 - 1])),
    "d": st.one_of(decimals, st.integers(-(10**12), 10**12),
                   st.decimals(min_value=-(10**9), max_value=10**9, places=4,
                               allow_nan=False, allow_infinity=False)),
    "f": st.one_of(st.integers(-(2**64), 2**64), floats.map(_float_literal)),
    "t": texts,
    "ts": datetimes,
    "dd": dates,
    "bt": datetimes,
}


@st.composite
def _pattern_from(draw: st.DrawFn, text: str) -> str:
    """A LIKE pattern derived from `text`: some characters become `_`, some runs `%`."""
    parts = []
    for char in text:
        choice = draw(st.sampled_from(["keep", "keep", "keep", "one", "many", "swap"]))
        parts.append({"keep": char, "one": "_", "many": "%", "swap": char.swapcase()}[choice])
    if draw(st.booleans()):
        parts.append("%")
    return "".join(parts)[:256]
