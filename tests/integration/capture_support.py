"""Helpers for the capture tests: read topics back from the broker and normalize the records."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Normalized, Skip, SkipReason
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.values import Value

NODE_ID = "ship-capture-test"
CONNECTOR_ID = "ship-capture-test-builtin"


def read_records(bootstrap: str, topics: Iterable[str], *, idle_seconds: float = 1.0,
                 timeout: float = 30.0) -> list[KafkaRecord]:
    """Every record of the topics, from the start, until no more arrive for `idle_seconds`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "capture-test-reader",
                         "enable.auto.commit": False})
    try:
        assignment = []
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING)
                           for p in metadata.partitions]
        consumer.assign(assignment)
        records: list[KafkaRecord] = []
        deadline = time.monotonic() + timeout
        last_arrival = time.monotonic()
        while time.monotonic() - last_arrival < idle_seconds and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.2):
                assert message.error() is None, message.error()
                records.append(KafkaRecord(
                    message.topic(), message.partition(), message.offset(), message.key(),
                    message.value(), tuple(message.headers() or ()),
                    message.timestamp()[1]))
                last_arrival = time.monotonic()
        return records
    finally:
        consumer.close()


@dataclass(frozen=True)
class Change:
    """A change as the test states it: table, operation, key and both images."""

    table: str
    operation: Operation
    key: tuple[tuple[str, Value], ...]
    before: Mapping[str, Value] | None
    after: Mapping[str, Value] | None


def normalize_all(records: list[KafkaRecord], settings: NormalizerSettings
                  ) -> tuple[list[ChangeEvent], int]:
    """The change events of the records (tombstones counted, anything else fails the test)."""
    normalizer = DebeziumNormalizer(settings)
    events: list[ChangeEvent] = []
    tombstones = 0
    for record in records:
        outcome = normalizer.normalize(record)
        if isinstance(outcome, Skip) and outcome.reason is SkipReason.TOMBSTONE:
            tombstones += 1
            continue
        assert isinstance(outcome, Normalized), outcome
        events.append(outcome.event)
    return events, tombstones


def as_change(event: ChangeEvent) -> Change:
    return Change(event.record.table, event.operation, event.record.primary_key,
                  None if event.before is None else dict(event.before),
                  None if event.after is None else dict(event.after))


def per_key(changes: Iterable[Change]) -> dict[tuple[str, tuple[tuple[str, Value], ...]],
                                               list[Change]]:
    grouped: dict[tuple[str, tuple[tuple[str, Value], ...]], list[Change]] = defaultdict(list)
    for change in changes:
        grouped[(change.table, change.key)].append(change)
    return dict(grouped)


def events_in_queue_order(events: list[ChangeEvent]) -> list[ChangeEvent]:
    """Events per (topic, partition) in offset order: the order a consumer sees per key."""
    return sorted(events, key=lambda e: (e.source_topic, e.source_partition, e.source_position))


def settings_for(tables: Iterable[tuple[str, str]], column_types: object = None
                 ) -> NormalizerSettings:
    return NormalizerSettings(NODE_ID, CONNECTOR_ID, bidirectional_tables=frozenset(tables),
                              column_types=column_types)  # type: ignore[arg-type]
