"""A node's upload backlog ETA (§15.3) for the console, from the samples its heartbeats stored
(`metric_sample`) and its uplink limit; the arithmetic is `tidesync.domain.eta`.

Times are the shore's: samples are placed at the time the shore received them and "now" is the
database's, so a ship's wrong clock cannot move its ETA.
"""

from __future__ import annotations

import datetime as dt
import enum

import strawberry

from tidesync.domain.eta import (
    HISTORY,
    OBSERVATION,
    BacklogPoint,
    NodeEta,
    ThroughputSample,
    estimate,
)
from tidesync.graphql.common import Long, long_or_none
from tidesync.graphql.nodes.loaders import Pool

_THROUGHPUT = (
    "SELECT received_at, window_seconds, coalesce(payload_bytes_confirmed, 0),"
    " coalesce(physical_bytes, 0), coalesce(active_transfer_seconds, 0) FROM metric_sample"
    " WHERE node_id = %(node)s AND kind = 'THROUGHPUT' AND direction = 'UPLINK'"
    " AND sampled_at >= %(now)s - %(history)s - %(skew)s"
    " AND received_at >= %(now)s - %(history)s")
# Each heartbeat's partition rows share their sampled_at: summed, they are the whole backlog.
# The points of the observation window, and the latest one whenever it was.
_BACKLOG = (
    "SELECT max(received_at), sum(coalesce(estimated_compressed_bytes, backlog_bytes, 0))"
    " FROM metric_sample WHERE node_id = %(node)s AND kind = 'BACKLOG' AND direction = 'UPLINK'"
    " AND sampled_at >= %(now)s - %(observation)s - %(skew)s"
    " AND received_at >= %(now)s - %(observation)s GROUP BY sampled_at")
_LATEST_BACKLOG = (
    "SELECT max(received_at), sum(coalesce(estimated_compressed_bytes, backlog_bytes, 0))"
    " FROM metric_sample WHERE node_id = %(node)s AND kind = 'BACKLOG' AND direction = 'UPLINK'"
    " GROUP BY sampled_at ORDER BY sampled_at DESC LIMIT 1")


_SKEW = dt.timedelta(days=1)
"""How far a ship's clock (which `sampled_at` follows) may be off the shore's for its samples
to be found by the index on (node_id, sampled_at); `received_at` then decides."""


def fetch_eta(pool: Pool, node_id: str) -> NodeEta:
    """The node's ETA now (the database's time)."""
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
        points = {at: int(total or 0) for query in (_BACKLOG, _LATEST_BACKLOG)
                  for at, total in conn.execute(query, params).fetchall()}
    return estimate(now, [BacklogPoint(at, total) for at, total in points.items()], samples)


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
                             "throughput. Time windows of rules' schedules are not taken into "
                             "account: the dates assume the link may be used at any time.")
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
            transfer_seconds=eta.transfer_seconds, p50=eta.p50, p90=eta.p90, reason=eta.reason)
