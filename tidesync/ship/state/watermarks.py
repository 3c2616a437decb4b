"""Partition watermarks in the ship state store (§7.6): where each partition was read, received
and terminal up to, and the queue keys its blocked records hold.

The offsets follow from `tidesync.domain.watermarks`; this module finds the first open
positions (partial indexes) and stores the result.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from tidesync.cdc.kafka import PartitionKey, QueueUnavailable
from tidesync.domain import watermarks as offsets_math
from tidesync.domain.watermarks import OpenPositions, PartitionOffsets
from tidesync.ship.state.database import ShipStateDatabase

log = logging.getLogger(__name__)

FirstOffset = Callable[[PartitionKey], "int | None"]
"""The oldest offset the queue still holds for a partition (None: it cannot say)."""

_SELECT_WATERMARKS = (
    "SELECT topic, kafka_partition, replay_epoch, base_offset, read_offset, received_offset,"
    " terminal_offset, committed_offset, end_offset, next_source_sequence"
    " FROM partition_watermark WHERE direction = ? AND consumer_group = ?"
)
_SELECT_WATERMARK = _SELECT_WATERMARKS + " AND topic = ? AND kafka_partition = ?"
# The first offset of each open state (one O(log n) search of the partial index
# event_state_open per state: the WHERE must repeat the index's to use it).
_FIRST_PER_OPEN_STATE = (
    "SELECT open.state, (SELECT min(kafka_offset) FROM event_state WHERE direction = ?"
    " AND topic = ? AND kafka_partition = ? AND replay_epoch = ? AND state = open.state"
    " AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED')) FROM (SELECT 'CONSUMED' AS state"
    " UNION ALL SELECT 'READY' UNION ALL SELECT 'IN_FLIGHT' UNION ALL SELECT 'RECEIVED'"
    " UNION ALL SELECT 'RETRY_WAIT' UNION ALL SELECT 'BLOCKED') AS open"
)
_BLOCKED_KEYS = (
    "SELECT DISTINCT key_digest FROM event_state WHERE state = 'BLOCKED' AND direction = ?"
    " AND topic = ? AND kafka_partition = ? AND replay_epoch = ? AND key_digest IS NOT NULL"
)


@dataclass(frozen=True, slots=True)
class Watermark:
    """One partition's offsets (inclusive, -1 for none) and its next source sequence."""

    topic: str
    partition: int
    replay_epoch: int
    base_offset: int
    read_offset: int
    received_offset: int
    terminal_offset: int
    committed_offset: int | None
    end_offset: int | None
    next_source_sequence: int

    @property
    def key(self) -> PartitionKey:
        return PartitionKey(self.topic, self.partition)

    @property
    def offsets(self) -> PartitionOffsets:
        return PartitionOffsets(self.base_offset, self.read_offset, self.received_offset,
                                self.terminal_offset, self.committed_offset)

    @property
    def commit_offset(self) -> int:
        """The next offset to read after a restart: contiguous terminal + 1 (§7.6)."""
        return self.offsets.commit_offset

    @property
    def commit_due(self) -> bool:
        """The checkpoint moved past what the queue holds as committed."""
        return self.offsets.commit_due

    @property
    def open_records(self) -> int:
        """Records read but not yet terminal (an upper bound: skipped ones count too)."""
        return self.offsets.open_records


def _open_positions(firsts: list[tuple[str, int | None]]) -> OpenPositions:
    """The first open and the first unreceived offset from each open state's first offset."""
    open_offsets = [offset for _, offset in firsts if offset is not None]
    unreceived = [offset for state, offset in firsts
                  if offset is not None and state != "RECEIVED"]
    return OpenPositions(min(open_offsets, default=None), min(unreceived, default=None))


class BlockedKeys:
    """The queue key digests each partition's BLOCKED records hold (their later records wait),
    cached for the partitions this process reads; loaded when a partition starts."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database
        self._keys: dict[PartitionKey, set[bytes]] = {}

    def of(self, key: PartitionKey) -> set[bytes]:
        """The partition's held keys (the cached set itself: callers add to it)."""
        return self._keys.setdefault(key, set())

    def add(self, key: PartitionKey, digest: bytes) -> None:
        self.of(key).add(digest)

    def load(self, conn: sqlite3.Connection, key: PartitionKey, replay_epoch: int) -> None:
        rows = conn.execute(_BLOCKED_KEYS, (self.database.direction.value, key.topic,
                                            key.partition, replay_epoch)).fetchall()
        self._keys[key] = {row[0] for row in rows}

    def reload_if_cached(self, conn: sqlite3.Connection, key: PartitionKey,
                         replay_epoch: int) -> None:
        """After a disposition: a partition this process reads learns which keys it frees."""
        if key in self._keys:
            self.load(conn, key, replay_epoch)


