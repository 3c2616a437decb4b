"""A userland satellite-link simulator: a TCP proxy with per-direction bandwidth, one-way latency,
scheduled or forced outages, random connection resets and loss modelled as retransmission stalls.

Linux netem is not available everywhere tests and benchmarks run, so this proxy stands in for
the ship's link: `with LinkSimulator(("127.0.0.1", port), LinkProfile(...)) as link:` relays
`link.port` to the target on a background thread; `python -m tidesync.linksim --listen 8471
--target 127.0.0.1:8470 --rate 131072 --latency-ms 300` does the same for operators and demos.

What it models, per direction of the link:

* bandwidth: the bytes of every connection share one serializer (a token bucket whose burst is
  one segment), so a byte leaves no earlier than `size / rate` after the one before it;
* latency: a byte arrives `latency` after it left; a new connection's first bytes also wait a
  handshake (two one-way latencies);
* loss: each segment of `segment_bytes` (by offset in its stream) is lost with probability
  `loss`; a lost segment arrives `retransmit_seconds` late and holds everything behind it;
* outages every `outage_every_seconds` for `outage_seconds` (or forced by `set_down(True)`):
  "refuse" resets open connections and resets new ones at once, "stall" holds every byte
  until the outage ends, "blackhole" drops what falls in it, as a satellite blockage does, and
  resets nothing: a direction of a connection that lost bytes resumes at the sender's next
  retransmission after the link came back (timed from the loss, the first after
  `retransmit_seconds`, each later one twice as late, up to 120 s apart), so bytes lost as a
  10 s outage began resume 5 s after its end with a 1 s timeout, as a 100 s one began 27 s
  after; what it held then arrives in one burst, whatever the rate, and a connection opened
  in the outage (its SYN lost) sends its first bytes at the SYN's retransmission;
* random resets: per connection, after an exponentially distributed number of seconds or of
  MiB relayed (a reset after n bytes relays exactly n: what the sender wrote after them never
  left it); every draw comes from a generator seeded by `seed` and the connection's number.

What a userland proxy cannot model: real packet loss, reordering or duplication (the proxy's
own TCP legs are lossless loopback connections); the real stack's congestion control, which
sees a fast local link and never slows down after a loss; window limits and bufferbloat of a
real modem; and a refused connect (the kernel accepts it, the proxy then resets it, so the
client sees a reset instead of ECONNREFUSED, and a stalled connect instead of a SYN timeout).
A blackhole is modelled, not made: the client's kernel talks to the proxy over loopback, so its
TCP_INFO shows no retransmissions and its connect() succeeds at once instead of waiting for a
SYN-ACK, and the retransmission timer is one per direction of a connection, started from
`retransmit_seconds` rather than from a measured round trip.

The model's arithmetic (`LinkProfile`, `Serializer`, `Channel`, `retransmission_after`, ...)
lives in `tidesync.linkmodel` and is re-exported here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import signal
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from types import TracebackType

from tidesync.linkmodel import (
    MIB,
    RTO_MAX_SECONDS,
    Channel,
    LinkProfile,
    LinkProfileError,
    LinkStats,
    OutageMode,
    OutageSchedule,
    ResetPlan,
    Serializer,
    connection_rng,
    retransmission_after,
)

__all__ = [  # the model's names too: they are imported from here
    "MIB",
    "RTO_MAX_SECONDS",
    "Channel",
    "LinkProfile",
    "LinkProfileError",
    "LinkSimulator",
    "LinkStats",
    "OutageMode",
    "OutageSchedule",
    "ResetPlan",
    "Serializer",
    "abort",
    "connection_rng",
    "main",
    "profile_of",
    "retransmission_after",
]

_READ_BYTES = 64 * 1024
_QUEUE_PIECES = 512
"""Pieces waiting for delivery per direction of a connection: the proxy's send buffer."""
_TICK_SECONDS = 0.02


