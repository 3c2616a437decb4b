"""A node's upload backlog ETA (§15.2, §15.3), from what its heartbeats reported.

* Effective throughput: payload bytes the shore confirmed ÷ seconds the link was actually
  transferring, over the observation window (30 minutes by default). Retried bytes are not
  payload; the physical throughput (every byte sent) is shown beside it, so waste shows.
* Inflow: how fast new backlog arrives, from the backlog the node reported at the start and at
  the end of the window and what was confirmed in between:
  `(remaining_end − remaining_start + confirmed) ÷ elapsed`.
* Net drain = effective throughput − inflow. At or below 0 the backlog does not shrink: no
  ETA can be given. With fewer than ten minutes of samples the estimate is marked LOW
  confidence.
* The ETA is `remaining ÷ net drain` of transfer time; P50 and P90 take the median and the
  10th percentile of the per-sample throughput over the last 24 hours instead (a slower link
  gives the later, P90, date).
* When every rule holding backlog has a schedule (§13.3), the transfer time is laid onto the
  minutes their windows are open, in the node's time zone (`within_windows`).

Pure: the caller reads the samples and passes the time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tidesync.domain.rules.schedule import after_open_time

OBSERVATION = dt.timedelta(minutes=30)
HISTORY = dt.timedelta(hours=24)
MIN_SAMPLE_SECONDS = 600.0


class Confidence(enum.StrEnum):
    NORMAL = "NORMAL"
    LOW = "LOW"  # fewer than ten minutes of samples
    NONE = "NONE"  # no backlog report, no transfer measured, or the backlog does not shrink


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    """One heartbeat's throughput window."""

    start: dt.datetime
    seconds: float
    payload_bytes: int
    physical_bytes: int
    active_seconds: float


@dataclass(frozen=True, slots=True)
class BacklogPoint:
    """The node's whole upload backlog (estimated compressed bytes) as one heartbeat said."""

    at: dt.datetime
    remaining_bytes: int


@dataclass(frozen=True, slots=True)
class NodeEta:
    computed_at: dt.datetime
    remaining_bytes: int | None
    reported_at: dt.datetime | None
    effective_bytes_per_second: float | None
    physical_bytes_per_second: float | None
    inflow_bytes_per_second: float | None
    net_drain_bytes_per_second: float | None
    sample_seconds: float
    confidence: Confidence
    transfer_seconds: float | None
    """Seconds of transfer the backlog needs at the net drain rate (0: none left)."""
    p50: dt.datetime | None
    p90: dt.datetime | None
    reason: str
    """Why there is no ETA, or how sure it is, in words."""
    within_windows: bool = False
    """The dates count only the minutes the backlog's rules' schedules are open."""


def estimate(now: dt.datetime, backlog: Sequence[BacklogPoint],
             throughput: Sequence[ThroughputSample]) -> NodeEta:
    """The ETA from backlog points and throughput samples (any order; older ones than
    `HISTORY` are ignored)."""
    points = sorted((p for p in backlog if p.at <= now), key=lambda p: p.at)
    samples = sorted((s for s in throughput if now - HISTORY <= s.start <= now),
                     key=lambda s: s.start)
    recent = [s for s in samples if s.start >= now - OBSERVATION]
    active = sum(s.active_seconds for s in recent)
    seconds = sum(s.seconds for s in recent)
    effective = sum(s.payload_bytes for s in recent) / active if active > 0 else None
    physical = sum(s.physical_bytes for s in recent) / active if active > 0 else None
    last = points[-1] if points else None
    remaining = None if last is None else last.remaining_bytes

    def answer(confidence: Confidence, reason: str, *, inflow: float | None = None,
               net: float | None = None, transfer: float | None = None,
               p50: dt.datetime | None = None, p90: dt.datetime | None = None) -> NodeEta:
        return NodeEta(now, remaining, None if last is None else last.at, effective, physical,
                       inflow, net, seconds, confidence, transfer, p50, p90, reason)

    if last is None:
        return answer(Confidence.NONE, "the node has reported no backlog yet")
    if last.remaining_bytes == 0:
        return answer(Confidence.NORMAL, "nothing waits", transfer=0.0, p50=now, p90=now)
    if effective is None:
        return answer(Confidence.NONE, "no transfer was measured in the last 30 minutes")
    inflow = _inflow(points, recent, now)
    net = effective - (inflow or 0.0)
    if net <= 0:
        return answer(Confidence.NONE, "the backlog grows at least as fast as the link drains"
                      " it", inflow=inflow, net=net)
    rates = sorted(s.payload_bytes / s.active_seconds for s in samples if s.active_seconds > 0)
    p50 = _finish(now, last.remaining_bytes, statistics.median(rates) - (inflow or 0.0))
    p90 = _finish(now, last.remaining_bytes, _quantile(rates, 0.1) - (inflow or 0.0))
    low = seconds < MIN_SAMPLE_SECONDS
    return answer(Confidence.LOW if low else Confidence.NORMAL,
                  "fewer than ten minutes of samples" if low else "from the last 30 minutes",
                  inflow=inflow, net=net, transfer=last.remaining_bytes / net, p50=p50, p90=p90)


def within_windows(eta: NodeEta, zone: dt.tzinfo, week: bytes) -> NodeEta:
    """The ETA with its dates moved onto the open minutes of `week` (wall-clock minutes in
    `zone`): when every rule holding backlog has a schedule, the link carries it only then."""
    local = eta.computed_at.astimezone(zone)

    def moved(date: dt.datetime | None) -> dt.datetime | None:
        if date is None or date <= eta.computed_at:
            return date
        seconds = (date - eta.computed_at).total_seconds()
        mapped = after_open_time(local, seconds, week)
        return None if mapped is None else mapped.astimezone(dt.UTC)

    return dataclasses.replace(eta, p50=moved(eta.p50), p90=moved(eta.p90), within_windows=True)


def _inflow(points: Sequence[BacklogPoint], recent: Sequence[ThroughputSample],
            now: dt.datetime) -> float | None:
    window = [p for p in points if p.at >= now - OBSERVATION]
    if len(window) < 2 or window[-1].at <= window[0].at:
        return None
    first, last = window[0], window[-1]
    confirmed = sum(s.payload_bytes for s in recent if first.at <= s.start < last.at)
    elapsed = (last.at - first.at).total_seconds()
    return max(0.0, (last.remaining_bytes - first.remaining_bytes + confirmed) / elapsed)


def _quantile(values: Sequence[float], q: float) -> float:
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def _finish(now: dt.datetime, remaining: int, drain: float) -> dt.datetime | None:
    if drain <= 0:
        return None
    try:
        return now + dt.timedelta(seconds=remaining / drain)
    except OverflowError:
        return None
