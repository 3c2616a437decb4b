"""Reading change topics through confluent-kafka, for the ship client and the shore CDC
consumer alike: explicit assignment (no group join, no rebalancing), pause and resume, manual
commits only, bounded prefetch, and broker failures as one exception."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from tidesync.cdc.debezium import KafkaRecord
from tidesync.domain.errors import Unavailable
from tidesync.domain.slots import slot_builder


@dataclass(frozen=True, slots=True, order=True)
class PartitionKey:
    topic: str
    partition: int


_CONNECTIVITY_ERRORS = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError._TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
})


class QueueUnavailable(Unavailable):
    """The broker cannot be reached or answered with an error for the whole consumer."""


@dataclass(frozen=True)
class QueueSettings:
    """How the client reads the queue. Prefetch limits keep memory flat under any backlog."""

    bootstrap_servers: str
    group_id: str
    topic_pattern: str
    options: Mapping[str, str] = field(default_factory=dict)
    request_timeout: float = 10.0

    def consumer_config(self) -> dict[str, Any]:
        tuning = {
            # Prefetch at most a few MiB whatever the backlog (librdkafka's default is 64 MiB).
            "queued.max.messages.kbytes": 4096,
            "queued.min.messages": 2000,
            "fetch.max.bytes": 4 * 1024 * 1024,
            "max.partition.fetch.bytes": 1024 * 1024,
            "fetch.wait.max.ms": 200,
            # With the prefetch full, fetch again this soon (librdkafka waits 1 s by default,
            # which leaves a consumer that drains its prefetch quickly idle most of the time).
            "fetch.queue.backoff.ms": 20,
            "socket.keepalive.enable": True,
            "log_level": 3,
        }
        # Options may tune the client; the settings delivery rests on always win.
        return {
            **tuning,
            **self.options,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # An assigned offset the broker no longer has is an error, never a silent jump.
            "auto.offset.reset": "error",
        }


@dataclass
class Polled:
    """One poll: records in the order read, partitions found at their end, partition errors."""

    records: list[KafkaRecord] = field(default_factory=list)
    at_end: dict[PartitionKey, int] = field(default_factory=dict)
    errors: dict[PartitionKey, str] = field(default_factory=dict)


class KafkaQueue:
    """The queue through confluent-kafka: explicit assignment, pause/resume, manual commits."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.consumer = Consumer(settings.consumer_config())
        self.pattern = re.compile(settings.topic_pattern)
        self._failure: str | None = None

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
        """What the consumer has read. A broker failure met among messages is raised once
        they are returned: at the next poll (what was read is never dropped with it)."""
        if self._failure is not None:
            earlier, self._failure = self._failure, None
            raise QueueUnavailable(earlier)
        polled = Polled()
        failure: str | None = None
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
                polled.records.append(record_of(message))
                continue
            topic, partition = message.topic(), message.partition()
            if topic is None or partition is None or problem.code() in _CONNECTIVITY_ERRORS:
                failure = failure or f"queue error {problem.name()}"
            elif problem.code() == KafkaError._PARTITION_EOF:
                polled.at_end[PartitionKey(topic, partition)] = message.offset() or 0
            else:
                polled.errors[PartitionKey(topic, partition)] = problem.name()
        if failure is not None:
            if not (polled.records or polled.at_end or polled.errors):
                raise QueueUnavailable(failure)
            self._failure = failure
        return polled

    def unassign(self, keys: Iterable[PartitionKey]) -> None:
        """Remove partitions from the assignment (to assign them again at another offset)."""
        partitions = [TopicPartition(k.topic, k.partition) for k in keys]
        if partitions:
            self.consumer.incremental_unassign(partitions)

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

    def first_offset(self, key: PartitionKey) -> int | None:
        """The oldest offset the broker still holds for the partition (asked now, not
        cached: retention moves it), or None when the broker cannot say."""
        try:
            low, _ = self.consumer.get_watermark_offsets(
                TopicPartition(key.topic, key.partition),
                timeout=self.settings.request_timeout, cached=False)
        except KafkaException:
            return None
        return int(low) if low is not None and low >= 0 else None

    def close(self) -> None:
        self.consumer.close()


_BUILD_RECORD = slot_builder(KafkaRecord, [field.name for field in fields(KafkaRecord)])


def record_of(message: Any) -> KafkaRecord:
    """The record of a message (built slot by slot: this runs for every record read)."""
    kind, timestamp = message.timestamp()
    headers = message.headers()
    return _BUILD_RECORD(message.topic(), message.partition(), message.offset(), message.key(),
                         message.value(), tuple(headers) if headers else (),
                         timestamp if kind != 0 and timestamp >= 0 else None)
