"""Type-tagged evidence values shown to people and read back: exact, type-checked, and the
record key text round-trips to the RecordKey it came from."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.change_event import RecordKey
from tidesync.domain.evidence import (
    EvidenceValueError,
    decode_value,
    display_text,
    evidence_digest,
    parse_display,
    parse_record_key,
)
from tidesync.domain.values import BitString, JsonText, canonical_value

values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False), st.decimals(allow_nan=False, allow_infinity=False, places=4),
    st.text(), st.binary(max_size=64),
    st.datetimes(timezones=st.just(dt.UTC)), st.dates(), st.times(),
    st.builds(lambda n: JsonText(str(n)), st.integers()),
    st.integers(1, 64).flatmap(lambda n: st.builds(BitString, st.just(n),
                                                   st.integers(0, 2**n - 1))),
)


@given(values)
def test_display_text_reads_back_to_the_same_value(value):
    tagged = canonical_value(value)
    assert canonical_value(decode_value(tagged)) == tagged
    assert parse_display(tagged, display_text(tagged)) == tagged


def test_display_text_is_exact():
    assert display_text(canonical_value(Decimal("10.50"))) == "10.50"
    assert display_text(canonical_value(None)) is None
    assert display_text(canonical_value(True)) == "true"
    assert display_text(canonical_value(BitString(4, 5))) == "0101"
    assert display_text(canonical_value(dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC))) == (
        "2026-01-02T03:04:00+00:00")


@pytest.mark.parametrize(("sample", "text"), [
    (["int", "1"], "seven"), (["decimal", "1.0"], "NaN"), (["bool", True], "maybe"),
    (["bytes", "AA=="], "!!"), (["datetime", "2026-01-01T00:00:00+00:00"], "2026-01-01T00:00"),
    (["bits", 4, "1"], "10101"), (["json", "{}"], "{"), (["x", "1"], "1"),
])
def test_text_that_does_not_fit_the_column_type_is_refused(sample, text):
    with pytest.raises(EvidenceValueError):
        parse_display(sample, text)


def test_digests_are_scoped_to_a_case_and_column():
    value = canonical_value(5)
    assert evidence_digest("c1", "qty", value) == evidence_digest("c1", "qty", value)
    assert evidence_digest("c1", "qty", value) != evidence_digest("c2", "qty", value)
    assert evidence_digest("c1", "qty", value) != evidence_digest("c1", "min", value)


def test_a_record_key_round_trips_through_its_canonical_text():
    key = RecordKey.of("shipdb", "items", [("id", 7), ("region", "north")])
    assert parse_record_key(key.canonical()) == key
    for broken in ("", "[]", key.canonical() + "x", key.canonical().replace("7", '"7"')):
        with pytest.raises(EvidenceValueError):
            parse_record_key(broken)
