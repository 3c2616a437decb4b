"""Row filters of sync rules (§8.1 row_filter): a small, safe condition language written by
fleet operators, read into a tree, type-checked against a table and evaluated on rows.

The language (docs/rules_filters.md says the same for operators):

* Literals: 'text' ('' is a quote), integers (-12), exact decimals (3.50, at most 65 digits and
  30 after the point), TRUE, FALSE, NULL, TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.ffffff]' (UTC) and
  DATE 'YYYY-MM-DD' (years 1000 to 9999).
* Columns: `[A-Za-z_][A-Za-z0-9_]*` or backquoted (`` `odd name` ``, a doubled backquote inside);
  matched case-insensitively. `$business_time` is the row's business time.
* Conditions: column = <> != < <= > >= literal; [NOT] IN (literals); [NOT] BETWEEN a AND b;
  IS [NOT] NULL; [NOT] LIKE 'pattern' (`%` any run, `_` any one character, no escape);
  [NOT] STARTS WITH 'prefix' (plain text, `%` and `_` are themselves); AND, OR, NOT and
  parentheses. Keywords in any case. The column is always on the left.
* SQL's three-valued logic: a comparison with NULL is UNKNOWN, NOT UNKNOWN is UNKNOWN, and a row
  passes only when the filter is TRUE (so `x NOT IN (1, NULL)` passes no row).
* Text compares by code point, case and trailing spaces significant; numbers exactly; times
  as instants. Type rules (`type_problems`) keep each column to literals of its kind.
* Limits: 4096 characters, 256 characters per string, 256 conditions, nesting 32 deep, 1000
  values per IN list. LIKE is matched without backtracking.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.rules.filter_ast import (
    BUSINESS_TIME,
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
    Literal,
    LiteralValue,
    Not,
    Operand,
    Or,
    StartsWith,
    render,
)
from tidesync.domain.rules.filter_eval import RowReader, evaluate
from tidesync.domain.rules.filter_like import LikePattern
from tidesync.domain.rules.filter_parse import Parser
from tidesync.domain.rules.filter_types import predicates, type_problems
from tidesync.domain.values import Value

__all__ = [
    "BUSINESS_TIME", "And", "Between", "BusinessTime", "Column", "Compare", "Condition",
    "FilterError", "InList", "IsNull", "Like", "LikePattern", "Literal", "LiteralValue", "Not",
    "Operand", "Or", "RowFilter", "StartsWith", "parse_filter", "render",
]


@dataclass(frozen=True, slots=True)
class RowFilter:
    """A parsed row filter: its text as written and its tree."""

    text: str
    root: Condition

    def columns(self) -> frozenset[str]:
        """The columns the filter names, as written (not `$business_time`)."""
        return frozenset(predicate.operand.name for predicate in predicates(self.root)
                         if isinstance(predicate.operand, Column))

    @property
    def uses_business_time(self) -> bool:
        return any(isinstance(predicate.operand, BusinessTime)
                   for predicate in predicates(self.root))

    def type_problems(self, columns: Mapping[str, ColumnKind]) -> list[str]:
        """What does not fit a table with these column kinds; empty when the filter fits."""
        return type_problems(self.root, columns)

    def matches(self, row: Mapping[str, Value], business_time: dt.datetime | None = None) -> bool:
        """Whether the filter is TRUE for the row (FALSE and UNKNOWN do not match).

        Never raises: a missing column is NULL, and a value of a type its literal does not
        compare with makes that comparison UNKNOWN.
        """
        return evaluate(self.root, RowReader(row, business_time)) is True


def parse_filter(text: str) -> RowFilter:
    """Read a filter; FilterError (with the position) for bad syntax or a limit passed."""
    if not isinstance(text, str):
        raise FilterError("a filter is text")
    return RowFilter(text, Parser(text).parse())
