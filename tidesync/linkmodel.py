"""The link simulator's model, without I/O: the link's profile, its outage schedule, when each
piece of a byte stream leaves and arrives, when a connection is reset, and when a sender's
retransmission timer resends what an outage lost. Every function here is given the time, so
the arithmetic is tested on an injected clock; `tidesync.linksim` runs it on real sockets."""

from __future__ import annotations

import enum
import itertools
import math
import random
from dataclasses import dataclass

from tidesync.domain.errors import ErrorCode, TidesyncError

MIB = 1024 * 1024
RTO_MAX_SECONDS = 120.0
"""Linux's TCP_RTO_MAX: a retransmission timer backs off no further than this."""


class OutageMode(enum.StrEnum):
    REFUSE = "refuse"  # open connections are reset, new ones reset at once
    STALL = "stall"    # bytes are held until the outage ends
    BLACKHOLE = "blackhole"  # bytes are lost: resent at the sender's next retransmission


class LinkProfileError(TidesyncError):
    """A link profile with impossible values."""

    code = ErrorCode.CONFIG_INVALID


@dataclass(frozen=True)
class LinkProfile:
    """The impairments of the simulated link; the defaults impair nothing."""

    rate_bytes_per_second: float = 0.0  # each direction; 0 = unlimited
    latency_seconds: float = 0.0  # one way
    loss: float = 0.0  # probability per segment
    segment_bytes: int = 1400
    retransmit_seconds: float = 1.0  # a lost segment's delay; a blackhole's first timeout
    outage_every_seconds: float = 0.0  # 0 = no scheduled outages
    outage_seconds: float = 0.0
    outage_offset_seconds: float | None = None  # first outage start; None: every - duration
    outage_mode: OutageMode = OutageMode.REFUSE
    resets_per_second: float = 0.0  # per connection
    resets_per_mib: float = 0.0  # per connection, both directions counted
    seed: int = 0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise LinkProfileError("; ".join(problems))

    def problems(self) -> list[str]:
        problems = [f"{name} must be >= 0" for name in (
            "rate_bytes_per_second", "latency_seconds", "retransmit_seconds",
            "outage_every_seconds", "outage_seconds", "resets_per_second", "resets_per_mib")
            if getattr(self, name) < 0]
        if not 0.0 <= self.loss < 1.0:
            problems.append("loss must be in [0, 1)")
        if self.segment_bytes < 1:
            problems.append("segment_bytes must be >= 1")
        if self.outage_every_seconds and self.outage_seconds >= self.outage_every_seconds:
            problems.append("outage_seconds must be shorter than outage_every_seconds")
        return problems

    def outages(self) -> OutageSchedule:
        offset = (self.outage_offset_seconds if self.outage_offset_seconds is not None
                  else self.outage_every_seconds - self.outage_seconds)
        return OutageSchedule(self.outage_every_seconds, self.outage_seconds, offset)


@dataclass(frozen=True)
class OutageSchedule:
    """Outages of `duration` seconds starting at `offset + k * every` seconds after the link
    started (k = 0, 1, ...)."""

    every: float
    duration: float
    offset: float

    def window_at(self, elapsed: float) -> tuple[float, float] | None:
        """The outage (start, end) in seconds since the start that `elapsed` falls in."""
        if self.every <= 0 or self.duration <= 0 or elapsed < self.offset:
            return None
        start = self.offset + math.floor((elapsed - self.offset) / self.every) * self.every
        return (start, start + self.duration) if elapsed < start + self.duration else None

    def last_end(self, elapsed: float) -> float | None:
        """The end of the latest outage that is over at `elapsed` seconds since the start."""
        if self.every <= 0 or self.duration <= 0 or elapsed < self.offset + self.duration:
            return None
        latest = math.floor((elapsed - self.offset - self.duration) / self.every)
        return self.offset + latest * self.every + self.duration

    def windows(self, until: float) -> list[tuple[float, float]]:
        """Every outage that starts before `until` seconds since the start."""
        if self.every <= 0 or self.duration <= 0:
            return []
        starts = itertools.takewhile(lambda s: s < until,
                                     (self.offset + k * self.every for k in itertools.count()))
        return [(start, start + self.duration) for start in starts]


