"""The send window and batcher: event and byte limits, offset order per partition, turns between
partitions, a preferred rule, retry holds, and batches cut by their real encoded size."""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import rounded_now
from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.domain.rules.sync_rule import PriorityClass
from tidesync.ship.batcher import (
    MAX_WAIT_SECONDS,
    BatchLimits,
    SendWindow,
    build_batch,
    default_priority,
)
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

NODE = "ship-7"
NOW = rounded_now()


def event(offset: int, *, partition: int = 0, table: str = "items", key: int | None = None,
          note: str = "x", sequence: int | None = None) -> ChangeEvent:
    topic = f"sync.cdc.fleet.{table}"
    record = RecordKey.of("fleet", table, {"id": offset if key is None else key})
    source = SourceCoordinates(NODE, 0, topic, partition, offset)
    return ChangeEvent(
        event_id=event_id_for(source, record, Operation.INSERT), origin_node_id=NODE,
        source_connector_id="dbz", source_topic=topic, source_partition=partition,
        source_position=offset, record=record, operation=Operation.INSERT, captured_at=NOW,
        after={**record.as_dict(), "note": note}, source_sequence=sequence or offset + 1,
    )


def window_of(*events: ChangeEvent, size: int = 100) -> SendWindow:
    window = SendWindow()
    window.add(events, {e.event_id: size for e in events})
    return window


def test_a_batch_stops_at_the_event_limit_in_offset_order() -> None:
    window = window_of(*(event(o) for o in range(12)))
    first = window.take(0.0, BatchLimits(max_events=5))
    assert [e.source_position for e in first] == [0, 1, 2, 3, 4]
    second = window.take(0.0, BatchLimits(max_events=5))
    assert [e.source_position for e in second] == [5, 6, 7, 8, 9]  # in flight are not retaken
    window.release([e.event_id for e in first])
    assert [e.source_position for e in window.take(0.0, BatchLimits(max_events=5))] == [
        0, 1, 2, 3, 4]


def test_a_batch_stops_at_the_byte_limit_but_takes_one_oversized_event() -> None:
    window = window_of(*(event(o) for o in range(10)), size=400)
    assert len(window.take(0.0, BatchLimits(max_events=500, max_bytes=1000))) == 2
    big = window_of(event(0), size=5000)
    assert len(big.take(0.0, BatchLimits(max_bytes=1000))) == 1


def test_partitions_take_turns_and_the_head_rule_is_preferred() -> None:
    events = [event(o, partition=p, table=t) for o in range(3)
              for p, t in ((0, "items"), (1, "orders"), (2, "items"))]
    window = window_of(*events)
    heads = []
    for _ in range(3):
        batch = window.take(0.0, BatchLimits(max_events=4))
        heads.append((batch[0].source_topic, batch[0].source_partition))
        # The head partition's events come first and in order, then the same rule's.
        head = [e for e in batch if (e.source_topic, e.source_partition) == heads[-1]]
        assert [e.source_position for e in head] == sorted(e.source_position for e in head)
        window.release([e.event_id for e in batch])
    assert len(set(heads)) == 3


def test_retry_waits_hold_events_until_due() -> None:
    window = window_of(event(0), event(1), event(2))
    taken = window.take(0.0, BatchLimits())
    window.defer([taken[1].event_id], not_before=10.0)
    window.release([taken[0].event_id, taken[2].event_id])
    assert [e.source_position for e in window.take(5.0, BatchLimits())] == [0, 2]
    assert window.next_due() == 10.0
    assert [e.source_position for e in window.take(10.0, BatchLimits())] == [1]
    assert window.attempts(taken[1].event_id) == 1
    window.discard([e.event_id for e in taken])
    assert len(window) == 0 and not window.has_due(100.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4)), min_size=1, max_size=60),
       st.integers(1, 7))
def test_every_event_is_sent_once_and_each_key_in_order(placements: list[tuple[int, int]],
                                                        max_events: int) -> None:
    events = [event(offset, partition=partition, key=key, sequence=offset + 1)
              for offset, (partition, key) in enumerate(placements)]
    window = window_of(*events)
    sent: list[ChangeEvent] = []
    while len(window):
        batch = window.take(0.0, BatchLimits(max_events=max_events))
        assert 0 < len(batch) <= max_events
        sent += batch
        window.discard([e.event_id for e in batch])
    assert sorted(e.source_position for e in sent) == list(range(len(events)))
    for partition, key in set(placements):
        positions = [e.source_position for e in sent
                     if (e.source_partition, e.record.as_dict()["id"]) == (partition, key)]
        assert positions == sorted(positions)


