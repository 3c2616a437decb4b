"""Rule transforms: only registered, versioned pure functions; a spec that names anything else,
or arguments that do not fit, fails validation; applying them never leaks a value."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import Context, Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.errors import ErrorCode
from tidesync.domain.rules.transforms import (
    EXAMPLE_CONTEXT,
    REGISTRY,
    Transform,
    TransformContext,
    TransformError,
    TransformSpec,
    apply_transforms,
    validate_transform,
)
from tidesync.domain.value_checks import MAX_DECIMAL_DIGITS
from tidesync.domain.values import Value, canonical_value

KEY = TransformContext(mask_key=b"k" * 32)

# A changed fingerprint means a transform now behaves differently: give it a new version and
# keep the old one registered, rather than editing this table.
PINNED_FINGERPRINTS = {
    "trim@1": "e1cb3e96267955b5ec7b9baffb0c731a7e431db3f2e1dac2d32be2e74928507b",
    "lower@1": "c0128fce3b5c6c8dcacaf9f083abc763a6fd494855936b962888e6a5fcefd4fa",
    "upper@1": "7bc6ac65b5d8327c422df2fdb9c1ac336c29e9fbed0bed5b033d81207f8160ee",
    "truncate@1": "582e210f2101bed3ca3c67c1d8e90547810a00b7035bf6f7d5b107873676a466",
    "round@1": "4b85223ddb032b1a91d4b74c2cb31f13b15c9be55d3e5adc97f4f695d882c2da",
    "scale@1": "c6637c1b7da0357d5901ea1b4d25066db6d9010e06d0f13bdc3531c0b2e44934",
    "hmac_mask@1": "0638fb2b66a0967debc4946a7ca97ebd3895c0715a67a2201fa26e3d414abadd",
    "null@1": "d92842de47cd99d7bb80b252ba8510d95887a5996c238f18b267888a7b58e00c",
    "utc@1": "cc0a9ff972555f1622ba494e25d0c25fe451bfe075fc51453bc3808ebe7a927c",
}


def spec(column: str, ref: str, args: Mapping[str, object] | None = None) -> TransformSpec:
    return TransformSpec.parse(column, ref, args)


def same(left: Value, right: Value) -> bool:
    """Equal in type and value, a decimal's exponent included."""
    return canonical_value(left) == canonical_value(right)


# The registry and its fingerprints.


def test_the_registry_holds_exactly_the_documented_transforms() -> None:
    assert sorted(transform.ref() for transform in REGISTRY.values()) == sorted(
        PINNED_FINGERPRINTS)
    assert all(key == (t.name, t.version) for key, t in REGISTRY.items())


def test_fingerprints_are_pinned() -> None:
    assert {t.ref(): t.fingerprint for t in REGISTRY.values()} == PINNED_FINGERPRINTS


@pytest.mark.parametrize("transform", REGISTRY.values(), ids=lambda t: t.ref())
def test_every_example_in_a_fingerprint_is_what_the_transform_does(transform: Transform) -> None:
    assert transform.examples
    for example in transform.examples:
        result = transform.apply(example.value, example.args, EXAMPLE_CONTEXT)
        assert type(result) is type(example.result)
        if isinstance(result, dt.datetime):
            assert result == example.result and result.tzinfo is dt.UTC
        else:
            assert same(result, example.result)


def test_a_fingerprint_changes_with_the_behaviour_described() -> None:
    trim = REGISTRY[("trim", 1)]
    changed = Transform(trim.name, trim.version, trim.kinds, trim.description + " and tabs",
                        trim.arg_schema, trim.examples, trim.function)
    assert changed.fingerprint != trim.fingerprint
    same_again = Transform(trim.name, trim.version, trim.kinds, trim.description,
                           trim.arg_schema, trim.examples, trim.function)
    assert same_again.fingerprint == trim.fingerprint


# Parsing what a rule writes.


