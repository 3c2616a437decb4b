"""A node's upload backlog ETA (§15.3) for the console, from the samples its heartbeats stored
(`metric_sample`) and its uplink limit; the arithmetic is `tidesync.domain.eta`.

Times are the shore's: samples are placed at the time the shore received them and "now" is the
database's, so a ship's wrong clock cannot move its ETA.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Mapping

import strawberry

from tidesync.domain.eta import (
    HISTORY,
    OBSERVATION,
    BacklogPoint,
    NodeEta,
    ThroughputSample,
    estimate,
    within_windows,
)
from tidesync.domain.rules.schedule import ScheduleError, TransferSchedule, week_of, zone_of
from tidesync.graphql.common import Long, long_or_none
from tidesync.graphql.nodes.loaders import Pool

_SKEW = dt.timedelta(days=1)
"""How far a ship's clock (which `sampled_at` follows) may be off the shore's for its samples
to be found by the index on (node_id, sampled_at); `received_at` then decides."""
_OF_NODE = " FROM metric_sample WHERE node_id = %(node)s AND direction = 'UPLINK'"
_TOTAL = "sum(coalesce(estimated_compressed_bytes, backlog_bytes, 0))"
_THROUGHPUT = (
    "SELECT received_at, window_seconds, coalesce(payload_bytes_confirmed, 0),"
    " coalesce(physical_bytes, 0), coalesce(active_transfer_seconds, 0)" + _OF_NODE
    + " AND kind = 'THROUGHPUT' AND sampled_at >= %(now)s - %(history)s - %(skew)s"
    " AND received_at >= %(now)s - %(history)s")
# Each heartbeat's partition rows share their sampled_at: summed, they are the whole backlog.
_BACKLOG = (
    "SELECT max(received_at), " + _TOTAL + _OF_NODE
    + " AND kind = 'BACKLOG' AND sampled_at >= %(now)s - %(observation)s - %(skew)s"
    " AND received_at >= %(now)s - %(observation)s GROUP BY sampled_at")
# The latest report, whenever it was, per rule: its sum is the backlog now.
_LATEST_BY_RULE = (
    "SELECT rule_id, max(received_at), " + _TOTAL + _OF_NODE
    + " AND kind = 'BACKLOG' AND sampled_at = (SELECT max(sampled_at)" + _OF_NODE
    + " AND kind = 'BACKLOG') GROUP BY rule_id")
_ZONE = "SELECT timezone FROM node_heartbeat WHERE node_id = %(node)s"

Schedules = Callable[[], Mapping[str, str]]
"""Rule id → the `schedule` of the version ships are offered."""


def fetch_eta(pool: Pool, node_id: str, schedules: Schedules = dict) -> NodeEta:
    """The node's ETA now (the database's time), laid onto its rules' schedules when every
    rule holding backlog has one and the node said its time zone."""
    with pool.connection() as conn:
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        now: dt.datetime = row[0]
        params = {"node": node_id, "now": now, "history": HISTORY, "observation": OBSERVATION,
                  "skew": _SKEW}
        samples = [ThroughputSample(at, float(seconds or 0), int(payload), int(physical),
                                    float(active))
                   for at, seconds, payload, physical, active
                   in conn.execute(_THROUGHPUT, params).fetchall()]
        points = {at: int(total or 0) for at, total in conn.execute(_BACKLOG, params)}
        latest = conn.execute(_LATEST_BY_RULE, params).fetchall()
        if latest:
            points[max(at for _, at, _ in latest)] = sum(int(total or 0) for *_, total in latest)
        holding = [rule_id for rule_id, _, total in latest if total]
        zone_row = conn.execute(_ZONE, params).fetchone()
    eta = estimate(now, [BacklogPoint(at, total) for at, total in points.items()], samples)
    week = _week(holding, schedules)
    zone = _zone(None if zone_row is None else zone_row[0])
    return eta if week is None or zone is None else within_windows(eta, zone, week)


def _week(holding: list[str | None], schedules: Schedules) -> bytes | None:
    """The open minutes of the holding rules' schedules; None unless every one has one."""
    if not holding or None in holding:
        return None
    offered = schedules()
    texts = [offered.get(rule_id or "", "").strip() for rule_id in holding]
    if not all(texts):
        return None
    try:
        return week_of(TransferSchedule.parse(text) for text in texts)
    except ScheduleError:
        return None


def _zone(name: str | None) -> dt.tzinfo | None:
    if not name:
        return None
    try:
        return zone_of(name)
    except ValueError:
        return None


@strawberry.enum(name="EtaConfidence")
class EtaConfidence(enum.Enum):
    NORMAL = "NORMAL"
    LOW = "LOW"
    NONE = "NONE"


@strawberry.type(description="When the node's upload backlog should be through (§15.3), and "
                             "what that rests on: the backlog as last reported (estimated "
                             "compressed bytes), how fast new backlog arrives, the effective "
                             "throughput (confirmed payload per second of transfer, last 30 "
                             "minutes) beside the physical one, the net drain, the uplink limit "
                             "the shore set, and P50/P90 dates from the last 24 hours' "
                             "throughput. When every rule holding backlog has a schedule, the "
                             "dates count only the minutes its windows are open, in the node's "
                             "time zone (withinWindows).")
class NodeEtaView:
    computed_at: dt.datetime
    remaining_bytes: Long | None
    reported_at: dt.datetime | None
    inflow_bytes_per_second: float | None
    effective_bytes_per_second: float | None
    physical_bytes_per_second: float | None
    net_drain_bytes_per_second: float | None
    uplink_limit_bytes_per_second: Long | None
    sample_seconds: float
    confidence: EtaConfidence
    transfer_seconds: float | None
    p50: dt.datetime | None
    p90: dt.datetime | None
    reason: str
    within_windows: bool

    @classmethod
    def of(cls, eta: NodeEta, uplink_limit: int) -> NodeEtaView:
        return cls(
            computed_at=eta.computed_at, remaining_bytes=long_or_none(eta.remaining_bytes),
            reported_at=eta.reported_at, inflow_bytes_per_second=eta.inflow_bytes_per_second,
            effective_bytes_per_second=eta.effective_bytes_per_second,
            physical_bytes_per_second=eta.physical_bytes_per_second,
            net_drain_bytes_per_second=eta.net_drain_bytes_per_second,
            uplink_limit_bytes_per_second=long_or_none(uplink_limit or None),
            sample_seconds=eta.sample_seconds, confidence=EtaConfidence(eta.confidence.value),
            transfer_seconds=eta.transfer_seconds, p50=eta.p50, p90=eta.p90, reason=eta.reason,
            within_windows=eta.within_windows)
