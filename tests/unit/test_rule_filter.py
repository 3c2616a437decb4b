"""Row filters of sync rules (§8.1): what an operator can write, what is refused and where,
the type rules, and how rows are judged (SQL's three-valued logic, exact comparisons, LIKE
without backtracking)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.filter import (
    BUSINESS_TIME,
    And,
    Between,
    Column,
    Compare,
    FilterError,
    InList,
    Like,
    LikePattern,
    Literal,
    Or,
    RowFilter,
    StartsWith,
    parse_filter,
    render,
)
from tidesync.domain.rules.filter_like import StepMeter
from tidesync.domain.values import BitString, JsonText

UTC = dt.UTC
EXAMPLE = "status <> 'DRAFT' AND (qty BETWEEN 1 AND 100 OR code LIKE 'PO-%')"
KINDS = {"status": ColumnKind.TEXT, "qty": ColumnKind.INTEGER, "code": ColumnKind.TEXT,
         "price": ColumnKind.DECIMAL, "weight": ColumnKind.FLOAT, "done": ColumnKind.BOOL,
         "shipped_at": ColumnKind.DATETIME, "due": ColumnKind.DATE, "slot": ColumnKind.TIME,
         "doc": ColumnKind.JSON, "blob": ColumnKind.BYTES}


def matches(text: str, business_time: dt.datetime | None = None, **row: object) -> bool:
    return parse_filter(text).matches(row, business_time)  # type: ignore[arg-type]


# --- reading filters ------------------------------------------------------------------------


def test_the_example_reads_into_its_tree():
    row_filter = parse_filter(EXAMPLE)
    assert row_filter.text == EXAMPLE
    assert row_filter.root == And((
        Compare(Column("status"), "<>", Literal("DRAFT")),
        Or((Between(Column("qty"), Literal(1), Literal(100)),
            Like(Column("code"), LikePattern.parse("PO-%")))),
    ))
    assert row_filter.columns() == {"status", "qty", "code"}
    assert render(row_filter.root) == EXAMPLE


def test_keywords_are_case_insensitive_and_names_keep_their_spelling():
    row_filter = parse_filter("Status != 'x' and not QTY in (1, 2) Or code starts with 'PO_'")
    assert render(row_filter.root) == (
        "(Status <> 'x' AND NOT QTY IN (1, 2)) OR code STARTS WITH 'PO_'")
    assert row_filter.columns() == {"Status", "QTY", "code"}


def test_literals_are_exact_and_times_are_utc():
    row_filter = parse_filter(
        "a = -12 AND b = 3.50 AND c = 'it''s' AND d = TIMESTAMP '2031-02-03 04:05:06.7' "
        "AND e = DATE '2031-02-03' AND f = TRUE AND g IN (NULL, FALSE)")
    assert isinstance(row_filter.root, And)
    values = [item.literal.value for item in row_filter.root.items[:6]]  # type: ignore[union-attr]
    assert values == [-12, Decimal("3.50"), "it's",
                      dt.datetime(2031, 2, 3, 4, 5, 6, 700000, tzinfo=UTC),
                      dt.date(2031, 2, 3), True]
    assert type(values[0]) is int and str(values[1]) == "3.50"


def test_backquoted_names_hold_anything_but_stay_columns():
    row_filter = parse_filter("`order` = 1 AND `odd ``name``` = 2 AND `$business_time` IS NULL")
    assert row_filter.columns() == {"order", "odd `name`", "$business_time"}
    assert not row_filter.uses_business_time
    assert parse_filter(render(row_filter.root)).root == row_filter.root


def test_business_time_is_not_a_column():
    row_filter = parse_filter(f"{BUSINESS_TIME} >= TIMESTAMP '2031-01-01 00:00:00' AND a = 1")
    assert row_filter.uses_business_time
    assert row_filter.columns() == {"a"}


def test_starts_with_takes_its_prefix_literally():
    assert parse_filter("code STARTS WITH 'PO_%'").root == StartsWith(Column("code"), "PO_%")
    assert matches("code STARTS WITH 'PO_%'", code="PO_%1")
    assert not matches("code STARTS WITH 'PO_%'", code="POX1")


@pytest.mark.parametrize(("text", "position", "says"), [
    ("", 0, "empty"),
    ("qty >", 5, "expected a value"),
    ("qty = 1 AND", 11, "expected a column name"),
    ("qty = 1 qty = 2", 8, "unexpected the name qty"),
    ("status = DRAFT", 9, "expected a value, found the name DRAFT"),
    ("(qty = 1", 8, "expected ')'"),
    ("qty = 1)", 7, "unexpected ')'"),
    ("qty == 1", 5, "expected a value"),
    ("1 = qty", 0, "expected a column name"),
    ("code LIKE 5", 10, "LIKE takes a string literal"),
    ("qty IN ()", 8, "expected a value"),
    ("qty = 1e5", 6, "malformed number"),
    ("qty = 1.", 6, "malformed number"),
    ("code = 'open", 7, "unterminated string literal"),
    ("`open = 1", 0, "unterminated quoted column name"),
    ("`` = 1", 0, "cannot be empty"),
    ("qty = 1 # x", 8, "unexpected character"),
    ("$now = 1", 0, "$business_time"),
    ("qty IS 1", 7, "expected NULL"),
    ("qty = - 'a'", 6, "'-' must be followed by a number"),
    ("t = TIMESTAMP '2031-02-30 00:00:00'", 14, "TIMESTAMP"),
    ("t = TIMESTAMP '2031-02-03'", 14, "TIMESTAMP"),
    ("t = DATE '0999-01-01'", 9, "year 1000"),
    ("t = DATE 5", 9, "takes a quoted value"),
    ("and = 1", 0, "expected a column name"),
    ("code = 'a\x00b'", 7, "NUL"),
])
def test_bad_filters_say_what_and_where(text: str, position: int, says: str):
    with pytest.raises(FilterError) as raised:
        parse_filter(text)
    assert raised.value.position == position
    assert says in str(raised.value)
    assert raised.value.code is ErrorCode.RULE_FILTER_INVALID
    assert isinstance(raised.value, TidesyncError)


def test_errors_do_not_repeat_literal_values():
    with pytest.raises(FilterError) as raised:
        parse_filter("code = 'SECRET-42' 'SECRET-43'")
    assert "SECRET" not in str(raised.value)


@pytest.mark.parametrize(("text", "says"), [
    ("a = 1 OR " * 455 + "a = 1", "4096 characters"),
    ("code = '" + "x" * 257 + "'", "256 characters"),
    ("code LIKE '" + "%" * 257 + "'", "256 characters"),
    ("`" + "c" * 65 + "` = 1", "64 characters"),
    ("c" * 65 + " = 1", "64 characters"),
    ("qty IN (" + ",".join(["1"] * 1001) + ")", "1000 values"),
    ("(" * 33 + "a = 1" + ")" * 33, "32 deep"),
    ("NOT " * 33 + "a = 1", "32 deep"),
    (" OR ".join(["a=1"] * 256), "256 conditions"),
    ("a = " + "9" * 66, "65 digits"),
    ("a = 0." + "1" * 31, "30 after the point"),
])
def test_every_limit_is_named_when_passed(text: str, says: str):
    with pytest.raises(FilterError, match=says):
        parse_filter(text)


def test_the_largest_filters_within_the_limits_are_read():
    parse_filter("qty IN (" + ",".join(["1"] * 1000) + ")")
    parse_filter("(" * 32 + "a = 1" + ")" * 32)
    parse_filter(" OR ".join(["a=1"] * 255))
    parse_filter("a = " + "9" * 35 + "." + "9" * 30)
    parse_filter("code = '" + "x" * 256 + "'")


def test_a_non_string_is_refused():
    with pytest.raises(FilterError):
        parse_filter(None)  # type: ignore[arg-type]


# --- type rules -----------------------------------------------------------------------------


def test_a_filter_that_fits_has_no_problems():
    text = (EXAMPLE + " AND price >= 1.25 AND weight < 3 AND done = TRUE AND due IN"
            " (DATE '2031-01-01', NULL) AND shipped_at > TIMESTAMP '2031-01-01 00:00:00'"
            " AND slot IS NULL AND doc IS NOT NULL AND $business_time IS NOT NULL"
            " AND $business_time < TIMESTAMP '2040-01-01 00:00:00' AND STATUS STARTS WITH 'O'")
    assert parse_filter(text).type_problems(KINDS) == []


def test_column_names_match_case_insensitively():
    assert parse_filter("QTY = 1").type_problems({"Qty": ColumnKind.INTEGER}) == []


@pytest.mark.parametrize(("text", "says"), [
    ("nope = 1", "no column nope (at character 0)"),
    ("qty = 'abc'", "qty (integer): compare it with an integer (at character 6)"),
    ("qty = 1.5", "compare it with an integer"),
    ("qty = 18446744073709551616", "compare it with an integer"),
    ("qty = -9223372036854775809", "compare it with an integer"),
    ("qty LIKE '1%'", "qty (integer) is not text, so it takes no LIKE"),
    ("price STARTS WITH '1'", "takes no STARTS WITH"),
    ("status = 5", "compare it with a string literal"),
    ("status IN ('a', 5)", "compare it with a string literal (at character 16)"),
    ("status = NULL", "never true; use IS NULL"),
    ("qty BETWEEN NULL AND 5", "never true; use IS NULL"),
    ("done < TRUE", "done (bool) cannot be compared this way"),
    ("done IN (TRUE)", "cannot be compared this way"),
    ("done = 1", "compare it with TRUE or FALSE"),
    ("shipped_at > DATE '2031-01-01'", "compare it with a TIMESTAMP literal"),
    ("due > TIMESTAMP '2031-01-01 00:00:00'", "compare it with a DATE literal"),
    ("weight = TRUE", "compare it with a number"),
    ("slot = '10:00'", "a time column takes only IS NULL"),
    ("doc = 'x'", "a json column takes only IS NULL"),
    ("blob = 'x'", "a bytes column takes only IS NULL"),
    ("$business_time = 5", "$business_time (datetime): compare it with a TIMESTAMP literal"),
])
def test_type_problems_name_the_column_and_the_place(text: str, says: str):
    problems = parse_filter(text).type_problems(KINDS)
    assert len(problems) == 1
    assert says in problems[0]


def test_every_problem_is_reported():
    problems = parse_filter("nope = 1 OR qty = 'x' OR code = 'ok' OR done > FALSE").type_problems(
        KINDS)
    assert len(problems) == 3


# --- judging rows ---------------------------------------------------------------------------


def test_the_example_judges_rows():
    assert matches(EXAMPLE, status="OPEN", qty=5, code=None)
    assert matches(EXAMPLE, status="OPEN", qty=500, code="PO-7")
    assert not matches(EXAMPLE, status="DRAFT", qty=5, code="PO-7")
    assert not matches(EXAMPLE, status="OPEN", qty=500, code="SO-7")
    assert not matches(EXAMPLE, status=None, qty=5, code="PO-7")  # NULL <> 'DRAFT' is UNKNOWN


@pytest.mark.parametrize(("text", "row", "passes"), [
    ("a = 1", {"a": None}, False),
    ("NOT a = 1", {"a": None}, False),
    ("a <> 1", {"a": None}, False),
    ("a IS NULL", {"a": None}, True),
    ("a IS NULL", {}, True),  # a missing column is NULL
    ("a IS NOT NULL", {"a": 0}, True),
    ("a = 1 OR b = 1", {"a": None, "b": 1}, True),
    ("a = 1 OR b = 1", {"a": None, "b": 2}, False),
    ("NOT (a = 1 OR b = 1)", {"a": None, "b": 2}, False),
    ("NOT (a = 1 AND b = 1)", {"a": None, "b": 2}, True),
    ("a IN (1, NULL)", {"a": 1}, True),
    ("a IN (1, NULL)", {"a": 2}, False),
    ("a NOT IN (1, NULL)", {"a": 2}, False),  # 2 <> NULL is UNKNOWN
    ("a NOT IN (1, 3)", {"a": 2}, True),
    ("a NOT IN (1, 3)", {"a": None}, False),
    ("a BETWEEN 1 AND 3", {"a": 3}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": 4}, True),
    ("a NOT BETWEEN 1 AND NULL", {"a": 0}, True),  # 0 < 1 decides without the NULL
    ("a NOT BETWEEN 1 AND NULL", {"a": 2}, False),
    ("a LIKE '%'", {"a": None}, False),
    ("a NOT LIKE 'x%'", {"a": None}, False),
])
def test_three_valued_logic(text: str, row: dict[str, object], passes: bool):
    assert parse_filter(text).matches(row) is passes  # type: ignore[arg-type]


def test_columns_are_found_case_insensitively():
    assert matches("QTY = 1", qty=1)
    assert matches("qty = 1", QTY=1)
    assert matches("`Qty` = 1", qTY=1)


@pytest.mark.parametrize(("text", "value", "passes"), [
    ("x = 1", Decimal("1.00"), True),
    ("x = 1.0", 1, True),
    ("x > 0.1", Decimal("0.1000000000000000000000000001"), True),
    ("x = 0.1", 0.1, True),  # a float compares as a double, as MySQL does
    ("x < 0.30000000000000001", 0.3, False),
    ("x = 9007199254740993", 9007199254740992.0, True),
    ("x = 0", -0.0, True),
    ("x > 99999999999999999999999999999999", 10**40, True),
    ("x = 1", True, False),  # a bool is not a number: UNKNOWN
    ("NOT x = 1", True, False),
    ("x = 1", "1", False),
    ("NOT x = 1", "1", False),
    ("x = 1", float("nan"), False),
    ("x IS NULL", float("nan"), True),  # SQLite stores NaN as NULL; MySQL none at all
    ("x > 1", Decimal("NaN"), False),
    ("x > 1", Decimal("sNaN"), False),
    ("x > 1", Decimal("Infinity"), True),
    ("x > 1", float("inf"), True),
])
def test_numbers_compare_exactly_and_other_types_are_unknown(text: str, value: object,
                                                              passes: bool):
    assert matches(text, x=value) is passes


def test_integers_beyond_any_column_still_compare():
    huge = 10**5000  # more digits than Python turns into text by default
    assert matches("x > 1", x=huge)
    assert matches("x < 1.5", x=-huge)
    assert matches("x <> 99999999999999999999999999999999", x=huge)


@pytest.mark.parametrize(("text", "value", "passes"), [
    ("t = 'abc'", "ABC", False),
    ("t = 'a'", "a ", False),
    ("t < 'b'", "B", True),
    ("t > 'z'", "\U0001f600", True),
    ("t < '\ufffd'", "\U0001f600", False),  # code point order, as UTF-8 bytes sort
    ("t = 'ß'", "ss", False),
    ("t LIKE 'a_c'", "a\U0001f600c", True),  # _ is one character, however many bytes
    ("t LIKE 'a_c'", "abbc", False),
    ("t LIKE 'A%'", "abc", False),
    ("t LIKE 'a'", "a ", False),
    ("t LIKE ''", "", True),
    ("t LIKE '%'", "", True),
    ("t LIKE '%b%'", "abc", True),
    ("t LIKE 'a%c%e'", "abcde", True),
    ("t LIKE 'a%c%e'", "abcdef", False),
    ("t LIKE 'a%%_'", "a", False),
    ("t LIKE '_%_'", "ab", True),
    ("t LIKE '%a_a%'", "xxaxbyaza", True),
    ("t LIKE 'a\\%'", "a\\b", True),  # backslash is an ordinary character
    ("t STARTS WITH ''", "", True),
    ("t STARTS WITH 'ab'", "a", False),
    ("t = 'a'", b"a", False),
    ("t LIKE 'a'", b"a", False),
    ("t = 'a'", JsonText('"a"'), False),
])
def test_text_compares_by_code_point_with_nothing_ignored(text: str, value: object, passes: bool):
    assert matches(text, t=value) is passes


@pytest.mark.parametrize(("text", "value", "passes"), [
    ("w = TIMESTAMP '2031-01-01 10:00:00'",
     dt.datetime(2031, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))), True),
    ("w > TIMESTAMP '2031-01-01 10:00:00'", dt.datetime(2031, 1, 1, 10, 0, 0, 1, tzinfo=UTC),
     True),
    ("w = TIMESTAMP '2031-01-01 10:00:00'", dt.datetime(2031, 1, 1, 10), False),  # naive
    ("NOT w = TIMESTAMP '2031-01-01 10:00:00'", dt.datetime(2031, 1, 1, 10), False),
    ("w = TIMESTAMP '2031-01-01 00:00:00'", dt.date(2031, 1, 1), False),
    ("w = DATE '2031-01-01'", dt.date(2031, 1, 1), True),
    ("w = DATE '2031-01-01'", dt.datetime(2031, 1, 1, tzinfo=UTC), False),
    ("w = DATE '2031-01-01'", "2031-01-01", False),
])
def test_times_compare_as_instants_and_dates_as_dates(text: str, value: object, passes: bool):
    assert matches(text, w=value) is passes


@pytest.mark.parametrize(("text", "value", "passes"), [
    ("b = TRUE", True, True), ("b = TRUE", 2, True), ("b = FALSE", 0, True),
    ("b <> TRUE", False, True), ("b = TRUE", "yes", False), ("b = TRUE", None, False),
    ("b = TRUE", BitString(3, 1), False),
])
def test_booleans(text: str, value: object, passes: bool):
    assert matches(text, b=value) is passes


def test_business_time_comes_from_the_caller():
    text = "$business_time >= TIMESTAMP '2031-01-01 00:00:00'"
    assert matches(text, dt.datetime(2031, 6, 1, tzinfo=UTC))
    assert not matches(text, dt.datetime(2030, 6, 1, tzinfo=UTC))
    assert not matches(text, None)
    assert matches("$business_time IS NULL", None)
    # A column that happens to be called business_time is not the business time.
    assert not parse_filter(text).matches({"business_time": dt.datetime(2031, 6, 1, tzinfo=UTC)})


def test_a_row_filter_is_a_frozen_value():
    row_filter = parse_filter("a = 1")
    assert row_filter == RowFilter("a = 1", Compare(Column("a"), "=", Literal(1)))
    with pytest.raises(AttributeError):
        row_filter.text = "b = 1"  # type: ignore[misc]


def test_in_lists_hold_their_items():
    assert parse_filter("a IN (1, NULL, -2)").root == InList(
        Column("a"), (Literal(1), Literal(None), Literal(-2)))


# --- LIKE without backtracking ----------------------------------------------------------------


def _steps(pattern: str, text: str) -> tuple[bool, int]:
    meter = StepMeter()
    return LikePattern.parse(pattern).matches(text, meter), meter.steps


def test_a_pathological_pattern_is_matched_in_polynomial_steps():
    # A backtracking matcher tries every way of spreading the a's: exponential in the %s.
    pattern = "%a" * 127 + "%b%"
    text = "a" * 4096
    matched, steps = _steps(pattern, text)
    assert not matched
    assert steps <= len(text) * 2


def test_single_character_wildcards_stay_within_text_times_pattern_steps():
    pattern = "%" + "a_" * 60 + "b%" + "%a_a" * 30
    text = "a" * 4096
    matched, steps = _steps(pattern, text)
    assert not matched
    assert steps <= len(text) * len(pattern)


def test_segments_are_placed_leftmost_and_in_order():
    assert _steps("%ab%ab%", "xxabyyab")[0]
    assert not _steps("%ab%ab%", "xxabyy")[0]
    assert _steps("a%a", "aa")[0]
    assert not _steps("a%a", "a")[0]
    assert _steps("%_b_%", "\U0001f600b\U0001f600")[0]