def test_a_spec_parses_name_version_and_frozen_args() -> None:
    parsed = spec("price", "round@1", {"places": 2})
    assert (parsed.column, parsed.name, parsed.version, dict(parsed.args)) == (
        "price", "round", 1, {"places": 2})
    assert parsed.ref() == "round@1"
    with pytest.raises(TypeError):
        parsed.args["places"] = 3  # type: ignore[index]
    assert hash(parsed) == hash(spec("price", "round@1", {"places": 2}))
    assert spec("name", "trim@1", None).args == {}


@pytest.mark.parametrize("ref", ["round", "round@", "Round@1", "round@0", "round@x", "@1",
                                 "round@1 ", "round@1.0", "a" * 40 + "@1", ""])
def test_a_malformed_reference_is_refused(ref: str) -> None:
    with pytest.raises(TransformError) as caught:
        spec("price", ref)
    assert caught.value.code is ErrorCode.RULE_TRANSFORM_INVALID


@pytest.mark.parametrize(("args", "words"), [
    ({"places": 2.5}, "as a string"),
    ({"Places": 2}, "argument name"),
    ({"places": [2]}, "must be"),
    ({"places": "x" * 300}, "must be"),
    ({"places": 2**70}, "must be"),
    ({f"a{n}": 1 for n in range(9)}, "at most"),
])
def test_malformed_args_are_refused(args: Mapping[str, object], words: str) -> None:
    with pytest.raises(TransformError, match=words):
        spec("price", "round@1", args)


@pytest.mark.parametrize("column", ["", "x" * 65, "a\x00b"])
def test_a_malformed_column_name_is_refused(column: str) -> None:
    with pytest.raises(TransformError):
        spec(column, "trim@1")


def test_a_malformed_fingerprint_is_refused() -> None:
    with pytest.raises(TransformError, match="fingerprint"):
        TransformSpec.parse("name", "trim@1", None, fingerprint="not hex")


# Validation against the registry and the column's kind.


def test_a_valid_spec_has_no_problems() -> None:
    assert validate_transform(spec("name", "trim@1"), ColumnKind.TEXT) == []
    assert validate_transform(spec("price", "round@1", {"places": 2}), ColumnKind.DECIMAL) == []
    assert validate_transform(spec("seen", "utc@1", {"from_zone": "Asia/Shanghai"}),
                              ColumnKind.DATETIME) == []
    assert validate_transform(spec("any", "null@1"), ColumnKind.JSON) == []


def test_an_unknown_transform_or_version_fails_validation() -> None:
    assert validate_transform(spec("name", "shout@1"), ColumnKind.TEXT) == [
        "unknown transform shout@1"]
    assert validate_transform(spec("name", "trim@2"), ColumnKind.TEXT) == [
        "trim has no version 2 (known: 1)"]


def test_a_missing_column_is_the_only_problem_that_mentions_columns() -> None:
    problems = validate_transform(spec("ghost", "truncate@2", {"size": 3}), None)
    assert problems == ["truncate has no version 2 (known: 1)", "column ghost does not exist"]
    problems = validate_transform(spec("ghost", "truncate@1", {"size": 3}), None)
    assert [p for p in problems if "column" in p] == ["column ghost does not exist"]
    assert len(problems) == 3  # also: unknown size, missing length


def test_a_transform_on_a_column_of_another_kind_fails_validation() -> None:
    assert validate_transform(spec("price", "trim@1"), ColumnKind.DECIMAL) == [
        "trim@1: takes text values, not decimal"]
    assert validate_transform(spec("id", "hmac_mask@1"), ColumnKind.INTEGER) == [
        "hmac_mask@1: takes bytes or text values, not integer"]


