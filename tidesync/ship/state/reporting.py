"""What the ship state store reports (§15, §17): subsystem health, event counts, backlogs, and
the queue_metric samples that feed the offline ETA.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from tidesync.cdc.kafka import PartitionKey
from tidesync.ship.state.database import ShipStateDatabase
from tidesync.ship.state.watermarks import Watermark

_OPEN_BACKLOG = (
    "SELECT count(*), coalesce(sum(bytes), 0), min(captured_at), min(rule_id) FROM event_state"
    " WHERE direction = ? AND topic = ? AND kafka_partition = ? AND replay_epoch = ?"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED')"
)
_QUEUE_METRIC = (
    "INSERT OR IGNORE INTO queue_metric (sampled_at, rule_id, state, events, bytes,"
    " oldest_captured_at, newest_captured_at) SELECT ?, coalesce(rule_id, ''), state, count(*),"
    " sum(bytes), min(captured_at), max(captured_at) FROM event_state WHERE direction = ?"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED') GROUP BY rule_id, state"
)


@dataclass(frozen=True, slots=True)
class Health:
    subsystem: str
    state: str
    reason_code: str
    detail: str
    since: dt.datetime


@dataclass(frozen=True, slots=True)
class ShoreVerdicts:
    """The shore's latest verdicts of this ship's terminal events: how many of each result,
    and the rejected ones by reason code (most frequent first)."""

    by_result: dict[str, int]
    rejected_by_reason: list[tuple[str, int]]
    rejected_since: dt.datetime | None = None  # the oldest standing rejection's arrival

    @property
    def rejected(self) -> int:
        return self.by_result.get("REJECTED", 0)

    def summary(self, top: int = 3) -> str:
        """"N events rejected on the shore: top reasons A (n), B (m)" (no business values)."""
        reasons = ", ".join(f"{reason} ({count})"
                            for reason, count in self.rejected_by_reason[:top])
        return f"{self.rejected} events rejected on the shore: top reasons {reasons}"


@dataclass(frozen=True, slots=True)
class PartitionBacklog:
    """Open (not terminal) events of a partition: count, bytes, oldest capture time (µs)."""

    key: PartitionKey
    events: int
    bytes: int
    oldest_captured_micros: int | None
    rule_id: str | None


class SQLiteStateReports:
    """subsystem_health and queue_metric, and the counts read off event_state."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database

    def set_health(self, items: Iterable[Health]) -> None:
        with self.database.transaction() as conn:
            conn.executemany(
                "INSERT INTO subsystem_health (subsystem, state, reason_code, detail, since)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (subsystem) DO UPDATE SET"
                " state = excluded.state, reason_code = excluded.reason_code,"
                " detail = excluded.detail, since = excluded.since",
                [(h.subsystem, h.state, h.reason_code, h.detail, h.since.isoformat())
                 for h in items])

    def health(self) -> list[Health]:
        rows = self.database.conn.execute(
            "SELECT subsystem, state, reason_code, detail, since"
            " FROM subsystem_health ORDER BY subsystem").fetchall()
        return [Health(r[0], r[1], r[2], r[3], dt.datetime.fromisoformat(r[4])) for r in rows]

    def state_counts(self) -> dict[str, int]:
        """Events per state; pruned ones (`retention`) count as TERMINAL."""
        rows = self.database.conn.execute(
            "SELECT state, count(*) FROM event_state WHERE direction = ?"
            " GROUP BY state", (self.database.direction.value,)).fetchall()
        counts = {row[0]: row[1] for row in rows}
        pruned = sum(self._pruned().values())
        if pruned:
            counts["TERMINAL"] = counts.get("TERMINAL", 0) + pruned
        return counts

    def _pruned(self) -> dict[str, int]:
        rows = self.database.conn.execute(
            "SELECT result, events FROM pruned_event_count WHERE direction = ?",
            (self.database.direction.value,)).fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def shore_verdicts(self) -> ShoreVerdicts:
        """Terminal events by the shore's result (pruned ones included), and the rejected
        ones by reason."""
        direction = self.database.direction.value
        results = self.database.conn.execute(
            "SELECT result, count(*) FROM event_state WHERE direction = ? AND state = 'TERMINAL'"
            " AND result IS NOT NULL GROUP BY result ORDER BY result", (direction,)).fetchall()
        reasons = self.database.conn.execute(
            "SELECT coalesce(reason, ''), count(*) AS events FROM event_state"
            " WHERE direction = ? AND state = 'TERMINAL' AND result = 'REJECTED'"
            " GROUP BY 1 ORDER BY events DESC, 1", (direction,)).fetchall()
        since = self.database.conn.execute(
            "SELECT min(updated_at) FROM event_state WHERE direction = ? AND state = 'TERMINAL'"
            " AND result = 'REJECTED'", (direction,)).fetchone()[0]
        by_result = {str(r[0]): int(r[1]) for r in results}
        for result, events in self._pruned().items():
            by_result[result] = by_result.get(result, 0) + events
        return ShoreVerdicts(dict(sorted(by_result.items())),
                             [(str(r[0]) or "UNSPECIFIED", int(r[1])) for r in reasons],
                             dt.datetime.fromisoformat(since) if since else None)

    def awaits_receipts(self) -> bool:
        """Whether any event waits for its receipt: the first RECEIVED row along the state
        index, not a count of them all (this runs after every answer and receipts page)."""
        row = self.database.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM event_state WHERE state = 'RECEIVED'"
            " AND direction = ?)", (self.database.direction.value,)).fetchone()
        return bool(row[0])

    def backlog(self, watermark: Watermark) -> PartitionBacklog:
        row = self.database.conn.execute(
            _OPEN_BACKLOG, (self.database.direction.value, watermark.topic,
                            watermark.partition, watermark.replay_epoch)).fetchone()
        return PartitionBacklog(watermark.key, row[0], row[1], row[2], row[3])

    def average_bytes(self) -> float:
        """Mean recorded size of an event (for estimating unread backlog bytes)."""
        row = self.database.conn.execute(
            "SELECT avg(bytes) FROM (SELECT bytes FROM event_state WHERE direction = ?"
            " ORDER BY rowid DESC LIMIT 1000)", (self.database.direction.value,)).fetchone()
        return float(row[0] or 0.0)

    def record_metrics(self, sampled_at: dt.datetime) -> None:
        """One queue_metric row per rule and open state (the offline ETA input, §15)."""
        with self.database.transaction() as conn:
            conn.execute(_QUEUE_METRIC, (sampled_at.isoformat(), self.database.direction.value))
