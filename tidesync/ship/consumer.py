"""The CDC queue consumer: reads `^sync\\.cdc\\.` topics, normalizes, records in the state store.

Partitions are assigned (no group join) from the state store's terminal watermark; the queue
commit follows the contiguous terminal offset + 1 only after SQLite has committed it (§7.6).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable, Set
from dataclasses import dataclass, fields
from typing import Protocol

from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord
from tidesync.cdc.kafka import (
    KafkaQueue,
    PartitionKey,
)
from tidesync.cdc.outcomes import Block, BlockReason, Normalized, Outcome, Skip, SkipReason
from tidesync.domain.clock import Monotonic
from tidesync.domain.rules.runtime import Filtered, Shaped
from tidesync.domain.slots import slot_builder
from tidesync.ship.rules import ShipRules
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.intake import Consumed, Recorded, platform_write_id, queue_key_digest
from tidesync.ship.state.watermarks import Watermark

log = logging.getLogger(__name__)

_BUILD_CONSUMED = slot_builder(Consumed, [field.name for field in fields(Consumed)])
"""Consumed(...) built slot by slot: one is made for every record read."""
_END_CHECK_SECONDS = 0.5
"""How often, at most, an empty poll compares the partitions not known to be at their end with
their high watermarks (the end-of-partition event alone can be missed)."""


class QueueReason(enum.StrEnum):
    """Why a partition is not consumed, or why the queue is unhealthy."""

    STATE_MISSING = "STATE_MISSING"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    PARTITION_ERROR = "PARTITION_ERROR"
    BROKER_UNREACHABLE = "BROKER_UNREACHABLE"
    NO_CDC_TOPICS = "NO_CDC_TOPICS"


@dataclass
class PartitionProgress:
    """What the consumer knows of one assigned partition between polls."""

    at_end: bool = False
    paused: bool = False
    blocked_reason: str | None = None
    next_offset: int | None = None
    """The offset after the last record read, or where the partition was assigned (None: its
    beginning, nothing read yet)."""


class SideReader(Protocol):
    """Reads records of its own beside the consumer (a replay by range): `poll` adds what it
    recorded to the consumer's poll, except for partitions paused by a full window."""

    def poll(self, into: Recorded, paused: Set[PartitionKey]) -> None: ...

    def caught_up(self) -> bool: ...


