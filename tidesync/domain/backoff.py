"""Full-jitter exponential backoff (§9.5): initial 1 s, cap 5 min, Retry-After honoured.

Pure: the caller passes the random draw, so schedules are reproducible in tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial_seconds: float = 1.0
    cap_seconds: float = 300.0
    max_attempts: int = 10

    def ceiling(self, attempt: int) -> float:
        """Upper bound of the delay before retry number `attempt` (1-based)."""
        exponent = max(attempt, 1) - 1
        if exponent >= 64:
            return self.cap_seconds
        return min(self.cap_seconds, self.initial_seconds * float(2 ** exponent))

    def delay(self, attempt: int, draw: float, retry_after: float | None = None) -> float:
        """Full jitter: uniform in [0, ceiling) given `draw` in [0, 1); a server's
        Retry-After is a floor, never shortened by jitter."""
        if not 0.0 <= draw < 1.0:
            raise ValueError("draw must be in [0, 1)")
        jittered = draw * self.ceiling(attempt)
        if retry_after is not None and retry_after > jittered:
            return min(retry_after, self.cap_seconds)
        return jittered

    def probe_delay(self, attempt: int, draw: float) -> float:
        """Equal jitter: uniform in [ceiling / 2, ceiling) — for probing a link believed down,
        where probes must stay spread out (never back to back) and never wait past the cap."""
        if not 0.0 <= draw < 1.0:
            raise ValueError("draw must be in [0, 1)")
        ceiling = self.ceiling(attempt)
        return ceiling / 2 + draw * ceiling / 2

    def exhausted(self, attempt: int) -> bool:
        return attempt >= self.max_attempts
