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
the bodies go one after another in the order they started, as the link carries them, rather
than interleaved: a cut then finds at most one request partly delivered, and the first
request's answer comes as early as the link allows.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Generator

from tidesync.domain.token_bucket import TokenBucket

PIECE_BYTES = 16 * 1024
"""The most written at once (less when the burst is smaller)."""
_MIN_PIECE_BYTES = 1024


class UplinkPacer:
    """A token bucket of `rate` bytes per second and `burst` bytes that bodies are written
    through; `pieces(body)` yields the body in pieces, each once the bucket allows it."""

    def __init__(self, rate: float, burst: float, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.monotonic, self.sleep = monotonic, sleep
        self._bucket = TokenBucket.full(rate, burst, monotonic())
        self._turns = threading.Condition()
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        self.piece_bytes = int(max(_MIN_PIECE_BYTES, min(PIECE_BYTES, burst)))
        self.waited = 0.0
        """Seconds writers waited for the bucket, in all (for the run's telemetry and tests)."""

    def pieces(self, body: bytes) -> Generator[bytes]:
        """`body` in pieces, each yielded once the limit allows it to be written and the
        bodies that started before it are written. Close the iterator when the write ends
        early (a failed connection): the next body's turn comes then."""
        with self._turns:
            ticket = next(self._tickets)
            self._queue.append(ticket)
        try:
            with self._turns:
                self._turns.wait_for(lambda: self._queue[0] == ticket)
            view = memoryview(body)
            for start in range(0, len(body), self.piece_bytes):
                piece = view[start:start + self.piece_bytes]
                self._take(len(piece))
                yield piece.tobytes()
        finally:
            with self._turns:
                self._queue.remove(ticket)
                self._turns.notify_all()

    def _take(self, size: int) -> None:
        while True:
            with self._turns:
                take = self._bucket.take(size, self.monotonic())
                self._bucket = take.bucket
                if take.granted:
                    return
                wait = take.retry_after
                self.waited += wait
            self.sleep(wait)