class QueueConsumer:
    """Reads assigned partitions, normalizes each record and records the outcome durably.

    `poll` returns what the state store decided (including events to send); `commit` pushes
    the terminal watermarks to the queue. A partition without a state row but with a queue
    commit is not consumed (STATE_MISSING): its sequences cannot be continued safely.
    """

    def __init__(self, queue: KafkaQueue, normalizer: DebeziumNormalizer,
                 state: SQLiteShipState, replay_epoch: int,
                 rules: ShipRules | None = None, *,
                 monotonic: Monotonic = time.monotonic) -> None:
        self.queue = queue
        self.normalizer = normalizer
        self.state = state
        self.replay_epoch = replay_epoch
        self.rules = rules
        self.filtered = 0
        self.bidirectional = normalizer.settings.bidirectional_tables
        self.partitions: dict[PartitionKey, PartitionProgress] = {}
        self.side: SideReader | None = None
        self.monotonic = monotonic
        self._ends_checked_at: float | None = None

    def refresh(self) -> list[PartitionKey]:
        """Assign partitions not yet assigned (new topics appear over time); returns them."""
        new = [key for key in self.queue.partitions() if key not in self.partitions]
        if not new:
            return []
        resumes = {key: self.state.start_partition(key, self.replay_epoch,
                                                   self.queue.first_offset)
                   for key in new}
        committed = self.queue.committed([k for k, wm in resumes.items() if wm is None])
        starts: dict[PartitionKey, int | None] = {}
        for key in new:
            progress = self.partitions[key] = PartitionProgress()
            watermark = resumes[key]
            if watermark is None and committed.get(key) is not None:
                progress.blocked_reason = QueueReason.STATE_MISSING
                log.error("partition %s/%d has a queue commit but no state: not consumed",
                          key.topic, key.partition)
                continue
            starts[key] = progress.next_offset = (None if watermark is None
                                                  else watermark.commit_offset)
        self.queue.assign(starts)
        return new

    def poll(self, max_records: int, timeout: float) -> Recorded:
        polled = self.queue.poll(max_records, timeout)
        for key, reason in polled.errors.items():
            self._block(key, reason)
        blocked = {(key.topic, key.partition) for key, progress in self.partitions.items()
                   if progress.blocked_reason is not None}
        items = [self._consumed(record) for record in polled.records
                 if not blocked or (record.topic, record.partition) not in blocked]
        # Records come in offset order within a partition: the last one of each is kept.
        last = {(record.topic, record.partition): record.offset for record in polled.records}
        for (topic, partition), offset in last.items():
            progress = self.partitions.setdefault(PartitionKey(topic, partition),
                                                  PartitionProgress())
            progress.at_end, progress.next_offset = False, offset + 1
        for key, end in polled.at_end.items():
            self.partitions.setdefault(key, PartitionProgress()).at_end = True
            log.debug("partition %s/%d at its end %d", key.topic, key.partition, end)
        if not (polled.records or polled.at_end or polled.errors):
            self._check_ends()
        recorded = self.state.record(items, self.replay_epoch) if items else Recorded()
        if self.side is not None:
            self.side.poll(recorded, {key for key, p in self.partitions.items() if p.paused})
        return recorded

    def _check_ends(self) -> None:
        """Mark at their end the partitions read up to their high watermark (as of the last
        fetch), at most every `_END_CHECK_SECONDS`. The end-of-partition event is reported
        once per fetch position: one not taken in (lost with a poll that failed) is never
        reported again, which would leave `caught_up` false although nothing is left to read.
        Only on an empty poll: reading records costs nothing more."""
        now = self.monotonic()
        if self._ends_checked_at is not None and now - self._ends_checked_at < _END_CHECK_SECONDS:
            return
        self._ends_checked_at = now
        for key, progress in self.partitions.items():
            if progress.at_end or progress.paused or progress.blocked_reason is not None:
                continue
            end = self.queue.end_offset(key)
            if end is not None and end <= (progress.next_offset or 0):
                progress.at_end = True
                log.debug("partition %s/%d read to its high watermark %d", key.topic,
                          key.partition, end)

    def _consumed(self, record: KafkaRecord) -> Consumed:
        outcome = self.normalizer.normalize(record)
        size = len(record.key or b"") + len(record.value or b"")
        platform_id = None
        if isinstance(outcome, Normalized) and (
                outcome.event.database, outcome.event.table) in self.bidirectional:
            # Loop suppression (§12): only tables synced both ways carry the metadata.
            platform_id = platform_write_id(outcome.event)
        if isinstance(outcome, Normalized) and self.rules is not None:
            outcome = self._shaped(self.rules, record, outcome)
        return _BUILD_CONSUMED(record.topic, record.partition, record.offset, outcome, size,
                               queue_key_digest(record.key), platform_id)

    def _shaped(self, rules: ShipRules, record: KafkaRecord, normalized: Normalized
                ) -> Outcome:
        """The event as the rules in force at this record's offset make it (§8.3): shaped,
        filtered out (passed like a skipped record: no row, no source sequence) or blocked
        when its rule cannot be applied to it. The loop check above saw it as captured."""
        key = PartitionKey(record.topic, record.partition)
        outcome = rules.shape(key, record.offset, normalized.event)
        if isinstance(outcome, Shaped):
            return Normalized(outcome.event)
        if isinstance(outcome, Filtered):
            self.filtered += 1
            return Skip(SkipReason.RULE_FILTERED, outcome.reason.value)
        return Block(BlockReason.RULE_NOT_APPLICABLE, outcome.detail)

    def _block(self, key: PartitionKey, error_name: str) -> None:
        reason = (QueueReason.OFFSET_OUT_OF_RANGE if "OFFSET" in error_name
                  else QueueReason.PARTITION_ERROR)
        progress = self.partitions.setdefault(key, PartitionProgress())
        progress.blocked_reason = reason
        log.error("partition %s/%d stopped: %s (%s)", key.topic, key.partition, reason,
                  error_name)
        self.queue.pause([key])

    def set_paused(self, wanted: set[PartitionKey]) -> None:
        """Pause exactly the partitions in `wanted` (bounded windows), resume the others."""
        to_pause = [k for k, p in self.partitions.items() if k in wanted and not p.paused
                    and p.blocked_reason is None]
        to_resume = [k for k, p in self.partitions.items() if k not in wanted and p.paused
                     and p.blocked_reason is None]
        if to_pause:
            self.queue.pause(to_pause)
        if to_resume:
            self.queue.resume(to_resume)
        for key in to_pause:
            self.partitions[key].paused = True
        for key in to_resume:
            self.partitions[key].paused = False

    def rewind(self, key: PartitionKey, offset: int) -> None:
        """Read an assigned partition again from `offset` (a shore's resend request): the
        records met again are re-read as after a restart, so their rows decide."""
        self.queue.unassign([key])
        self.queue.assign({key: offset})
        progress = self.partitions.setdefault(key, PartitionProgress())
        progress.at_end, progress.next_offset = False, offset
        if progress.paused:  # a new assignment fetches: keep the window's pause
            self.queue.pause([key])

    def commit(self, watermarks: Iterable[Watermark]) -> dict[PartitionKey, int]:
        """Commit terminal + 1 of every partition whose checkpoint moved; returns them."""
        due = {wm.key: wm.commit_offset for wm in watermarks
               if wm.key in self.partitions and wm.commit_due}
        if due:
            self.queue.commit(due)
            self.state.mark_committed(due)
        return due

    def caught_up(self) -> bool:
        """Every consumable partition has been read to its end."""
        return all(p.at_end for p in self.partitions.values()
                   if p.blocked_reason is None and not p.paused) and (
            self.side is None or self.side.caught_up())

    def blocked_partitions(self) -> dict[PartitionKey, str]:
        return {key: p.blocked_reason for key, p in self.partitions.items()
                if p.blocked_reason is not None}

    def end_offsets(self) -> dict[PartitionKey, int]:
        ends = {key: self.queue.end_offset(key) for key in self.partitions}
        return {key: end for key, end in ends.items() if end is not None}

