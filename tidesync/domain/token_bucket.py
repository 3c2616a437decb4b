"""A token bucket (§13.1): a long-term rate and a burst, refilled by the caller's clock.

Pure and immutable: every operation takes `now` and returns a new bucket. A configuration change
keeps the tokens already earned (capped by the new burst); it never refills to a fresh burst.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

_SLACK_SECONDS = 1e-6
"""Refill time forgiven to float rounding, so that waiting exactly `retry_after` is enough."""


@dataclass(frozen=True, slots=True)
class Take:
    """The outcome of asking for tokens: the bucket afterwards and, if refused, how long to wait."""

    bucket: TokenBucket
    granted: bool
    retry_after: float


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """`rate` tokens per second up to `burst` tokens; `updated_at` is the clock time (seconds,
    any monotonic origin) that `tokens` refers to.

    A cost larger than the burst is granted from a full bucket and leaves a debt that later
    refills pay off, so an oversized request waits for its share of the rate instead of never
    passing.
    """

    rate: float
    burst: float
    tokens: float
    updated_at: float

    def __post_init__(self) -> None:
        _check_limits(self.rate, self.burst)
        if self.tokens > self.burst:
            raise ValueError("tokens cannot exceed the burst")

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        """A bucket that can spend its whole burst at once."""
        return cls(rate, burst, burst, now)

    def refilled(self, now: float) -> TokenBucket:
        """The bucket at `now`; a clock that goes backwards refills nothing."""
        elapsed = max(0.0, now - self.updated_at)
        tokens = min(self.burst, self.tokens + elapsed * self.rate)
        return dataclasses.replace(self, tokens=tokens, updated_at=max(now, self.updated_at))

    def take(self, cost: float, now: float) -> Take:
        """Spend `cost` tokens if the bucket holds them (a full one for costs above the burst)."""
        if cost < 0:
            raise ValueError("cost must be >= 0")
        bucket = self.refilled(now)
        needed = min(cost, bucket.burst)
        if bucket.tokens + bucket.rate * _SLACK_SECONDS >= needed:
            return Take(dataclasses.replace(bucket, tokens=bucket.tokens - cost), True, 0.0)
        return Take(bucket, False, (needed - bucket.tokens) / bucket.rate)

    def reconfigured(self, rate: float, burst: float, now: float) -> TokenBucket:
        """The same bucket under a new rate and burst: earned tokens stay, capped by the burst."""
        _check_limits(rate, burst)
        bucket = self.refilled(now)
        return TokenBucket(rate, burst, min(bucket.tokens, burst), bucket.updated_at)


def _check_limits(rate: float, burst: float) -> None:
    if not rate > 0:
        raise ValueError("rate must be > 0")
    if not burst >= 1:
        raise ValueError("burst must be >= 1")
