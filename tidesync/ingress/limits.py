"""Request limits of the sync API: a global in-flight cap, and per node a request-rate token
bucket, a concurrency cap and quotas of body bytes per minute and per day. Beyond any of them
the answer is 429 with Retry-After (§20.4).

Used from the event loop only, so the counters need no lock.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.token_bucket import TokenBucket


class LimitReason(enum.StrEnum):
    SERVER_BUSY = "SERVER_BUSY"
    RATE_LIMITED = "RATE_LIMITED"
    TOO_MANY_CONCURRENT_REQUESTS = "TOO_MANY_CONCURRENT_REQUESTS"
    BYTE_QUOTA_MINUTE = "BYTE_QUOTA_MINUTE"
    BYTE_QUOTA_DAY = "BYTE_QUOTA_DAY"


class LimitExceeded(TidesyncError):
    code = ErrorCode.LIMIT_EXCEEDED
    def __init__(self, reason: LimitReason, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


@dataclass(frozen=True)
class Limits:
    requests_per_second: float
    burst: float
    node_concurrency: int
    in_flight: int
    bytes_per_minute: int = 64 * 1024 * 1024
    bytes_per_day: int = 8 * 1024 * 1024 * 1024

    def byte_quotas(self) -> tuple[tuple[LimitReason, float, float], ...]:
        """Each byte quota: its reason code, refill rate (bytes/s) and size."""
        return ((LimitReason.BYTE_QUOTA_MINUTE, self.bytes_per_minute / 60,
                 self.bytes_per_minute),
                (LimitReason.BYTE_QUOTA_DAY, self.bytes_per_day / 86_400, self.bytes_per_day))


class RequestLimiter:
    def __init__(self, limits: Limits, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._monotonic = monotonic
        self._in_flight = 0
        self._node_in_flight: dict[str, int] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._byte_buckets: dict[tuple[str, LimitReason], TokenBucket] = {}

    @contextmanager
    def request_slot(self) -> Iterator[None]:
        """One of the server's in-flight requests, refused when all are taken."""
        if self._in_flight >= self.limits.in_flight:
            raise LimitExceeded(LimitReason.SERVER_BUSY, "server is at its request capacity", 1)
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1

    @contextmanager
    def node_slot(self, node_id: str) -> Iterator[None]:
        """One of the node's concurrent requests, paid for with a token of its bucket."""
        running = self._node_in_flight.get(node_id, 0)
        if running >= self.limits.node_concurrency:
            raise LimitExceeded(LimitReason.TOO_MANY_CONCURRENT_REQUESTS,
                                f"at most {self.limits.node_concurrency} concurrent requests", 1)
        self._take_token(node_id)
        self._node_in_flight[node_id] = running + 1
        try:
            yield
        finally:
            self._release(node_id)

    def charge_bytes(self, node_id: str, size: int) -> None:
        """Spend a request body's bytes from the node's quotas; LimitExceeded (nothing spent)
        when either quota does not hold them now."""
        now = self._monotonic()
        takes = []
        for reason, rate, quota in self.limits.byte_quotas():
            key = (node_id, reason)
            bucket = self._byte_buckets.get(key) or TokenBucket.full(rate, quota, now)
            take = bucket.take(size, now)
            if not take.granted:
                raise LimitExceeded(reason, f"node byte quota reached ({reason.value})",
                                    max(1, math.ceil(take.retry_after)))
            takes.append((key, take.bucket))
        self._byte_buckets.update(takes)

    def reconfigure(self, limits: Limits) -> None:
        """New limits; each node keeps the tokens it has (never a fresh burst)."""
        now = self._monotonic()
        self.limits = limits
        self._buckets = {
            node: bucket.reconfigured(limits.requests_per_second, limits.burst, now)
            for node, bucket in self._buckets.items()
        }
        quotas = {reason: (rate, quota) for reason, rate, quota in limits.byte_quotas()}
        self._byte_buckets = {
            key: bucket.reconfigured(*quotas[key[1]], now)
            for key, bucket in self._byte_buckets.items()
        }

    def _take_token(self, node_id: str) -> None:
        now = self._monotonic()
        bucket = self._buckets.get(node_id) or TokenBucket.full(
            self.limits.requests_per_second, self.limits.burst, now)
        take = bucket.take(1, now)
        self._buckets[node_id] = take.bucket
        if not take.granted:
            raise LimitExceeded(LimitReason.RATE_LIMITED, "request rate limit reached",
                                max(1, math.ceil(take.retry_after)))

    def _release(self, node_id: str) -> None:
        running = self._node_in_flight[node_id] - 1
        if running:
            self._node_in_flight[node_id] = running
        else:
            del self._node_in_flight[node_id]
