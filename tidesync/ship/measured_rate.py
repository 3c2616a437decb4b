"""The uplink's rate as the ship's own uploads measure it, to pace a ship that has no uplink
limit (neither `[ship] uplink_rate_bytes_per_sec` nor a limit the shore set for the node).

Without a limit an upload's body is written at once. What the link cannot carry yet waits in
the ship's socket and in the modem's queue, each request in flight adds to it, and all of it is
lost when an outage or a reset cuts the connections. Written at about the rate the link
delivers, the bytes wait in the ship instead, where a cut does not lose them.

The rate is measured the way BBR measures a path's bottleneck: when an upload is answered, the
bytes answered since the answer before it started, over the time since that answer, is one
sample of the delivery rate (from its own start when nothing else was on its way). The pace is
the best sample of the last `window_seconds` (a max filter: outages, retransmission stalls and
idle turns only ever lower a sample) times a gain that goes round 1.25 (ask the link for more),
0.75 (drain what that queued) and 1 for six answers. An upload whose body holds less than half
a second at the pace says how much the ship had to send, not what the link takes: it counts
only when it raises the best sample.

With fewer than `min_samples` in the window (at the start, after a quiet spell or an outage of
more than the window) the link is measured afresh, the way TCP starts: bodies go at twice the
best sample so far, and before any at `INITIAL_BYTES` per round trip (the shortest answer to a
small request; a second before any). Written at once instead, a start would put its first
requests' bodies, several round trips of the link, in the modem's queue, where a reset or an
outage in the first seconds cuts all of it.

Pure: the caller passes the monotonic time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
STARTUP_GAIN = 2.0
INITIAL_BYTES = 64 * 1024
"""Bytes per round trip before anything is measured."""
SMALL_REQUEST_BYTES = 2048
"""A request body at most this large measures the round trip (its own transfer is negligible)."""
_MIN_INTERVAL_SECONDS = 0.5
"""A sample over less time than this is mostly answers bunched by a stall: none is taken."""
_APP_LIMITED_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was answered when an upload started, and since when."""

    delivered: int
    since: float


@dataclass
class MeasuredRate:
    """Delivery-rate samples of answered uploads and the pace they give."""

    window_seconds: float = 20.0
    min_samples: int = 3
    delivered: int = 0
    """Body bytes of every upload answered so far."""
    in_flight: int = 0
    _answered_at: float | None = None
    _round_trip: float | None = None
    _turn: int = 0
    _samples: deque[tuple[float, float]] = field(default_factory=deque)

    def started(self, now: float) -> Snapshot:
        """An upload starts now."""
        since = now if self.in_flight == 0 or self._answered_at is None else self._answered_at
        self.in_flight += 1
        return Snapshot(self.delivered, since)

    def round_trip(self, seconds: float) -> None:
        """A small request was answered `seconds` after it started."""
        if self._round_trip is None or seconds < self._round_trip:
            self._round_trip = seconds

    def ended(self, snapshot: Snapshot, size: int | None, now: float) -> None:
        """The upload that started at `snapshot` was answered (`size`: its body's bytes) or
        failed (None)."""
        self.in_flight = max(0, self.in_flight - 1)
        if size is None:
            return
        self.delivered += size
        interval = now - snapshot.since
        if interval >= _MIN_INTERVAL_SECONDS:
            sample = (self.delivered - snapshot.delivered) / interval
            best = self._best(now)
            if best is None or size >= _APP_LIMITED_SECONDS * best or sample > best:
                self._samples.append((now, sample))
        self._answered_at = now
        self._turn = (self._turn + 1) % len(GAINS)

    def rate(self, now: float) -> float:
        """Bytes per second to pace bodies at."""
        best = self._best(now)
        if best is not None and len(self._samples) >= self.min_samples:
            return best * GAINS[self._turn]
        start = INITIAL_BYTES / (self._round_trip or 1.0)
        return start if best is None else max(start, STARTUP_GAIN * best)

    def _best(self, now: float) -> float | None:
        while self._samples and self._samples[0][0] < now - self.window_seconds:
            self._samples.popleft()
        return max(sample for _, sample in self._samples) if self._samples else None
