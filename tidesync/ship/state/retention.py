"""Pruning applied events from the ship state store, so the file and its indexes stop growing
with every event ever sent (§7.5).

An event row is pruned once it is TERMINAL with the shore's plain APPLIED result, its partition's
queue commit has passed it, and it lies more than `retain_offsets` behind that commit. Nothing
reads such a row again: a restart re-reads the queue from the commit on, and the shore never
changes an APPLIED verdict. The newest `retain_offsets` records of each partition stay, so that a
record the capture emits again after a crash (within seconds or minutes of the first) is still
recognised by its capture coordinates. Rejected, conflicting, blocked and duplicate records stay
for good (the shore may still replay a rejected event, and operators act on blocked ones), and so
does every row of a partition whose commit is held. Pruned events still count in the reports:
`pruned_event_count` holds how many of each result were pruned.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidesync.cdc.kafka import PartitionKey
from tidesync.ship.state.database import ShipStateDatabase
from tidesync.ship.state.watermarks import Watermark

_PRUNABLE = (
    "SELECT rowid, kafka_offset FROM event_state INDEXED BY event_state_position"
    " WHERE topic = ? AND kafka_partition = ? AND kafka_offset >= ? AND kafka_offset < ?"
    " AND direction = ? AND state = 'TERMINAL' AND result = 'APPLIED' AND reason IS NULL"
    " ORDER BY kafka_offset LIMIT ?"
)
_COUNT_PRUNED = (
    "INSERT INTO pruned_event_count (direction, result, events) VALUES (?, 'APPLIED', ?)"
    " ON CONFLICT (direction, result) DO UPDATE SET events = events + excluded.events"
)


class SQLiteRetention:
    """Prunes applied events behind each partition's queue commit, a chunk at a time."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database
        # Per partition, the offset below which nothing prunable is left (this process's
        # knowledge: a restart looks from the start once, past the rows kept for good).
        self._done_below: dict[PartitionKey, int] = {}

    def prune(self, watermarks: Iterable[Watermark], retain_offsets: int, limit: int) -> int:
        """Delete up to `limit` prunable rows (oldest first, partition by partition) in one
        transaction; returns how many were deleted."""
        # Partitions with offsets left to look at: (key, from, below). Usually none, and then
        # no write transaction is opened at all.
        spans = [(wm.key, self._done_below.get(wm.key, 0),
                  wm.committed_offset - retain_offsets)
                 for wm in watermarks if wm.committed_offset is not None]
        spans = [span for span in spans if span[2] > span[1]]
        if not spans:
            return 0
        pruned = 0
        direction = self.database.direction.value
        with self.database.transaction() as conn:
            for key, start, below in spans:
                if pruned >= limit:
                    break
                wanted = limit - pruned
                rows = conn.execute(_PRUNABLE, (key.topic, key.partition, start, below,
                                                direction, wanted)).fetchall()
                conn.executemany("DELETE FROM event_state WHERE rowid = ?",
                                 [(row[0],) for row in rows])
                pruned += len(rows)
                # A short chunk reached `below`; a full one goes on after its last row.
                self._done_below[key] = below if len(rows) < wanted else rows[-1][1] + 1
            if pruned:
                conn.execute(_COUNT_PRUNED, (direction, pruned))
        return pruned
