"""The token bucket (§13.1): rate, burst, refill by the caller's clock, smooth reconfiguration."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.token_bucket import TokenBucket

rates = st.floats(min_value=0.01, max_value=1e6, allow_nan=False)
bursts = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)
costs = st.floats(min_value=0.0, max_value=2e6, allow_nan=False)
gaps = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)
steps = st.lists(st.tuples(gaps, costs), max_size=40)


def test_a_full_bucket_spends_its_burst_then_waits_for_the_rate():
    bucket = TokenBucket.full(rate=2.0, burst=3.0, now=0.0)
    for _ in range(3):
        take = bucket.take(1, now=0.0)
        assert take.granted
        bucket = take.bucket
    refused = bucket.take(1, now=0.0)
    assert not refused.granted
    assert refused.retry_after == pytest.approx(0.5)
    assert bucket.take(1, now=0.5).granted


def test_a_cost_above_the_burst_passes_from_a_full_bucket_and_leaves_a_debt():
    bucket = TokenBucket.full(rate=10.0, burst=100.0, now=0.0)
    take = bucket.take(250, now=0.0)
    assert take.granted and take.bucket.tokens == pytest.approx(-150)
    late = take.bucket.take(1, now=10.0)  # 100 tokens refilled: still in debt
    assert not late.granted
    assert late.retry_after == pytest.approx(5.1)


def test_reconfiguring_keeps_tokens_and_never_refills():
    bucket = TokenBucket.full(rate=1.0, burst=10.0, now=0.0).take(8, now=0.0).bucket
    faster = bucket.reconfigured(rate=100.0, burst=1000.0, now=0.0)
    assert faster.tokens == pytest.approx(2.0)
    smaller = TokenBucket.full(rate=1.0, burst=10.0, now=0.0).reconfigured(1.0, 4.0, now=0.0)
    assert smaller.tokens == 4.0


def test_invalid_limits_are_refused():
    for rate, burst in ((0.0, 1.0), (-1.0, 5.0), (1.0, 0.5)):
        with pytest.raises(ValueError):
            TokenBucket.full(rate, burst, 0.0)
    with pytest.raises(ValueError):
        TokenBucket.full(1.0, 1.0, 0.0).take(-1, 0.0)


@given(rates, bursts, steps)
def test_tokens_never_exceed_the_burst(rate: float, burst: float,
                                       plan: list[tuple[float, float]]) -> None:
    bucket, now = TokenBucket.full(rate, burst, 0.0), 0.0
    for gap, cost in plan:
        now += gap
        bucket = bucket.take(cost, now).bucket
        assert bucket.tokens <= burst
        assert bucket.refilled(now + 1e6).tokens <= burst


@given(rates, bursts, steps)
def test_granted_cost_stays_within_burst_plus_rate_times_time(
    rate: float, burst: float, plan: list[tuple[float, float]],
) -> None:
    bucket, now, granted, largest = TokenBucket.full(rate, burst, 0.0), 0.0, 0.0, 0.0
    for gap, cost in plan:
        now += gap
        take = bucket.take(cost, now)
        bucket = take.bucket
        if take.granted:
            granted += cost
            largest = max(largest, cost)
    # Each take forgives a microsecond of refill to float rounding.
    allowance = burst + rate * (now + 1e-6 * len(plan)) + max(0.0, largest - burst)
    assert granted <= allowance * (1 + 1e-9) + 1e-6


@given(rates, bursts, steps, costs)
def test_waiting_retry_after_is_enough(rate: float, burst: float,
                                       plan: list[tuple[float, float]], cost: float) -> None:
    bucket, now = TokenBucket.full(rate, burst, 0.0), 0.0
    for gap, spend in plan:
        now += gap
        bucket = bucket.take(spend, now).bucket
    take = bucket.take(cost, now)
    if not take.granted:
        assert take.retry_after > 0
        assert take.bucket.take(cost, now + take.retry_after).granted


@given(rates, bursts, rates, bursts, steps, gaps)
def test_reconfiguration_never_grants_a_fresh_burst(
    rate: float, burst: float, new_rate: float, new_burst: float,
    plan: list[tuple[float, float]], gap: float,
) -> None:
    bucket, now = TokenBucket.full(rate, burst, 0.0), 0.0
    for step, spend in plan:
        now += step
        bucket = bucket.take(spend, now).bucket
    now += gap
    before = bucket.refilled(now).tokens
    after = bucket.reconfigured(new_rate, new_burst, now).tokens
    assert after <= before
    assert after <= new_burst
    assert after == min(before, new_burst)


@given(rates, bursts, gaps)
def test_a_clock_going_backwards_refills_nothing(rate: float, burst: float, gap: float) -> None:
    bucket = TokenBucket.full(rate, burst, 100.0).take(burst, 100.0).bucket
    assert bucket.refilled(100.0 - gap).tokens == bucket.tokens