def test_build_batch_cuts_by_the_encoded_size_and_roundtrips() -> None:
    events = [event(o, note=str(o) + "n" * 2000) for o in range(20)]
    batch, left = build_batch(events, NODE, NOW, BatchLimits(max_bytes=16_000))
    assert 1 <= len(batch.events) < 20 and batch.uncompressed_bytes <= 16_000
    assert list(batch.events) + left == events
    decoded = codec.decode_batch(batch.body, 1 << 20, 1 << 22)
    assert decoded.node_id == NODE and decoded.batch_id == batch.batch_id
    assert [e.event_id for e in decoded.events] == batch.event_ids
    assert [e.source_sequence for e in decoded.events] == [e.source_sequence for e in events[
        :len(batch.events)]]
    alone, rest = build_batch(events[:1], NODE, NOW, BatchLimits(max_bytes=100))
    assert len(alone.events) == 1 and rest == []
    assert pb.UploadBatch.FromString(codec.decompress_bytes(alone.body, 1 << 20, 1 << 20))


def test_partition_counts() -> None:
    window = window_of(event(0), event(1, partition=1), event(2, partition=1))
    assert window.count(PartitionKey("sync.cdc.fleet.items", 1)) == 2
    assert uuid.uuid4() not in window


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLASSES = {"alarms": PriorityClass.CRITICAL, "noon": PriorityClass.HIGH,
           "items": PriorityClass.NORMAL, "logs": PriorityClass.BULK}


def by_table(item: ChangeEvent) -> PriorityClass:
    return CLASSES[item.table]


def heads_of(window: SendWindow, turns: int, limits: BatchLimits) -> list[str]:
    """The table heading each of `turns` batches; each batch is sent and answered."""
    heads = []
    for _ in range(turns):
        batch = window.take(0.0, limits)
        heads.append(batch[0].table)
        window.discard(e.event_id for e in batch)
    return heads


def test_a_higher_class_heads_the_batch_whatever_the_turn() -> None:
    clock = Clock()
    window = SendWindow(by_table, monotonic=clock)
    window.add([event(o, table=t, partition=p) for o in range(20)
                for p, t in enumerate(("logs", "items", "noon", "alarms"))],
               {})
    assert heads_of(window, 4, BatchLimits(max_events=20)) == [
        "alarms", "noon", "items", "logs"]


def test_a_batch_is_topped_up_from_higher_classes_first() -> None:
    window = SendWindow(by_table, monotonic=Clock())
    window.add([event(o, table=t, partition=p) for o in range(3)
                for p, t in enumerate(("logs", "items", "alarms"))], {})
    batch = window.take(0.0, BatchLimits(max_events=8))
    assert [e.table for e in batch] == ["alarms"] * 3 + ["items"] * 3 + ["logs"] * 2


def test_partitions_of_one_class_take_turns() -> None:
    window = SendWindow(by_table, monotonic=Clock())
    window.add([event(o, table=t, partition=p) for o in range(10)
                for p, t in ((0, "items"), (1, "items"), (2, "logs"))], {})
    batches = [window.take(0.0, BatchLimits(max_events=2)) for _ in range(4)]
    assert [(b[0].table, b[0].source_partition) for b in batches] == [
        ("items", 0), ("items", 1), ("items", 0), ("items", 1)]


def test_a_lower_class_that_waited_too_long_goes_first() -> None:
    # A steady CRITICAL stream never starves the BULK backlog: once its next event has waited
    # longer than BULK's maximum wait, it heads the batch.
    clock = Clock()
    window = SendWindow(by_table, monotonic=clock)
    window.add([event(o, table="logs", partition=1) for o in range(4)], {})
    served = []
    for minute in range(40):
        clock.now = 60.0 * minute
        window.add([event(1000 + minute, table="alarms")], {})
        batch = window.take(0.0, BatchLimits(max_events=1))
        served.append(batch[0].table)
        window.discard(e.event_id for e in batch)
    first_log = served.index("logs")
    assert served[:first_log] == ["alarms"] * first_log
    assert 60.0 * first_log >= MAX_WAIT_SECONDS[PriorityClass.BULK]
    assert first_log <= MAX_WAIT_SECONDS[PriorityClass.BULK] / 60.0 + 1


def test_snapshot_rows_are_bulk_unless_told_otherwise() -> None:
    snapshot = dataclasses.replace(event(1), operation=Operation.SNAPSHOT)
    assert default_priority(snapshot) is PriorityClass.BULK
    assert default_priority(event(2)) is PriorityClass.NORMAL