@pytest.mark.parametrize(("ref", "args", "kind"), [
    ("truncate@1", {}, ColumnKind.TEXT),
    ("truncate@1", {"length": 0}, ColumnKind.TEXT),
    ("truncate@1", {"length": 65536}, ColumnKind.TEXT),
    ("truncate@1", {"length": True}, ColumnKind.TEXT),
    ("truncate@1", {"length": "5"}, ColumnKind.TEXT),
    ("truncate@1", {"length": 5, "from": 1}, ColumnKind.TEXT),
    ("trim@1", {"chars": " "}, ColumnKind.TEXT),
    ("round@1", {"places": 31}, ColumnKind.DECIMAL),
    ("round@1", {"places": -1}, ColumnKind.FLOAT),
    ("scale@1", {"factor": "abc"}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": "NaN"}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": "Infinity"}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": "1E+999"}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": " 2"}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": "1" * 31}, ColumnKind.DECIMAL),
    ("scale@1", {"factor": "0.5"}, ColumnKind.INTEGER),
    ("hmac_mask@1", {"length": 7}, ColumnKind.TEXT),
    ("hmac_mask@1", {"length": 65}, ColumnKind.BYTES),
    ("utc@1", {"from_zone": "Mars/Olympus_Mons"}, ColumnKind.DATETIME),
    ("utc@1", {"from_zone": "../../etc/passwd"}, ColumnKind.DATETIME),
    ("utc@1", {"from_zone": "/usr/share/zoneinfo/UTC"}, ColumnKind.DATETIME),
    ("utc@1", {"from_zone": 8}, ColumnKind.DATETIME),
])
def test_arguments_that_do_not_fit_fail_validation(ref: str, args: Mapping[str, object],
                                                    kind: ColumnKind) -> None:
    problems = validate_transform(spec("c", ref, args), kind)
    assert problems and all(problem.startswith(ref) for problem in problems)
    assert all("column" not in problem for problem in problems)


def test_scale_takes_whole_factors_for_integers_and_any_for_decimals() -> None:
    assert validate_transform(spec("qty", "scale@1", {"factor": "1E+3"}),
                              ColumnKind.INTEGER) == []
    assert validate_transform(spec("qty", "scale@1", {"factor": -2}), ColumnKind.INTEGER) == []
    assert validate_transform(spec("qty", "scale@1", {"factor": "0.5"}),
                              ColumnKind.DECIMAL) == []
    assert validate_transform(spec("qty", "scale@1", {"factor": "0.5"}),
                              ColumnKind.INTEGER) == [
        "scale@1: argument factor must be a whole number for integer values"]


def test_a_changed_implementation_fails_validation_and_application() -> None:
    trim = REGISTRY[("trim", 1)]
    validated = TransformSpec.parse("name", "trim@1", None, fingerprint=trim.fingerprint)
    assert validate_transform(validated, ColumnKind.TEXT) == []
    elsewhere = TransformSpec.parse("name", "trim@1", None, fingerprint="0" * 64)
    assert validate_transform(elsewhere, ColumnKind.TEXT) == [
        "trim@1 is implemented differently here than where the rule was validated "
        "(fingerprint differs)"]
    with pytest.raises(TransformError, match="fingerprint differs"):
        apply_transforms([elsewhere], {"name": " x "}, KEY)


# Applying transforms to rows.


def test_transforms_apply_to_their_columns_and_leave_the_rest() -> None:
    row: dict[str, Value] = {
        "id": 7, "name": "  Stella Maris ", "price": Decimal("10.005"), "passport_no": "E1234",
        "note": "private", "seen": dt.datetime(2001, 2, 3, 12, 0, tzinfo=dt.UTC),
        "remark": None}
    specs = [spec("name", "trim@1"), spec("price", "round@1", {"places": 2}),
             spec("passport_no", "hmac_mask@1"), spec("note", "null@1"),
             spec("seen", "utc@1", {"from_zone": "Asia/Shanghai"}),
             spec("remark", "upper@1"), spec("absent", "trim@1")]
    result = apply_transforms(specs, row, KEY)
    assert result["id"] == 7 and result["name"] == "Stella Maris"
    assert same(result["price"], Decimal("10.01"))
    assert isinstance(result["passport_no"], str) and len(result["passport_no"]) == 16
    assert result["note"] is None and result["remark"] is None and "absent" not in result
    assert result["seen"] == dt.datetime(2001, 2, 3, 4, 0, tzinfo=dt.UTC)
    assert row["name"] == "  Stella Maris "  # the input row is left as it was


