"""Full-jitter backoff: bounded by the cap, growing with attempts, honouring Retry-After."""

from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.backoff import Backoff

draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(st.integers(min_value=1, max_value=10_000), draws)
def test_delay_is_within_zero_and_the_cap(attempt, draw):
    delay = Backoff().delay(attempt, draw)
    assert 0.0 <= delay < 300.0


def test_ceiling_doubles_from_one_second_up_to_five_minutes():
    backoff = Backoff()
    assert [backoff.ceiling(n) for n in range(1, 11)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


@given(st.integers(min_value=1, max_value=50), draws, st.floats(0, 1000))
def test_retry_after_is_a_floor_but_never_past_the_cap(attempt, draw, retry_after):
    delay = Backoff().delay(attempt, draw, retry_after)
    assert delay >= min(retry_after, 300.0)
    assert delay <= 300.0


def test_exhaustion_after_max_attempts():
    assert not Backoff(max_attempts=3).exhausted(2)
    assert Backoff(max_attempts=3).exhausted(3)


@given(st.integers(min_value=1, max_value=10_000), draws)
def test_probe_delays_stay_between_half_the_ceiling_and_the_cap(attempt, draw):
    probing = Backoff(initial_seconds=1.0, cap_seconds=30.0)
    delay = probing.probe_delay(attempt, draw)
    assert probing.ceiling(attempt) / 2 <= delay <= 30.0
    assert delay >= 0.5