class SQLiteWatermarks:
    """The partition_watermark rows of one direction and consumer group."""

    def __init__(self, database: ShipStateDatabase, blocked_keys: BlockedKeys) -> None:
        self.database = database
        self.blocked_keys = blocked_keys

    def _where(self) -> tuple[str, str]:
        return self.database.direction.value, self.database.consumer_group

    def watermarks(self) -> list[Watermark]:
        rows = self.database.conn.execute(
            _SELECT_WATERMARKS + " ORDER BY topic, kafka_partition", self._where()).fetchall()
        return [Watermark(*row) for row in rows]

    def watermark(self, key: PartitionKey) -> Watermark | None:
        return self.watermark_in(self.database.conn, key)

    def watermark_in(self, conn: sqlite3.Connection, key: PartitionKey) -> Watermark | None:
        row = conn.execute(_SELECT_WATERMARK, (*self._where(), key.topic,
                                               key.partition)).fetchone()
        return None if row is None else Watermark(*row)

    def start_partition(self, key: PartitionKey, replay_epoch: int,
                        first_offset: FirstOffset | None = None) -> Watermark | None:
        """The partition's watermark to resume from, or None to start at its beginning.

        A watermark of another replay epoch is replaced: a new epoch reads the partition
        again from its first offset still in the queue (`first_offset`), with new event ids
        (§7.4). The new epoch's watermark is stored at once, so a restart resumes it instead
        of finding a queue commit without state. Without `first_offset` the old watermark is
        only dropped."""
        current = self.watermark(key)
        first = None
        if current is not None and current.replay_epoch != replay_epoch and first_offset:
            first = first_offset(key)
            if first is None:
                raise QueueUnavailable(f"cannot start replay epoch {replay_epoch} on"
                                       f" {key.topic}/{key.partition}: the broker does not"
                                       " say where the partition begins")
        with self.database.transaction() as conn:
            current = self.watermark_in(conn, key)
            if current is not None and current.replay_epoch != replay_epoch:
                conn.execute(
                    "DELETE FROM partition_watermark WHERE direction = ? AND consumer_group = ?"
                    " AND topic = ? AND kafka_partition = ?",
                    (*self._where(), key.topic, key.partition))
                if first is None:
                    return None
                log.warning("%s/%d: replay epoch %d -> %d, read again from offset %d with new"
                            " event ids", key.topic, key.partition, current.replay_epoch,
                            replay_epoch, first)
                return self.create(conn, key, replay_epoch, first)
            self.blocked_keys.load(conn, key, replay_epoch)
            return current

    def create(self, conn: sqlite3.Connection, key: PartitionKey, replay_epoch: int,
               first_offset: int) -> Watermark:
        """The watermark of a partition first read at `first_offset`."""
        start = offsets_math.starting_offsets(first_offset)
        base = start.base_offset
        conn.execute(
            "INSERT INTO partition_watermark (direction, consumer_group, topic, kafka_partition,"
            " replay_epoch, base_offset, read_offset, received_offset, terminal_offset,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*self._where(), key.topic, key.partition, replay_epoch, base, start.read_offset,
             start.received_offset, start.terminal_offset, self.database.now_text()))
        self.blocked_keys.of(key)
        return Watermark(key.topic, key.partition, replay_epoch, base, start.read_offset,
                         start.received_offset, start.terminal_offset, None, None, 1)

    def advance(self, conn: sqlite3.Connection, watermark: Watermark, read_offset: int,
                next_sequence: int) -> Watermark:
        """Store the read position and recompute the contiguous received/terminal offsets."""
        params = (self.database.direction.value, watermark.topic, watermark.partition,
                  watermark.replay_epoch)
        open_positions = _open_positions(conn.execute(_FIRST_PER_OPEN_STATE, params).fetchall())
        moved = offsets_math.advance(watermark.offsets, read_offset, open_positions)
        conn.execute(
            "UPDATE partition_watermark SET read_offset = ?, received_offset = ?,"
            " terminal_offset = ?, next_source_sequence = ?, updated_at = ?"
            " WHERE direction = ? AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
            (moved.read_offset, moved.received_offset, moved.terminal_offset, next_sequence,
             self.database.now_text(), *self._where(), watermark.topic, watermark.partition))
        return replace(watermark, read_offset=moved.read_offset,
                       received_offset=moved.received_offset,
                       terminal_offset=moved.terminal_offset, next_source_sequence=next_sequence)

    def recompute(self, conn: sqlite3.Connection, key: PartitionKey,
                  replay_epoch: int | None = None) -> None:
        """Recompute a partition's received/terminal offsets after its records' states moved
        (only if its watermark is of `replay_epoch`, when given)."""
        watermark = self.watermark_in(conn, key)
        if watermark is not None and replay_epoch in (None, watermark.replay_epoch):
            self.advance(conn, watermark, watermark.read_offset, watermark.next_source_sequence)

    def recompute_all(self, conn: sqlite3.Connection, keys: Iterable[PartitionKey]) -> None:
        for topic, partition in sorted({(key.topic, key.partition) for key in keys}):
            self.recompute(conn, PartitionKey(topic, partition))

    def mark_committed(self, offsets: dict[PartitionKey, int]) -> None:
        """Remember the offsets committed to the queue (for status; the queue holds them)."""
        with self.database.transaction() as conn:
            conn.executemany(
                "UPDATE partition_watermark SET committed_offset = ? WHERE direction = ?"
                " AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
                [(offset, *self._where(), key.topic, key.partition)
                 for key, offset in offsets.items()])

    def set_end_offsets(self, offsets: dict[PartitionKey, int]) -> None:
        with self.database.transaction() as conn:
            conn.executemany(
                "UPDATE partition_watermark SET end_offset = ? WHERE direction = ?"
                " AND consumer_group = ? AND topic = ? AND kafka_partition = ?",
                [(offset, *self._where(), key.topic, key.partition)
                 for key, offset in offsets.items()])