def test_transforms_of_one_column_compose_in_order() -> None:
    specs = [spec("name", "trim@1"), spec("name", "truncate@1", {"length": 3}),
             spec("name", "upper@1")]
    assert apply_transforms(specs, {"name": "  stella"}, KEY) == {"name": "STE"}


def test_a_column_matches_ignoring_case_as_in_mysql() -> None:
    masked = apply_transforms([spec("Passport_No", "hmac_mask@1")], {"passport_no": "E1"}, KEY)
    assert masked["passport_no"] != "E1"


def test_a_value_of_the_wrong_type_is_refused_without_showing_it() -> None:
    with pytest.raises(TransformError) as caught:
        apply_transforms([spec("name", "trim@1")], {"name": 987654321}, KEY)
    assert "987654321" not in str(caught.value)
    assert str(caught.value) == "column name: trim@1 takes text values, not int"
    with pytest.raises(TransformError, match="not bool"):
        REGISTRY[("scale", 1)].apply(True, {"factor": "2"}, KEY)


def test_a_fractional_result_for_an_integer_is_refused_without_showing_it() -> None:
    with pytest.raises(TransformError) as caught:
        apply_transforms([spec("qty", "scale@1", {"factor": "0.5"})], {"qty": 987654321}, KEY)
    assert "987654321" not in str(caught.value) and "493827160" not in str(caught.value)
    assert apply_transforms([spec("qty", "scale@1", {"factor": "0.5"})], {"qty": 64}, KEY) == {
        "qty": 32}


def test_unvalidated_bad_arguments_are_refused_at_apply() -> None:
    with pytest.raises(TransformError, match="argument length is missing"):
        apply_transforms([spec("name", "truncate@1")], {"name": "abc"}, KEY)
    with pytest.raises(TransformError, match="unknown transform"):
        apply_transforms([spec("name", "shout@1")], {"name": "abc"}, KEY)


def test_hmac_mask_refuses_an_empty_key() -> None:
    with pytest.raises(TransformError, match="no mask key") as caught:
        apply_transforms([spec("passport_no", "hmac_mask@1")], {"passport_no": "E1234567"},
                         TransformContext())
    assert "E1234567" not in str(caught.value)


def test_hmac_mask_is_stable_per_key_so_joins_still_work() -> None:
    mask = REGISTRY[("hmac_mask", 1)]
    first = mask.apply("E1234567", {}, KEY)
    assert mask.apply("E1234567", {}, TransformContext(mask_key=b"k" * 32)) == first
    assert mask.apply("E1234568", {}, KEY) != first
    assert mask.apply("E1234567", {}, TransformContext(mask_key=b"other" * 8)) != first
    assert mask.apply("E1234567", {"length": 64}, KEY) == mask.apply(b"E1234567", {"length": 64},
                                                                       KEY).decode()


def test_the_mask_key_is_not_in_the_context_repr() -> None:
    assert "secret-key" not in repr(TransformContext(mask_key=b"secret-key"))


def test_round_is_half_up_for_decimals_and_follows_binary_values_for_floats() -> None:
    rounding = REGISTRY[("round", 1)]
    assert same(rounding.apply(Decimal("0.125"), {"places": 2}, KEY), Decimal("0.13"))
    assert same(rounding.apply(Decimal("-0.125"), {"places": 2}, KEY), Decimal("-0.13"))
    assert same(rounding.apply(Decimal("1E+2"), {"places": 1}, KEY), Decimal("100.0"))
    assert rounding.apply(0.125, {"places": 2}, KEY) == 0.12  # exactly a tie: to even
    assert rounding.apply(0.135, {"places": 2}, KEY) == 0.14  # stored a little above 0.135
    nan = rounding.apply(float("nan"), {"places": 2}, KEY)
    assert isinstance(nan, float) and nan != nan


