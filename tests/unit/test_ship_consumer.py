"""When the ship's queue consumer is caught up, on a real SQLite state store with a fake queue:
the end-of-partition event is only one of the signs (it is reported once per fetch position and
can be missed), a partition read up to its high watermark is at its end as well; and a broker
failure met in the middle of a poll never drops what that poll read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError

from tests.clocks import ManualClock
from tests.integration.ship_support import ItemsCapture
from tests.unit import test_replay_runs as replay_runs
from tests.unit.test_replay_runs import GROUP, NODE
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, PartitionKey, Polled, QueueSettings, QueueUnavailable
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.state import SQLiteShipState

# The ship state store of the replay tests: a SQLite file per test, closed after it.
store = replay_runs.store


def kafka_records(count: int, partition: int = 0) -> list[KafkaRecord]:
    capture = ItemsCapture("fleet")
    out = []
    for offset in range(count):
        record = capture.insert(offset + 1, f"part-{offset}", offset, "1.00")
        out.append(KafkaRecord(record.topic, partition, offset, record.key_bytes(),
                               record.value_bytes(), timestamp_ms=1_000 * offset))
    return out


TOPIC = kafka_records(1)[0].topic
FULL, EMPTY = PartitionKey(TOPIC, 0), PartitionKey(TOPIC, 1)


@dataclass
class SilentQueue:
    """A broker's partitions that never report their end: records by partition, the consumer's
    position in each, the high watermark as of the last fetch (None: never fetched). The last
    `in_flight` records of a partition count in its high watermark but are not delivered yet."""

    records: dict[PartitionKey, list[KafkaRecord]]
    positions: dict[PartitionKey, int] = field(default_factory=dict)
    fetched: dict[PartitionKey, int | None] = field(default_factory=dict)
    paused: set[PartitionKey] = field(default_factory=set)
    in_flight: int = 0
    settings: Any = None
    consumer: Any = None
    pattern: Any = None

    def partitions(self) -> list[PartitionKey]:
        return sorted(self.records)

    def committed(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        return {key: None for key in keys}

    def assign(self, starts: Mapping[PartitionKey, int | None]) -> None:
        for key, start in starts.items():
            self.positions[key] = start or 0
            self.fetched[key] = None

    def poll(self, max_records: int, timeout: float) -> Polled:
        polled = Polled()
        for key, records in self.records.items():
            if key in self.paused:
                continue
            self.fetched[key] = len(records)
            delivered = records[:len(records) - self.in_flight]
            taken = delivered[self.positions[key]:self.positions[key] + max_records]
            self.positions[key] += len(taken)
            polled.records.extend(taken)
        return polled

    def end_offset(self, key: PartitionKey) -> int | None:
        return self.fetched.get(key)

    def first_offset(self, key: PartitionKey) -> int | None:
        return 0

    def commit(self, offsets: Mapping[PartitionKey, int]) -> None:
        pass

    def pause(self, keys: Iterable[PartitionKey]) -> None:
        self.paused.update(keys)

    def resume(self, keys: Iterable[PartitionKey]) -> None:
        self.paused.difference_update(keys)

    def unassign(self, keys: Iterable[PartitionKey]) -> None:
        pass

    def close(self) -> None:
        pass


def consumer_of(queue: SilentQueue, state: SQLiteShipState,
                clock: ManualClock) -> QueueConsumer:
    normalizer = DebeziumNormalizer(NormalizerSettings(NODE, "debezium-mysql"))
    consumer = QueueConsumer(cast(KafkaQueue, queue), normalizer, state, 0,
                             monotonic=clock.monotonic)
    consumer.refresh()
    return consumer


def test_partitions_read_to_their_high_watermark_are_caught_up_without_an_end_event(
        store: SQLiteShipState) -> None:
    clock = ManualClock()
    queue = SilentQueue({FULL: kafka_records(3), EMPTY: []})
    consumer = consumer_of(queue, store, clock)
    assert len(consumer.poll(500, 0).sendable) == 3
    assert not consumer.caught_up()  # records were read: the end is not known yet
    for _ in range(3):
        clock.advance(1)
        assert not consumer.poll(500, 0).sendable
    assert consumer.caught_up()
    # New records: not caught up until they are read, and again once they are.
    queue.records[FULL] += kafka_records(5)[3:]
    assert len(consumer.poll(500, 0).sendable) == 2
    assert not consumer.caught_up()
    clock.advance(1)
    consumer.poll(500, 0)
    assert consumer.caught_up()


def test_after_a_restart_at_the_end_the_partitions_are_caught_up(
        tmp_path: Path) -> None:
    """Assigned where the previous run committed (the partition's end): no record is read and
    no end-of-partition event comes, the high watermark says the partition is read."""
    clock = ManualClock()
    records = {FULL: kafka_records(3), EMPTY: []}
    first = SQLiteShipState(tmp_path / "ship.sqlite", NODE, GROUP)
    try:
        consumer = consumer_of(SilentQueue(records), first, clock)
        consumer.poll(500, 0)
        first.database.conn.execute(
            "UPDATE event_state SET state = 'TERMINAL', result = 'APPLIED'")
        with first.database.transaction() as conn:
            first.partition_watermarks.recompute(conn, FULL)
        consumer.commit(first.watermarks())
    finally:
        first.close()
    again = SQLiteShipState(tmp_path / "ship.sqlite", NODE, GROUP)
    try:
        queue = SilentQueue(records)
        consumer = consumer_of(queue, again, clock)
        assert queue.positions == {FULL: 3, EMPTY: 0}
        consumer.poll(500, 0)
        assert consumer.caught_up()
    finally:
        again.close()


def test_partitions_not_fetched_or_not_read_to_their_end_are_not_caught_up(
        store: SQLiteShipState) -> None:
    clock = ManualClock()
    queue = SilentQueue({FULL: kafka_records(4), EMPTY: []})
    consumer = consumer_of(queue, store, clock)
    consumer.set_paused({EMPTY})
    assert len(consumer.poll(3, 0).sendable) == 3
    consumer.set_paused({FULL, EMPTY})
    clock.advance(1)
    consumer.poll(500, 0)
    consumer.set_paused(set())
    assert not consumer.caught_up()  # paused partitions are not checked: EMPTY never fetched
    queue.in_flight = 1
    for _ in range(3):
        clock.advance(1)
        assert not consumer.poll(500, 0).sendable
    assert not consumer.caught_up()  # the last record of FULL is not read yet
    queue.in_flight = 0
    assert len(consumer.poll(500, 0).sendable) == 1
    clock.advance(0.1)
    consumer.poll(500, 0)
    assert not consumer.caught_up()  # checked at most every half second
    clock.advance(1)
    consumer.poll(500, 0)
    assert consumer.caught_up()


@dataclass
class Message:
    """A confluent-kafka message: a record, or an event (an error code)."""

    topic_name: str | None = TOPIC
    partition_number: int | None = 0
    at: int = 0
    code: int | None = None

    def error(self) -> KafkaError | None:
        return None if self.code is None else KafkaError(self.code)

    def topic(self) -> str | None:
        return self.topic_name

    def partition(self) -> int | None:
        return self.partition_number

    def offset(self) -> int:
        return self.at

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000


@dataclass
class FakeConsumer:
    batches: list[list[Message]]

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def poll(self, timeout: float) -> Message | None:
        return None

    def close(self) -> None:
        pass


def test_a_broker_failure_in_a_poll_is_raised_after_what_the_poll_read() -> None:
    queue = KafkaQueue(QueueSettings("127.0.0.1:1", "g", "^sync", {"log_level": "0"}))
    queue.consumer.close()
    transport = Message(topic_name=None, partition_number=None, code=KafkaError._TRANSPORT)
    queue.consumer = FakeConsumer([
        [Message(at=7), transport, Message(at=8, code=KafkaError._PARTITION_EOF),
         Message(partition_number=1, at=0, code=KafkaError._PARTITION_EOF)],
        [Message(at=8)],
        [transport],
    ])
    polled = queue.poll(500, 0)
    assert [record.offset for record in polled.records] == [7]
    assert polled.at_end == {PartitionKey(TOPIC, 0): 8, PartitionKey(TOPIC, 1): 0}
    with pytest.raises(QueueUnavailable, match="_TRANSPORT"):
        queue.poll(500, 0)
    assert [record.offset for record in queue.poll(500, 0).records] == [8]
    with pytest.raises(QueueUnavailable, match="_TRANSPORT"):  # nothing read: at once
        queue.poll(500, 0)
    assert queue.poll(500, 0) == Polled()