@dataclass
class Serializer:
    """One direction's bandwidth: bytes leave one after another at `rate` bytes per second,
    never during a scheduled outage, except into a blackhole: there they leave and are lost on
    the way (the sender learns of it only when its retransmission timer fires). Pure: the
    caller passes the time."""

    rate: float
    outages: OutageSchedule
    started: float
    free_at: float = 0.0
    mode: OutageMode = OutageMode.REFUSE

    def depart(self, size: int, now: float) -> float:
        """When the last of `size` bytes offered at `now` has left."""
        if self.rate <= 0:
            return now
        start = max(now, self.free_at)
        window = self.outages.window_at(start - self.started)
        if window is not None and self.mode is not OutageMode.BLACKHOLE:
            start = self.started + window[1]
        self.free_at = start + size / self.rate
        return self.free_at


@dataclass
class Channel:
    """One direction of one connection: when each piece of its byte stream arrives. Pure."""

    profile: LinkProfile
    serializer: Serializer
    rng: random.Random
    not_before: float = 0.0
    offset: int = 0
    lost: bool = False
    last: float = 0.0
    lost_at: float | None = None
    """When a blackhole lost the piece this direction now waits to resend (None: none lost)."""

    def schedule(self, size: int, now: float) -> list[tuple[float, int]]:
        """(arrival time, bytes) of the next `size` bytes of the stream, offered at `now`, cut
        at segment boundaries; arrivals never go backwards (one lost segment stalls all
        behind it)."""
        pieces: list[tuple[float, int]] = []
        segment = self.profile.segment_bytes
        while size > 0:
            within = self.offset % segment
            take = min(size, segment - within)
            if within == 0:
                self.lost = self.rng.random() < self.profile.loss
            arrival = self.serializer.depart(take, max(now, self.not_before))
            arrival += self.profile.latency_seconds
            if within == 0 and self.lost:
                arrival += self.profile.retransmit_seconds
            self.last = max(arrival, self.last)
            pieces.append((self.last, take))
            self.offset += take
            size -= take
        return pieces

    def end(self, now: float) -> float:
        """When the end of the stream (a FIN) offered at `now` arrives."""
        self.last = max(self.last, now + self.profile.latency_seconds)
        return self.last


@dataclass(frozen=True)
class ResetPlan:
    """When one connection is reset: after `seconds` or after `bytes` relayed (inf: never)."""

    seconds: float
    bytes: float

    @classmethod
    def draw(cls, profile: LinkProfile, rng: random.Random) -> ResetPlan:
        seconds = rng.expovariate(profile.resets_per_second) if profile.resets_per_second \
            else math.inf
        size = rng.expovariate(profile.resets_per_mib / MIB) if profile.resets_per_mib \
            else math.inf
        return cls(seconds, size)


def retransmission_after(lost_at: float, up_at: float, rto: float,
                         cap: float = RTO_MAX_SECONDS) -> float:
    """When a sender resends a segment lost at `lost_at` for the first time at or after the
    link came back at `up_at`: retransmissions go at `lost_at + rto` and then after intervals
    that double (rto, 2 rto, 4 rto, ...) up to `cap` each, as the kernel's timer backs off.
    A 10 s outage with a 1 s timeout resumes at 15 s, a 100 s one at 127 s."""
    if rto <= 0 or cap <= 0:
        return up_at
    interval = min(rto, cap)
    at = lost_at + interval
    while at < up_at and interval < cap:  # at most log2(cap / rto) doublings
        interval = min(2 * interval, cap)
        at += interval
    if at < up_at:  # the capped tail: one step per `cap`, counted rather than walked
        at += math.ceil((up_at - at) / interval) * interval
    return max(at, up_at)  # rounding must not put it before the link came back


def connection_rng(seed: int, number: int, purpose: str) -> random.Random:
    """The generator of one connection's draws: the same seed gives the same draws."""
    return random.Random(f"{seed}/{number}/{purpose}")  # noqa: S311 - a simulation, not secrets


@dataclass
class LinkStats:
    """What went through the link: bytes read from each side and delivered to the other."""

    up_bytes: int = 0  # read from the client (towards the target)
    down_bytes: int = 0  # read from the target (towards the client)
    up_delivered: int = 0
    down_delivered: int = 0
    up_cut: int = 0  # read from the client, never delivered: on the link when a reset cut it
    connections: int = 0
    refused: int = 0
    resets: int = 0