def test_utc_reads_local_wall_time_in_the_named_zone() -> None:
    utc = REGISTRY[("utc", 1)]
    berlin = {"from_zone": "Europe/Berlin"}
    # Summer and winter offsets differ; a naive and a UTC-marked reading mean the same.
    assert utc.apply(dt.datetime(2021, 7, 1, 12, 0), berlin, KEY) == dt.datetime(
        2021, 7, 1, 10, 0, tzinfo=dt.UTC)
    assert utc.apply(dt.datetime(2021, 1, 1, 12, 0, tzinfo=dt.UTC), berlin, KEY) == dt.datetime(
        2021, 1, 1, 11, 0, tzinfo=dt.UTC)
    # A wall time seen twice when clocks go back is the first of the two.
    assert utc.apply(dt.datetime(2021, 10, 31, 2, 30), berlin, KEY) == dt.datetime(
        2021, 10, 31, 0, 30, tzinfo=dt.UTC)
    # A wall time skipped when clocks go forward takes the offset in force before.
    assert utc.apply(dt.datetime(2021, 3, 28, 2, 30), berlin, KEY) == dt.datetime(
        2021, 3, 28, 1, 30, tzinfo=dt.UTC)
    # A value with a real offset is already an instant: only converted.
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert utc.apply(dt.datetime(2021, 1, 1, 12, 0, tzinfo=plus_two), berlin, KEY) == \
        dt.datetime(2021, 1, 1, 10, 0, tzinfo=dt.UTC)


def test_utc_refuses_a_time_outside_the_supported_dates() -> None:
    utc = REGISTRY[("utc", 1)]
    with pytest.raises(TransformError, match="outside"):
        utc.apply(dt.datetime(1, 1, 1, 1, 0), {"from_zone": "Asia/Tokyo"}, KEY)


def test_truncate_counts_characters_not_bytes() -> None:
    assert REGISTRY[("truncate", 1)].apply("⛴️航海🌊x", {"length": 4}, KEY) == "⛴️航海"


# Properties.

ZONES = ["Asia/Shanghai", "Europe/Berlin", "America/St_Johns", "Pacific/Chatham", "UTC"]
_AWARE_ZONES = st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=-9, minutes=-30)),
                                *(ZoneInfo(zone) for zone in ZONES)])
_DECIMALS = st.builds(lambda digits, exponent: Decimal(digits).scaleb(exponent),
                      st.integers(-10**30, 10**30), st.integers(-40, 40))
_DATETIMES = st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1),
                          timezones=st.none() | _AWARE_ZONES)
VALUES: dict[ColumnKind, st.SearchStrategy[Value]] = {
    ColumnKind.TEXT: st.text(max_size=40),
    ColumnKind.BYTES: st.binary(max_size=40),
    ColumnKind.DECIMAL: _DECIMALS,
    ColumnKind.FLOAT: st.floats(allow_nan=False, allow_infinity=False),
    ColumnKind.INTEGER: st.integers(-2**63, 2**64 - 1),
    ColumnKind.DATETIME: _DATETIMES,
    ColumnKind.BOOL: st.booleans(),
    ColumnKind.DATE: st.dates(),
}
KIND_TYPES = {ColumnKind.TEXT: str, ColumnKind.BYTES: bytes, ColumnKind.DECIMAL: Decimal,
              ColumnKind.FLOAT: float, ColumnKind.INTEGER: int, ColumnKind.DATETIME: dt.datetime,
              ColumnKind.BOOL: bool, ColumnKind.DATE: dt.date}
_FACTORS = st.builds(lambda digits, exponent: str(Decimal(digits).scaleb(exponent)),
                     st.integers(-10**12, 10**12), st.integers(-12, 12))
ARGS: dict[str, st.SearchStrategy[dict[str, object]]] = {
    "truncate": st.builds(lambda n: {"length": n}, st.integers(1, 60)),
    "round": st.builds(lambda n: {"places": n}, st.integers(0, 30)),
    "scale": st.builds(lambda factor: {"factor": factor}, _FACTORS),
    "hmac_mask": st.just({}) | st.builds(lambda n: {"length": n}, st.integers(8, 64)),
    "utc": st.just({}) | st.builds(lambda zone: {"from_zone": zone}, st.sampled_from(ZONES)),
}
CASES = [(transform, kind) for transform in REGISTRY.values()
         for kind in sorted(transform.kinds, key=lambda kind: kind.value) if kind in VALUES]


