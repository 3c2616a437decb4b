"""How much the ship puts on the link: the uploads' measured goodput and round trip, and from
them the size of the next request and whether another may start.

A request carries about `request_seconds` of link time at the measured goodput (within
`[min_bytes, max_bytes]`), and requests go side by side while fewer than one bandwidth-delay
product plus one request are in flight, so the link never idles waiting for an answer and an
interruption costs at most about one request. Pure: the caller passes the monotonic time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_SAMPLE_SECONDS = 2.0
"""Busy time over which one goodput sample is taken."""
_WEIGHT = 0.5
"""Weight of a new goodput sample against the estimate so far."""
_RTT_SAMPLES = 16


@dataclass(frozen=True)
class PaceSettings:
    request_seconds: float = 1.0
    initial_bytes: int = 64 * 1024
    min_bytes: int = 16 * 1024
    max_bytes: int = 4 * 1024 * 1024


@dataclass
class LinkPace:
    """Goodput (bytes answered per second while uploads are in flight) and round trip (the
    shortest answer time less the request's own transfer), from the uploads themselves."""

    settings: PaceSettings = field(default_factory=PaceSettings)
    rate: float | None = None
    """Estimated goodput, bytes per second (None until measured)."""
    in_flight: int = 0
    in_flight_bytes: int = 0
    _window_start: float = 0.0
    _window_bytes: int = 0
    _durations: deque[tuple[float, int]] = field(default_factory=lambda: deque(
        maxlen=_RTT_SAMPLES))

    def request_bytes(self) -> int:
        """The compressed size the next request should have."""
        s = self.settings
        if self.rate is None:
            wanted = float(s.initial_bytes)
        else:
            wanted = self.rate * max(s.request_seconds, self.rtt())
        return int(min(s.max_bytes, max(s.min_bytes, wanted)))

    def rtt(self) -> float:
        """The round trip: the shortest recent answer time less the request's transfer."""
        if not self._durations:
            return 0.0
        rate = self.rate or 0.0
        return max(0.0, min(seconds - (size / rate if rate > 0 else 0.0)
                            for seconds, size in self._durations))

    def may_start(self, slots: int) -> bool:
        """Whether another request may go now: a free slot, and less than one
        bandwidth-delay product plus one request in flight."""
        if self.in_flight >= slots:
            return False
        if self.in_flight == 0 or self.rate is None:
            return True
        return self.in_flight_bytes < self.rate * self.rtt() + self.request_bytes()

    def started(self, size: int, now: float) -> None:
        if self.in_flight == 0:
            self._window_start, self._window_bytes = now, 0
        self.in_flight += 1
        self.in_flight_bytes += size

    def ended(self, size: int, now: float, seconds: float, answered: bool) -> None:
        """A request of `size` bytes ended after `seconds`; `answered`: it got its answer
        (its bytes count towards goodput)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.in_flight_bytes = max(0, self.in_flight_bytes - size)
        if not answered:  # an outage or a reset: measure afresh from here
            self._window_start, self._window_bytes = now, 0
            return
        self._window_bytes += size
        self._durations.append((max(0.0, seconds), size))
        busy = now - self._window_start
        if self._window_bytes and (busy >= _SAMPLE_SECONDS or self.in_flight == 0) and busy > 0:
            sample = self._window_bytes / busy
            self.rate = sample if self.rate is None else (
                _WEIGHT * sample + (1 - _WEIGHT) * self.rate)
            self._window_start, self._window_bytes = now, 0

    def too_large(self) -> None:
        """The shore refused a request as too large: aim at half the size."""
        if self.rate is not None:
            self.rate /= 2
        self.settings = PaceSettings(self.settings.request_seconds,
                                     max(self.settings.min_bytes, self.settings.initial_bytes // 2),
                                     self.settings.min_bytes,
                                     max(self.settings.min_bytes, self.settings.max_bytes // 2))
