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
    window_per_partition: int = 10_000
    window_total: int = 20_000
    window_bytes: int = 48 * 1024 * 1024
    """Most bytes (queue record sizes) the window holds: large rows pause reading sooner.
    Records with schemas are several times the events they become, so for small rows the
    counts above bind first; the window must hold the uploads in flight and the next one."""
    max_open_per_partition: int = 100_000
    retain_offsets: int = 200_000
    """Applied events further than this behind a partition's queue commit are pruned from the
    state file (0: never); at most `prune_chunk` rows after each commit."""
    prune_chunk: int = 5_000
    poll_records: int = 500
    receipts_page_size: int = 5000
    receipts_interval: float = 5.0
    # After an upload the shore answered RECEIVED, receipts are asked at most this soon (the
    # shore applies first): never one receipts request per upload.
    receipts_after_upload: float = 1.0
    heartbeat_interval: float = 60.0
    topic_refresh_interval: float = 5.0
    commit_interval: float = 1.0
    idle_poll_seconds: float = 0.2
    # Uploads side by side (each on its own connection; keep below the shore's
    # node_max_concurrent_requests, which the ship's other requests share), and the link time
    # one upload request aims at (its size follows the measured goodput).
    uploads_in_flight: int = 3
    upload_request_seconds: float = 1.0
    upload_initial_bytes: int = 64 * 1024
    # While requests get no answer, the link is probed this often, doubling up to the max.
    probe_initial_seconds: float = 1.0
    probe_max_seconds: float = 30.0
    # Rules' schedules (§13.3) are read in this IANA zone, on a clock the shore's time keeps
    # trusted; a system clock further off than `clock_jump_seconds` holds scheduled BULK rules.
    timezone: str = "UTC"
    clock_jump_seconds: float = 300.0


@dataclass
class PeriodicTimer:
    """A periodic action's next due time (monotonic seconds)."""

    interval: float
    next_at: float = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def done(self, now: float) -> None:
        self.next_at = now + self.interval

    def due_within(self, now: float, seconds: float) -> None:
        """Make the action due `seconds` from now at the latest (earlier if it already is)."""
        self.next_at = min(self.next_at, now + seconds)
