"""The `[projections]` settings of the read side's views."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProjectionsConfig:
    """The read side's views (`tidesync shore work`, `tidesync projections`): notifications
    per batch (one transaction each), and how often inputs that are not event streams
    (heartbeats, the inbox) are copied into their views (0: every round). The conflict
    center's SLA is `conflicts.manual_sla_hours`."""

    batch_size: int = 50
    refresh_seconds: int = 5

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.batch_size <= 100_000:
            problems.append("projections.batch_size: must be 1..100000")
        if self.refresh_seconds < 0:
            problems.append("projections.refresh_seconds: must be >= 0")
        return problems
