"""Compact answers on the real shore: an upload asked for ranges names received events by offset
range, the shore keeps that answer so a ship whose answer was lost can ask for it by batch id
(signed, like every answer), an unknown batch is told apart, and a ship that asks for nothing
new still gets one status per event."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration import test_ingress as base
from tests.integration.test_ingress import Ship, batch_body, make_event
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.shore_answers import batch_answers
from tidesync.ship.state import ReceiveOutcome
from tidesync.ship.transport import HttpShoreLink, ShoreRefused
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

# The fixtures of the sync API's main test module: its database, clock and registered ships.
database, clock, ship, ship_factory = base.database, base.clock, base.ship, base.ship_factory


def shore_link(node: Ship, secret: bytes | None = None) -> HttpShoreLink:
    return HttpShoreLink(node.client.url, node.node_id, secret or node.secret, clock=node.clock)


def test_a_ranged_answer_is_kept_and_given_again_by_batch_id(ship: Ship) -> None:
    events = [make_event(ship.node_id, number) for number in range(30)]
    batch_id = uuid.uuid4()
    batch = OutgoingBatch(batch_id, tuple(events), batch_body(ship.node_id, events,
                                                             batch_id=batch_id), 0)
    link = shore_link(ship)
    try:
        answer = link.upload(batch)
        assert not answer.statuses and answer.received  # every event by range
        assert {a.outcome for a in batch_answers(events, answer)} == {ReceiveOutcome.RECEIVED}
        assert len(batch_answers(events, answer)) == len(events)
        recalled = link.batch_fate(batch_id)
        assert recalled == answer
        assert link.batch_fate(uuid.uuid4()) is None
    finally:
        link.close()


def test_a_batch_answer_is_only_given_to_its_own_node(ship_factory: Any) -> None:
    first, second = ship_factory(), ship_factory()
    events = [make_event(first.node_id, 1)]
    batch_id = uuid.uuid4()
    link, other = shore_link(first), shore_link(second)
    try:
        link.upload(OutgoingBatch(batch_id, tuple(events),
                                  batch_body(first.node_id, events, batch_id=batch_id), 0))
        assert other.batch_fate(batch_id) is None
        forged = shore_link(first, secret=second.secret)
        with pytest.raises(ShoreRefused) as refused:  # not the node's signature
            forged.batch_fate(batch_id)
        assert refused.value.status == 401
        forged.close()
    finally:
        link.close()
        other.close()


def test_a_ship_that_asks_for_no_ranges_gets_one_status_per_event(ship: Ship) -> None:
    events = [make_event(ship.node_id, number) for number in range(5)]
    answer = ship.client.upload(batch_body(ship.node_id, events)).message(
        pb.UploadBatchResponse)
    assert [s.status for s in answer.statuses] == [pb.RECEIVED] * 5
    assert not answer.received
