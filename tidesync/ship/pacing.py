"""The ship's uplink limit (`[ship] uplink_rate_bytes_per_sec`, `uplink_burst_bytes`) applied
to the bytes as they are written, not to whole requests.

A limit that admits whole requests lets a request of a second or more of link time leave at
once: the bytes wait in the ship's socket and in the modem's queue, delay every other user of
the link, and are lost when an outage or a reset cuts the connection. Written piece by piece
at the limit, with at most the burst written ahead of it, they leave about as fast as the link
takes them: the queue stays short, and a cut loses little more than what was already on its
way. Set the rate to the satellite plan's uplink rate (or the share tidesync may use) and the
burst to a few round trips of it, e.g. 32 KiB at 128 KiB/s.

Shared by every upload on its way (each on its own thread): the limit holds for their sum, and
the bodies take turns, a piece each, each on its own connection. On a lossy link a segment
that comes late holds back only its own connection's bytes behind it, so what a connection
holds on the link grows with its share of the rate: at 5 % loss, one retransmission second
and 300 ms each way, one connection at the full rate holds about 1.2 s of the rate, three
taking turns hold about 0.9 s together and 0.3 s each. An outage then cuts a quarter less,
and a reset, which cuts one connection, about a quarter as much. (One body after another had
its answer earlier, but the answers of the others waited behind it.)

The shore may set the node's limit too (`tidesync nodes uplink`, §13.1; it comes with the
node's config): the lower of the two holds, and a change keeps the tokens already earned (up to
the new burst), so it never opens a fresh burst. Without either limit, bodies are paced at the
rate the uploads measure (`tidesync.ship.measured_rate`, `[ship] uplink_measured_pace`), from
a cautious start until they have measured it, with a burst of an eighth of a second; with that
off, bodies go at once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Generator

from tidesync.domain.token_bucket import TokenBucket
from tidesync.ship.measured_rate import MeasuredRate, Snapshot

PIECE_BYTES = 16 * 1024
"""The most written at once (less when the burst is smaller)."""
_MIN_PIECE_BYTES = 1024
_MEASURED_BURST_SECONDS = 0.125


class UplinkPacer:
    """A token bucket of `rate` bytes per second and `burst` bytes that bodies are written
    through; `pieces(body)` yields the body in pieces, each once the bucket allows it. A rate
    of 0 limits nothing until the shore sets one (`follow_shore`) or `measured` has measured
    the link (uploads report to it through `upload_started` and `upload_ended`)."""

    def __init__(self, rate: float, burst: float, *, measured: MeasuredRate | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.monotonic, self.sleep = monotonic, sleep
        self.own = (rate, burst) if rate > 0 else None
        """The ship's own `[ship]` limit (None: none)."""
        self.shore: tuple[float, float] | None = None
        self.measured = measured
        """The link's rate as the uploads measure it, paced at without a limit (None: off)."""
        self._bucket = TokenBucket.full(rate, burst, monotonic()) if rate > 0 else None
        self._turns = threading.Condition()
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        self.piece_bytes = int(max(_MIN_PIECE_BYTES, min(PIECE_BYTES, burst)))
        self.waited = 0.0
        """Seconds writers waited for the bucket, in all (for the run's telemetry and tests)."""
        if measured is not None:
            self._follow(monotonic())  # paced from the first body

    @property
    def limited(self) -> bool:
        """Whether bodies are paced at all (no limit of the ship's own or the shore's and no
        measured rate: no)."""
        return self._bucket is not None

    @property
    def rate(self) -> float:
        """The limit in force, bytes per second (0: none)."""
        bucket = self._bucket
        return 0.0 if bucket is None else bucket.rate

    def follow_shore(self, rate: float, burst: float) -> None:
        """The node's limit as the shore sets it (rate 0: none): the lower of it and the ship's
        own holds from now on, keeping the tokens earned."""
        self.shore = (rate, burst) if rate > 0 else None
        with self._turns:
            self._follow(self.monotonic())

    def upload_started(self) -> Snapshot | None:
        """An upload starts (None: the rate is not measured)."""
        if self.measured is None:
            return None
        with self._turns:
            return self.measured.started(self.monotonic())

    def upload_ended(self, snapshot: Snapshot | None, size: int | None) -> None:
        """The upload `upload_started` gave `snapshot` was answered (`size`: its body's bytes)
        or failed (None); without a limit, the pace follows the new measure."""
        if self.measured is None or snapshot is None:
            return
        with self._turns:
            now = self.monotonic()
            self.measured.ended(snapshot, size, now)
            self._follow(now)

    def round_trip(self, seconds: float) -> None:
        """A small request (at most `SMALL_REQUEST_BYTES` of body) was answered `seconds`
        after it started: before the link is measured, bodies go one `INITIAL_BYTES` per
        round trip."""
        if self.measured is not None:
            with self._turns:
                self.measured.round_trip(seconds)
                self._follow(self.monotonic())

    def _follow(self, now: float) -> None:
        """The bucket of the lower limit, else of the measured rate, else none (under
        `_turns`); a change keeps the tokens earned."""
        limits = [limit for limit in (self.own, self.shore) if limit is not None]
        measured = self.measured.rate(now) if self.measured is not None else None
        if limits:
            rate, burst = min(limits)
            burst = max(1.0, burst)
        elif measured is not None:
            rate = measured
            burst = max(float(_MIN_PIECE_BYTES), measured * _MEASURED_BURST_SECONDS)
        else:
            self._bucket = None
            return
        self._bucket = (TokenBucket.full(rate, burst, now) if self._bucket is None
                        else self._bucket.reconfigured(rate, burst, now))
        self.piece_bytes = int(max(_MIN_PIECE_BYTES, min(PIECE_BYTES, burst)))

    def pieces(self, body: bytes) -> Generator[bytes]:
        """`body` in pieces, each yielded once it is this body's turn (the bodies on their way
        take turns, a piece each) and the limit allows it. Close the iterator when the write
        ends early (a failed connection): it then takes no more turns."""
        with self._turns:
            ticket = next(self._tickets)
            self._queue.append(ticket)
        try:
            view, size = memoryview(body), self.piece_bytes  # a new limit's size: next body
            for start in range(0, len(body), size):
                with self._turns:
                    self._turns.wait_for(lambda: self._queue[0] == ticket)
                piece = view[start:start + size]
                self._take(len(piece))
                with self._turns:
                    self._queue.rotate(-1)  # the next body's turn
                    self._turns.notify_all()
                yield piece.tobytes()
        finally:
            with self._turns:
                self._queue.remove(ticket)
                self._turns.notify_all()

    def _take(self, size: int) -> None:
        while True:
            with self._turns:
                if self._bucket is None:  # the limit was lifted meanwhile
                    return
                take = self._bucket.take(size, self.monotonic())
                self._bucket = take.bucket
                if take.granted:
                    return
                wait = take.retry_after
                self.waited += wait
            self.sleep(wait)
