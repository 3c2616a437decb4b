"""The CDC queue consumer: reads `^sync\\.cdc\\.` topics, normalizes, records in the state store.

Partitions are assigned (no group join) from the state store's terminal watermark; the queue
commit follows the contiguous terminal offset + 1 only after SQLite has committed it (§7.6).
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, Normalized
from tidesync.ship.state import (
    Consumed,
    PartitionKey,
    Recorded,
    SQLiteShipState,
    Watermark,
    key_digest,
    platform_write_id,
)

log = logging.getLogger(__name__)

_CONNECTIVITY_ERRORS = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError._TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
})


class QueueReason(enum.StrEnum):
    """Why a partition is not consumed, or why the queue is unhealthy."""

    STATE_MISSING = "STATE_MISSING"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    PARTITION_ERROR = "PARTITION_ERROR"
    BROKER_UNREACHABLE = "BROKER_UNREACHABLE"
    NO_CDC_TOPICS = "NO_CDC_TOPICS"


class QueueUnavailable(Exception):
    """The broker cannot be reached or answered with an error for the whole consumer."""


@dataclass(frozen=True)
class QueueSettings:
    """How the client reads the queue. Prefetch limits keep memory flat under any backlog."""

    bootstrap_servers: str
    group_id: str
    topic_pattern: str = r"^sync\.cdc\."
    options: Mapping[str, str] = field(default_factory=dict)
    request_timeout: float = 10.0

    def consumer_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # An assigned offset the broker no longer has is an error, never a silent jump.
            "auto.offset.reset": "error",
            # Prefetch at most a few MiB whatever the backlog (librdkafka's default is 64 MiB).
            "queued.max.messages.kbytes": 8192,
            "queued.min.messages": 2000,
            "fetch.max.bytes": 8 * 1024 * 1024,
            "max.partition.fetch.bytes": 2 * 1024 * 1024,
            "fetch.wait.max.ms": 200,
            "socket.keepalive.enable": True,
            "log_level": 3,
            **self.options,
        }


@dataclass
class Polled:
    """One poll: records in the order read, partitions found at their end, partition errors."""

    records: list[KafkaRecord] = field(default_factory=list)
    at_end: dict[PartitionKey, int] = field(default_factory=dict)
    errors: dict[PartitionKey, str] = field(default_factory=dict)


def parse_options(text: str) -> dict[str, str]:
    """`key=value,key=value` → librdkafka settings."""
    items = (item.strip() for item in text.split(","))
    return dict(item.split("=", 1) for item in items if item)


class KafkaQueue:
    """The queue through confluent-kafka: explicit assignment, pause/resume, manual commits."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.consumer = Consumer(settings.consumer_config())
        self.pattern = re.compile(settings.topic_pattern)

    def partitions(self) -> list[PartitionKey]:
        """Every partition of every topic matching the pattern."""
        try:
            metadata = self.consumer.list_topics(timeout=self.settings.request_timeout)
        except KafkaException as error:
            raise QueueUnavailable(f"cannot list topics: {error.args[0]}") from error
        return sorted(
            PartitionKey(name, number)
            for name, topic in metadata.topics.items()
            if self.pattern.search(name) and topic.error is None
            for number in topic.partitions
        )

    def committed(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        partitions = [TopicPartition(key.topic, key.partition) for key in keys]
        if not partitions:
            return {}
        try:
            found = self.consumer.committed(partitions, timeout=self.settings.request_timeout)
        except KafkaException as error:
            raise QueueUnavailable(f"cannot read committed offsets: {error.args[0]}") from error
        return {PartitionKey(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None
                for tp in found}

    def assign(self, starts: Mapping[PartitionKey, int | None]) -> None:
        """Add partitions to the assignment, each at its offset (None: the beginning)."""
        self.consumer.incremental_assign([
            TopicPartition(key.topic, key.partition,
                           OFFSET_BEGINNING if offset is None else offset)
            for key, offset in starts.items()])

    def poll(self, max_records: int, timeout: float) -> Polled:
        polled = Polled()
        try:
            # consume() waits for all `max_records` or the timeout: take what is there, and
            # wait (for the first record only) when there is nothing.
            messages = self.consumer.consume(num_messages=max_records, timeout=0)
            if not messages and timeout > 0:
                first = self.consumer.poll(timeout)
                messages = [] if first is None else [first, *self.consumer.consume(
                    num_messages=max_records - 1, timeout=0)]
        except KafkaException as error:
            raise QueueUnavailable(f"consume failed: {error.args[0]}") from error
        for message in messages:
            problem = message.error()
            if problem is None:
                polled.records.append(_record(message))
                continue
            topic, partition = message.topic(), message.partition()
            if topic is None or partition is None or problem.code() in _CONNECTIVITY_ERRORS:
                raise QueueUnavailable(f"queue error {problem.name()}")
            if problem.code() == KafkaError._PARTITION_EOF:
                polled.at_end[PartitionKey(topic, partition)] = message.offset() or 0
            else:
                polled.errors[PartitionKey(topic, partition)] = problem.name()
        return polled

    def pause(self, keys: Iterable[PartitionKey]) -> None:
        self.consumer.pause([TopicPartition(k.topic, k.partition) for k in keys])

    def resume(self, keys: Iterable[PartitionKey]) -> None:
        self.consumer.resume([TopicPartition(k.topic, k.partition) for k in keys])

    def commit(self, offsets: Mapping[PartitionKey, int]) -> None:
        try:
            self.consumer.commit(offsets=[TopicPartition(k.topic, k.partition, offset)
                                          for k, offset in offsets.items()],
                                 asynchronous=False)
        except KafkaException as error:
            raise QueueUnavailable(f"commit failed: {error.args[0]}") from error

    def end_offset(self, key: PartitionKey) -> int | None:
        """The partition's end (next offset to be written) as of the last fetch, or None.

        Cached on purpose: some brokers answer ListOffsets(latest) with the last batch's
        base offset + 1, while fetch responses carry the true high watermark."""
        try:
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(key.topic, key.partition), cached=True)
        except KafkaException:
            return None
        return int(high) if high is not None and high >= 0 else None

    def close(self) -> None:
        self.consumer.close()


def _record(message: Any) -> KafkaRecord:
    kind, timestamp = message.timestamp()
    return KafkaRecord(
        topic=message.topic(), partition=message.partition(), offset=message.offset(),
        key=message.key(), value=message.value(),
        headers=tuple(message.headers() or ()),
        timestamp_ms=timestamp if kind != 0 and timestamp >= 0 else None,
    )


@dataclass
class PartitionProgress:
    """What the consumer knows of one assigned partition between polls."""

    at_end: bool = False
    paused: bool = False
    blocked_reason: str | None = None


class QueueConsumer:
    """Reads assigned partitions, normalizes each record and records the outcome durably.

    `poll` returns what the state store decided (including events to send); `commit` pushes
    the terminal watermarks to the queue. A partition without a state row but with a queue
    commit is not consumed (STATE_MISSING): its sequences cannot be continued safely.
    """

    def __init__(self, queue: KafkaQueue, normalizer: DebeziumNormalizer,
                 state: SQLiteShipState, replay_epoch: int) -> None:
        self.queue = queue
        self.normalizer = normalizer
        self.state = state
        self.replay_epoch = replay_epoch
        self.bidirectional = normalizer.settings.bidirectional_tables
        self.partitions: dict[PartitionKey, PartitionProgress] = {}

    def refresh(self) -> list[PartitionKey]:
        """Assign partitions not yet assigned (new topics appear over time); returns them."""
        new = [key for key in self.queue.partitions() if key not in self.partitions]
        if not new:
            return []
        resumes = {key: self.state.start_partition(key, self.replay_epoch) for key in new}
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
            starts[key] = None if watermark is None else watermark.commit_offset
        self.queue.assign(starts)
        return new

    def poll(self, max_records: int, timeout: float) -> Recorded:
        polled = self.queue.poll(max_records, timeout)
        for key, reason in polled.errors.items():
            self._block(key, reason)
        items = [self._consumed(record) for record in polled.records
                 if not self._is_blocked(record)]
        for record in polled.records:
            self.partitions.setdefault(PartitionKey(record.topic, record.partition),
                                       PartitionProgress()).at_end = False
        for key, end in polled.at_end.items():
            self.partitions.setdefault(key, PartitionProgress()).at_end = True
            log.debug("partition %s/%d at its end %d", key.topic, key.partition, end)
        return self.state.record(items, self.replay_epoch) if items else Recorded()

    def _consumed(self, record: KafkaRecord) -> Consumed:
        outcome = self.normalizer.normalize(record)
        size = len(record.key or b"") + len(record.value or b"")
        platform_id = None
        if isinstance(outcome, Normalized) and (
                outcome.event.database, outcome.event.table) in self.bidirectional:
            # Loop suppression (§12): only tables synced both ways carry the metadata.
            platform_id = platform_write_id(outcome.event)
        return Consumed(record.topic, record.partition, record.offset, outcome, size,
                        key_digest(record.key), platform_id)

    def _is_blocked(self, record: KafkaRecord) -> bool:
        progress = self.partitions.get(PartitionKey(record.topic, record.partition))
        return progress is not None and progress.blocked_reason is not None

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
                   if p.blocked_reason is None and not p.paused)

    def blocked_partitions(self) -> dict[PartitionKey, str]:
        return {key: p.blocked_reason for key, p in self.partitions.items()
                if p.blocked_reason is not None}

    def end_offsets(self) -> dict[PartitionKey, int]:
        ends = {key: self.queue.end_offset(key) for key in self.partitions}
        return {key: end for key, end in ends.items() if end is not None}

