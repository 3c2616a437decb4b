"""How much the ship puts on the link: the uploads' measured goodput and round trip, and from
them the size of the next request and whether another may start.

Goodput is only what the uploads achieve, so a ship that sends small requests measures a slow
link and would keep sending small ones. The pace therefore starts the way TCP does: while the
goodput it measures still rises by a quarter from one sample to the next, every full-sized
answered request doubles the request size (the link was not yet full). Once the goodput stops
rising (two samples in a row), a request carries `request_seconds` of link time at the best
goodput of the last samples, a quarter more so that the requests in flight keep the link busy
and the samples keep measuring the link rather than the ship. The start ends at the latest when
an answer took `max_request_seconds` (2 s): answers of side-by-side requests wait behind each
other's bytes, so a longer limit let the start double past a second of link time per request,
and a reset loses what a request still had on its way. A request never carries more than
`max_request_seconds` of link time, so an interruption costs at most that. Up to `slots`
requests go side by side: with a second of link time each, three of them hold more than the
link's bandwidth-delay product and its retransmission stalls, so the link never idles while
answers travel. (In-flight bytes are not also held to one bandwidth-delay product: with an
estimate that starts low, that cap keeps the requests in flight too few to ever measure more.)

Pure: the caller passes the monotonic time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_SAMPLE_SECONDS = 2.0
"""Busy time over which one goodput sample is taken."""
_RATE_SAMPLES = 6
"""Goodput samples the best rate is taken from (a max filter: outages and idle turns only ever
lower a sample)."""
_RTT_SAMPLES = 16
_GROWTH = 1.25
"""A sample this much above the best one means the link took more: keep growing."""
_PLATEAU_SAMPLES = 2
_HEADROOM = 1.25


@dataclass(frozen=True)
class PaceSettings:
    request_seconds: float = 1.0
    initial_bytes: int = 64 * 1024
    min_bytes: int = 16 * 1024
    max_bytes: int = 4 * 1024 * 1024
    max_request_seconds: float = 2.0


@dataclass
class LinkPace:
    """Goodput (bytes answered per second while uploads are in flight) and round trip (the
    shortest answer time less the request's own transfer), from the uploads themselves."""

    settings: PaceSettings = field(default_factory=PaceSettings)
    in_flight: int = 0
    in_flight_bytes: int = 0
    starting: bool = True
    """Still finding the link's rate: full-sized answered requests double the size."""
    _size: float = 0.0
    _plateau: int = 0
    _window_start: float = 0.0
    _window_bytes: float = 0.0
    _samples: deque[float] = field(default_factory=lambda: deque(maxlen=_RATE_SAMPLES))
    _durations: deque[tuple[float, int]] = field(default_factory=lambda: deque(
        maxlen=_RTT_SAMPLES))

    def __post_init__(self) -> None:
        self._size = float(self.settings.initial_bytes)

    @property
    def rate(self) -> float | None:
        """The best recent goodput, bytes per second (None until measured)."""
        return max(self._samples) if self._samples else None

    def request_bytes(self) -> int:
        """The compressed size the next request should have."""
        s, rate = self.settings, self.rate
        wanted = self._size
        if not self.starting and rate is not None:
            wanted = rate * min(s.request_seconds, s.max_request_seconds) * _HEADROOM
        return int(min(s.max_bytes, max(s.min_bytes, wanted)))

    def rtt(self) -> float:
        """The round trip: the shortest recent answer time less the request's transfer."""
        if not self._durations:
            return 0.0
        rate = self.rate or 0.0
        return max(0.0, min(seconds - (size / rate if rate > 0 else 0.0)
                            for seconds, size in self._durations))

    def may_start(self, slots: int) -> bool:
        """Whether another request may go now: a free slot."""
        return self.in_flight < slots

    def started(self, size: int, now: float) -> None:
        if self.in_flight == 0:
            self._window_start, self._window_bytes = now, 0.0
        self.in_flight += 1
        self.in_flight_bytes += size

    def ended(self, size: int, now: float, seconds: float, answered: bool) -> None:
        """A request of `size` bytes ended after `seconds`; `answered`: it got its answer
        (its bytes count towards goodput)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.in_flight_bytes = max(0, self.in_flight_bytes - size)
        if not answered:  # an outage or a reset: measure afresh from here
            self._window_start, self._window_bytes = now, 0.0
            return
        # A request that began before this sample's window counts with the share of its
        # bytes that crossed within it (as if they went evenly), never more.
        began = now - max(0.0, seconds)
        share = 1.0 if began >= self._window_start or seconds <= 0 else max(
            0.0, (now - self._window_start) / seconds)
        self._window_bytes += size * min(1.0, share)
        self._durations.append((max(0.0, seconds), size))
        if self.starting and seconds > self.settings.max_request_seconds:
            self.starting = False  # a request took the longest it may: big enough
        elif self.starting and size >= 0.9 * self.request_bytes():
            self._size = min(float(self.settings.max_bytes), 2 * self._size)
        busy = now - self._window_start
        if self._window_bytes and busy >= _SAMPLE_SECONDS:
            self._sample(self._window_bytes / busy)
            self._window_start, self._window_bytes = now, 0.0

    def _sample(self, goodput: float) -> None:
        best = self.rate
        self._samples.append(goodput)
        if not self.starting:
            return
        if best is None or goodput >= _GROWTH * best:
            self._plateau = 0
            return
        self._plateau += 1
        if self._plateau >= _PLATEAU_SAMPLES:
            self.starting = False

    def too_large(self) -> None:
        """The shore refused a request as too large: aim at half the size."""
        self.starting = False
        self._size = max(float(self.settings.min_bytes), self._size / 2)
        if self._samples:
            self._samples = deque((rate / 2 for rate in self._samples), maxlen=_RATE_SAMPLES)
        self.settings = PaceSettings(self.settings.request_seconds,
                                     max(self.settings.min_bytes, self.settings.initial_bytes // 2),
                                     self.settings.min_bytes,
                                     max(self.settings.min_bytes, self.settings.max_bytes // 2),
                                     self.settings.max_request_seconds)