# ----------------------------------------------------------------------------- the proxy


_Legs = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _Connection:
    """One relayed connection: two channels, four tasks, and how it ends."""

    def __init__(self, proxy: _Proxy, number: int, client: _Legs, target: _Legs,
                 now: float) -> None:
        profile = proxy.profile
        self.proxy, self.number = proxy, number
        self.client, self.target = client, target
        self.up = Channel(profile, proxy.up, connection_rng(profile.seed, number, "up"),
                          not_before=now + 2 * profile.latency_seconds)
        self.down = Channel(profile, proxy.down, connection_rng(profile.seed, number, "down"))
        plan = ResetPlan.draw(profile, connection_rng(profile.seed, number, "resets"))
        self.reset_at, self.reset_after_bytes = now + plan.seconds, plan.bytes
        self.relayed = 0
        self.up_pending = 0  # read from the client, not yet delivered
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        up: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE_PIECES)
        down: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE_PIECES)
        self.tasks = [asyncio.ensure_future(coroutine) for coroutine in (
            self._read(self.client[0], self.up, up, "up"),
            self._deliver(up, self.up, self.target[1], "up"),
            self._read(self.target[0], self.down, down, "down"),
            self._deliver(down, self.down, self.client[1], "down"))]
        try:
            await asyncio.gather(*self.tasks)
        except (ConnectionError, OSError):
            self.reset()
        except asyncio.CancelledError:
            pass
        finally:
            for writer in (self.client[1], self.target[1]):
                writer.close()

    async def _read(self, source: asyncio.StreamReader, channel: Channel,
                    queue: asyncio.Queue[tuple[float, bytes]], direction: str) -> None:
        while True:
            data = await source.read(_READ_BYTES)
            now = self.proxy.now()
            if not data:
                await queue.put((channel.end(now), b""))
                return
            cut = self.relayed + len(data) >= self.reset_after_bytes
            if cut:  # the reset falls within this read: the bytes after it never left
                data = data[:max(0, math.ceil(self.reset_after_bytes - self.relayed))]
            self.proxy.stats_add(direction, len(data), delivered=False)
            if direction == "up":
                self.up_pending += len(data)
            self.relayed += len(data)
            if cut:
                self.reset()
                return
            for arrival, size in channel.schedule(len(data), now):
                piece, data = data[:size], data[size:]
                await queue.put((arrival, piece))

    async def _deliver(self, queue: asyncio.Queue[tuple[float, bytes]], channel: Channel,
                       sink: asyncio.StreamWriter, direction: str) -> None:
        while True:
            arrival, piece = await queue.get()
            await self.proxy.sleep_until(arrival)
            await self.proxy.wait_passable(channel)
            if not piece:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            self.proxy.stats_add(direction, len(piece), delivered=True)
            if direction == "up":
                self.up_pending -= len(piece)
            sink.write(piece)
            await sink.drain()

    def reset(self) -> None:
        """Abort both legs with a TCP reset and stop relaying."""
        if self not in self.proxy.connections:
            return
        self.proxy.connections.discard(self)
        self.proxy.stats.resets += 1
        self.proxy.stats.up_cut += self.up_pending
        self.up_pending = 0
        for _, writer in (self.client, self.target):
            abort(writer)
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


def abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Proxy:
    """The asyncio side: accepts, relays, ticks outages and timed resets."""

    def __init__(self, target: tuple[str, int], profile: LinkProfile) -> None:
        self.target, self.profile = target, profile
        self.outages = profile.outages()
        self.loop = asyncio.get_running_loop()
        self.started = self.loop.time()
        self.up = Serializer(profile.rate_bytes_per_second, self.outages, self.started,
                             mode=profile.outage_mode)
        self.down = Serializer(profile.rate_bytes_per_second, self.outages, self.started,
                               mode=profile.outage_mode)
        self.stats = LinkStats()
        self.lock = threading.Lock()
        self.connections: set[_Connection] = set()
        self.numbers = itertools.count()
        self.forced_down = False
        self.forced_up_at = -math.inf  # when set_down(False) last ended a forced outage
        self._was_down = False

    def now(self) -> float:
        return self.loop.time()

    def down_now(self) -> bool:
        return self.forced_down or self.outages.window_at(self.now() - self.started) is not None

    def up_since(self) -> float:
        """When the link, up now, came back: the end of the last outage, forced or scheduled."""
        scheduled = self.outages.last_end(self.now() - self.started)
        return max(self.forced_up_at,
                   -math.inf if scheduled is None else self.started + scheduled)

    def stats_add(self, direction: str, size: int, *, delivered: bool) -> None:
        name = f"{direction}_{'delivered' if delivered else 'bytes'}"
        with self.lock:
            setattr(self.stats, name, getattr(self.stats, name) + size)

    async def sleep_until(self, moment: float) -> None:
        delay = moment - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    async def wait_passable(self, channel: Channel) -> None:
        """Before a piece of `channel` is delivered: in stall mode, wait out an outage; in
        blackhole mode, see `_resend`; in refuse mode the monitor resets instead."""
        if self.profile.outage_mode is OutageMode.BLACKHOLE:
            await self._resend(channel)
        while self.down_now() and self.profile.outage_mode is OutageMode.STALL:
            await asyncio.sleep(_TICK_SECONDS)

    async def _resend(self, channel: Channel) -> None:
        """A piece due while the link is down is lost; the sender resends it at the first
        retransmission (timed from the loss, backing off) after the link came back, and it
        arrives a latency later. The pieces queued behind it, due by then, follow at once: what
        a blackhole held arrives in one burst, whatever the rate. A retransmission that
        arrives during another outage is lost too, and the timer backs off further."""
        while True:
            if self.down_now():
                if channel.lost_at is None:
                    channel.lost_at = self.now()
                while self.down_now():
                    await asyncio.sleep(_TICK_SECONDS)
            if channel.lost_at is None:
                return
            resent = retransmission_after(channel.lost_at, self.up_since(),
                                          self.profile.retransmit_seconds)
            await self.sleep_until(resent + self.profile.latency_seconds)
            if not self.down_now():
                channel.lost_at = None
                return

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, accepted, down = next(self.numbers), self.now(), self.down_now()
        with self.lock:
            self.stats.connections += 1
        if down and self.profile.outage_mode is OutageMode.REFUSE:
            self._refuse(writer)
            return
        try:
            target = await asyncio.open_connection(*self.target)
        except OSError:
            self._refuse(writer)
            return
        for leg in (writer, target[1]):
            sock = leg.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(self, number, (reader, writer), target, self.now())
        if down and self.profile.outage_mode is OutageMode.BLACKHOLE:
            # The client's SYN was lost: its first bytes wait for the SYN's retransmission.
            connection.up.lost_at = accepted
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        with self.lock:
            self.stats.refused += 1
        abort(writer)

    async def monitor(self) -> None:
        """Reset connections when a refusing outage starts or their reset time comes."""
        while True:
            down = self.down_now()
            now = self.now()
            for connection in list(self.connections):
                if (down and not self._was_down and self.profile.outage_mode
                        is OutageMode.REFUSE) or now >= connection.reset_at:
                    connection.reset()
            self._was_down = down
            await asyncio.sleep(_TICK_SECONDS)