def _case(data: st.DataObject, transform: Transform, kind: ColumnKind,
          ) -> tuple[Value, TransformSpec]:
    args = data.draw(ARGS.get(transform.name, st.just({})))
    drawn = spec("c", transform.ref(), args)
    if kind is ColumnKind.INTEGER and validate_transform(drawn, kind):
        drawn = spec("c", transform.ref(), {"factor": "-7"})
    return data.draw(VALUES[kind]), drawn


@pytest.mark.parametrize(("transform", "kind"), CASES,
                         ids=[f"{t.ref()}-{k.value}" for t, k in CASES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_each_transform_is_deterministic_and_keeps_its_kind(
        transform: Transform, kind: ColumnKind, data: st.DataObject) -> None:
    value, drawn = _case(data, transform, kind)
    assert validate_transform(drawn, kind) == []
    try:
        first = transform.apply(value, drawn.args, KEY)
    except TransformError as refused:  # a result out of range: refused the same way again
        with pytest.raises(TransformError, match=str(refused)):
            transform.apply(value, drawn.args, KEY)
        return
    assert same(first, transform.apply(value, drawn.args, KEY))
    assert first is None or type(first) is KIND_TYPES[kind]
    if isinstance(first, dt.datetime):
        assert first.tzinfo is dt.UTC


IDEMPOTENT = [(transform, kind) for transform, kind in CASES
              if transform.name in ("trim", "lower", "upper", "utc", "null", "round")]


@pytest.mark.parametrize(("transform", "kind"), IDEMPOTENT,
                         ids=[f"{t.ref()}-{k.value}" for t, k in IDEMPOTENT])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_applying_again_changes_nothing(transform: Transform, kind: ColumnKind,
                                        data: st.DataObject) -> None:
    value, drawn = _case(data, transform, kind)
    # Reading a wall-clock time in a zone happens once: a second reading would shift it again.
    args = {} if transform.name == "utc" else drawn.args
    try:
        once = transform.apply(value, args, KEY)
    except TransformError:  # out of range: refused, never changed
        return
    assert same(transform.apply(once, args, KEY), once)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(value=st.text(min_size=6, max_size=40) | st.binary(min_size=6, max_size=40),
       length=st.integers(8, 64))
def test_hmac_mask_never_contains_its_input(value: str | bytes, length: int) -> None:
    # Shorter inputs are left out: any 5-character string of hex digits turns up in some masks.
    mask = REGISTRY[("hmac_mask", 1)].apply(value, {"length": length}, KEY)
    assert isinstance(mask, type(value)) and len(mask) == length
    text = mask if isinstance(mask, str) else mask.decode("ascii")
    assert set(text) <= set("0123456789abcdef")
    assert value not in mask  # type: ignore[operator]


WIDE = Context(prec=300)
"""Wide enough to do the tests' arithmetic on these values without rounding."""


@settings(max_examples=100, deadline=None)
@given(value=_DECIMALS, factor=_FACTORS)
def test_scale_is_exact(value: Decimal, factor: str) -> None:
    scaled = REGISTRY[("scale", 1)].apply(value, {"factor": factor}, KEY)
    assert isinstance(scaled, Decimal)
    assert scaled == WIDE.multiply(value, Decimal(factor))
    assert scaled.as_tuple().exponent == WIDE.multiply(value, Decimal(factor)).as_tuple().exponent


@settings(max_examples=100, deadline=None)
@given(value=_DECIMALS, places=st.integers(0, 30))
def test_round_keeps_a_decimal_within_half_a_unit(value: Decimal, places: int) -> None:
    if value.adjusted() + 1 + places > MAX_DECIMAL_DIGITS:  # more digits than a column holds
        with pytest.raises(TransformError, match="out of range"):
            REGISTRY[("round", 1)].apply(value, {"places": places}, KEY)
        return
    rounded = REGISTRY[("round", 1)].apply(value, {"places": places}, KEY)
    assert isinstance(rounded, Decimal)
    assert rounded.as_tuple().exponent == -places
    assert WIDE.subtract(rounded, value).copy_abs() <= Decimal(1).scaleb(-places) / 2
