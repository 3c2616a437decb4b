"""Backlog priorities: snapshot events count as BULK, every other change as NORMAL."""

from __future__ import annotations

import datetime as dt
import uuid

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.projections.backlog import BULK, NORMAL, BacklogProjection, Item, Step, wire_facts
from tidesync.wire.codec import NameTable, build_batch


def _event(operation: Operation) -> ChangeEvent:
    record = RecordKey.of("shipdb", "items", {"id": 1})
    source = SourceCoordinates("ship-1", 0, "cdc.items", 0, 5)
    return ChangeEvent(
        event_id=event_id_for(source, record, operation), origin_node_id="ship-1",
        source_connector_id="c", source_topic="cdc.items", source_partition=0,
        source_position=5, record=record, operation=operation,
        captured_at=dt.datetime.now(dt.UTC), after={"id": 1, "name": "anchor"})


def test_a_snapshot_event_read_from_the_wire_is_bulk_and_a_change_normal():
    events = [_event(Operation.SNAPSHOT), _event(Operation.INSERT)]
    batch = build_batch(events, node_id="ship-1", batch_id=uuid.uuid4(),
                        created_at=dt.datetime.now(dt.UTC))
    names = NameTable(batch.strings)
    assert [wire_facts(wire, names).priority for wire in batch.events] == [BULK, NORMAL]


def test_a_result_of_an_event_never_claimed_here_counts_by_its_operation():
    projection = BacklogProjection()
    steps = [Step(("ship-1", "e1"), "APPLIED", "rule-a", BULK),
             Step(("ship-1", "e2"), "APPLIED", "rule-a", NORMAL)]
    _, deltas, _ = projection._apply(steps, {}, {})
    assert {group: delta.events for group, delta in deltas.items()} == {
        ("ship-1", "rule-a", BULK, "APPLIED"): 1, ("ship-1", "rule-a", NORMAL, "APPLIED"): 1}


def test_a_claimed_snapshot_event_moves_between_states_under_bulk():
    projection = BacklogProjection()
    key = ("ship-1", "e1")
    claimed = Item("rule-a", "CLAIMED", 100, priority=BULK)
    _, deltas, _ = projection._apply([Step(key, "RETRY_WAIT"), Step(key, "APPLIED", "rule-a")],
                                     {key: claimed}, {})
    assert {group: (delta.events, delta.bytes) for group, delta in deltas.items()} == {
        ("ship-1", "rule-a", BULK, "CLAIMED"): (-1, -100),
        ("ship-1", "rule-a", BULK, "RETRY_WAIT"): (0, 0),
        ("ship-1", "rule-a", BULK, "APPLIED"): (1, 100)}