class LinkSimulator:
    """The proxy on a background thread: `with LinkSimulator(target, profile) as link:`."""

    def __init__(self, target: tuple[str, int], profile: LinkProfile | None = None, *,
                 listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.target, self.profile, self.listen = target, profile or LinkProfile(), listen
        self.port = 0
        self.started = 0.0
        """The loop time (time.monotonic) the link started: outage windows count from it."""
        self._proxy: _Proxy | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="link-simulator", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.listen[0]}:{self.port}"

    @property
    def stats(self) -> LinkStats:
        """A copy of the counters so far."""
        proxy = self._running()
        with proxy.lock:
            return LinkStats(**vars(proxy.stats))

    def set_down(self, down: bool) -> None:
        """Force an outage (in the profile's mode) until `set_down(False)`."""
        proxy, loop = self._running(), self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._force, proxy, down)

    @staticmethod
    def _force(proxy: _Proxy, down: bool) -> None:
        if proxy.forced_down and not down:
            proxy.forced_up_at = proxy.now()
        proxy.forced_down = down
        if down and proxy.profile.outage_mode is OutageMode.REFUSE:
            for connection in list(proxy.connections):
                connection.reset()

    def outage_windows(self, until: float) -> list[tuple[float, float]]:
        """Scheduled outages starting before monotonic time `until`, in monotonic times."""
        return [(self.started + start, self.started + end)
                for start, end in self.profile.outages().windows(until - self.started)]

    def start(self) -> LinkSimulator:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout=10)

    def __enter__(self) -> LinkSimulator:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _running(self) -> _Proxy:
        if self._proxy is None:
            raise RuntimeError("the link simulator is not running")
        return self._proxy

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # noqa: BLE001 - handed to the starting thread
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        proxy = _Proxy(self.target, self.profile)
        server = await asyncio.start_server(proxy.accept, *self.listen, reuse_address=True)
        self.port = server.sockets[0].getsockname()[1]
        self._proxy, self.started = proxy, proxy.started
        monitor = asyncio.ensure_future(proxy.monitor())
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            monitor.cancel()
            server.close()
            for connection in list(proxy.connections):
                connection.reset()
            await asyncio.sleep(0)


# ----------------------------------------------------------------------------- the command


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tidesync.linksim", description=(
        "Relay TCP from --listen to --target through a simulated satellite link."))
    parser.add_argument("--listen", default="127.0.0.1:8471",
                        help="[host:]port to listen on (default 127.0.0.1:8471)")
    parser.add_argument("--target", required=True, help="host:port to relay to")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="bytes per second each way (0: unlimited)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="one-way latency")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="probability a segment is lost (and retransmitted late)")
    parser.add_argument("--retransmit-ms", type=float, default=1000.0,
                        help="how late a lost segment arrives; a blackhole's first"
                        " retransmission timeout")
    parser.add_argument("--outage-every", type=float, default=0.0,
                        help="seconds between outage starts (0: none)")
    parser.add_argument("--outage-seconds", type=float, default=0.0, help="outage length")
    parser.add_argument("--outage-mode", choices=[mode.value for mode in OutageMode],
                        default=OutageMode.REFUSE.value)
    parser.add_argument("--resets-per-second", type=float, default=0.0)
    parser.add_argument("--resets-per-mib", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def profile_of(args: argparse.Namespace) -> LinkProfile:
    return LinkProfile(
        rate_bytes_per_second=args.rate, latency_seconds=args.latency_ms / 1000,
        loss=args.loss, retransmit_seconds=args.retransmit_ms / 1000,
        outage_every_seconds=args.outage_every, outage_seconds=args.outage_seconds,
        outage_mode=OutageMode(args.outage_mode), resets_per_second=args.resets_per_second,
        resets_per_mib=args.resets_per_mib, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        profile = profile_of(args)
    except LinkProfileError as error:
        print(f"linksim: {error}", file=sys.stderr)
        return 2
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    with LinkSimulator(_address(args.target), profile, listen=_address(args.listen)) as link:
        print(f"linksim: {link.url} -> {args.target}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while not stopped.wait(10.0):
                stats = link.stats
                print(f"linksim: up {stats.up_delivered} B, down {stats.down_delivered} B,"
                      f" {stats.connections} connections, {stats.resets} resets,"
                      f" {stats.refused} refused", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
