"""The events the Debezium normalizer makes are what the ChangeEvent constructor makes of the
same fields, and an event's expected id is always the id of its own coordinates — also when
the id it carries was derived from other ones."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle
import uuid
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from benchmarks import _ship_workload as workload
from benchmarks.ship import _Templates
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Normalized
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)


def _normalized(normalizer: DebeziumNormalizer, records: list[KafkaRecord]) -> list[ChangeEvent]:
    outcomes = [normalizer.normalize(record) for record in records]
    return [outcome.event for outcome in outcomes if isinstance(outcome, Normalized)]


def _events() -> list[ChangeEvent]:
    ship = DebeziumNormalizer(NormalizerSettings(
        workload.NODE_ID, "mysql-ship", replay_epoch=2,
        bidirectional_tables=workload.TWO_WAY_TABLES))
    narrow = _normalized(ship, [
        KafkaRecord(r.topic, r.partition, r.offset, r.record.key_bytes(), r.record.value_bytes(),
                    timestamp_ms=1_790_000_000_000 + r.offset)
        for r in workload.generate(400)])
    templates = _Templates("sync.cdc.orders")
    orders = _normalized(
        DebeziumNormalizer(NormalizerSettings("ship-7", "mysql-orders",
                                              bidirectional_tables=frozenset({("bench",
                                                                               "orders")}))),
        [KafkaRecord(templates.topic, 0, offset, key, value)
         for offset, (key, value) in enumerate(templates.records(200))])
    return narrow + orders


def test_normalized_events_are_what_the_constructor_makes_of_their_fields() -> None:
    events = _events()
    assert {event.operation for event in events} == {
        Operation.INSERT, Operation.UPDATE, Operation.DELETE}
    for event in events:
        built = ChangeEvent(**{field.name: getattr(event, field.name)
                               for field in dataclasses.fields(ChangeEvent)})
        assert built == event
        assert repr(built) == repr(event)
        assert event.expected_event_id() == event.event_id
        standard = uuid.UUID(bytes=event.event_id.bytes)
        assert (hash(event.event_id), event.event_id.is_safe) == (hash(standard),
                                                                  standard.is_safe)
        assert pickle.loads(pickle.dumps(event.event_id)) == standard
        assert event.with_source_sequence(11) == dataclasses.replace(event, source_sequence=11)
        assert event.with_source_sequence(11).expected_event_id() == event.event_id


names = st.text(min_size=1, max_size=8)
coordinates = st.builds(
    SourceCoordinates, origin_node_id=names, replay_epoch=st.integers(0, 9), topic=names,
    partition=st.integers(0, 9), offset=st.integers(0, 2**40))


def _event(source: SourceCoordinates, key: RecordKey, event_id: object) -> ChangeEvent:
    return ChangeEvent(
        event_id=event_id, origin_node_id=source.origin_node_id,  # type: ignore[arg-type]
        source_connector_id="mysql", source_topic=source.topic,
        source_partition=source.partition, source_position=source.offset, record=key,
        operation=Operation.INSERT, captured_at=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        after=dict(key.primary_key), replay_epoch=source.replay_epoch)


@given(coordinates, st.integers(0, 1))
def test_an_event_carrying_the_id_of_other_coordinates_expects_its_own(
        source: SourceCoordinates, number: int) -> None:
    key = RecordKey("db", "t", (("id", number),))
    derived = event_id_for(source, key, Operation.INSERT)
    assert _event(source, RecordKey("db", "t", (("id", number),)), derived
                  ).expected_event_id() == derived
    others = [
        (source, RecordKey("db", "t", (("id", bool(number)),))),  # equal in Python, not here
        (source, RecordKey("db", "t", (("id", Decimal(number)),))),
        (dataclasses.replace(source, offset=source.offset + 1), key),
        (dataclasses.replace(source, replay_epoch=source.replay_epoch + 1), key),
        (dataclasses.replace(source, topic=source.topic + "x"), key),
    ]
    for other_source, other_key in others:
        event = _event(other_source, other_key, derived)
        assert event.expected_event_id() != derived
        assert event.expected_event_id() == event_id_for(other_source, other_key,
                                                         Operation.INSERT)
