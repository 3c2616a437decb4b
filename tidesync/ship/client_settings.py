"""What the ship client loop is told — batch limits, send windows, intervals — and the timer
that turns an interval into due times on the monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidesync.ship.batcher import BatchLimits


@dataclass(frozen=True)
class ClientSettings:
    node_id: str
    replay_epoch: int = 0
    limits: BatchLimits = field(default_factory=BatchLimits)
    window_per_partition: int = 1000
    window_total: int = 5000
    max_open_per_partition: int = 100_000
    poll_records: int = 500
    receipts_page_size: int = 500
    receipts_interval: float = 5.0
    heartbeat_interval: float = 60.0
    topic_refresh_interval: float = 30.0
    commit_interval: float = 1.0
    idle_poll_seconds: float = 0.2
    uplink_rate: float = 0.0
    uplink_burst: float = 1024 * 1024
    # While requests get no answer, the link is probed this often, doubling up to the max.
    probe_initial_seconds: float = 1.0
    probe_max_seconds: float = 30.0


@dataclass
class PeriodicTimer:
    """A periodic action's next due time (monotonic seconds)."""

    interval: float
    next_at: float = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def done(self, now: float) -> None:
        self.next_at = now + self.interval
