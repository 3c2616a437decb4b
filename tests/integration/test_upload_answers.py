"""Compact answers on the real shore: an upload asked for ranges names received events by offset
range, the shore keeps that answer so a ship whose answer was lost can ask for it by batch id
(signed, like every answer), an unknown batch is told apart, and a ship that asks for nothing
new still gets one status per event."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration import test_ingress as base
from tests.integration.test_ingress import Ship, batch_body, make_event
from tidesync.domain.change_event import ChangeEvent
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.shore_answers import batch_answers
from tidesync.ship.state import ReceiveOutcome
from tidesync.ship.transport import BatchUnknown, HttpShoreLink, ShoreRefused
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import sign_request

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


def _cut_upload(node: Ship, body: bytes, sent: int) -> None:
    """An upload of `body` whose connection ends after `sent` bytes of it (an outage)."""
    target = "/sync/v1/batches?answer=ranges"
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd",
               codec.PROTOCOL_VERSION_HEADER: codec.PROTOCOL_VERSION,
               "Content-Length": str(len(body)),
               **sign_request(node.node_id, node.secret, "POST", target, body, node.clock(),
                              str(uuid.uuid4()))}
    address = urllib.parse.urlsplit(node.client.url)
    with socket.create_connection((address.hostname, address.port)) as connection:
        head = f"POST {target} HTTP/1.1\r\nHost: {address.netloc}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        connection.sendall(head.encode("latin-1") + body[:sent])


def _kept(link: HttpShoreLink, batch: OutgoingBatch) -> BatchUnknown:
    deadline = time.monotonic() + 30
    while True:
        fate = link.batch_fate(batch.batch_id, batch.body)
        if isinstance(fate, BatchUnknown):
            return fate
        assert fate is None and time.monotonic() < deadline, "the shore kept no part"
        time.sleep(0.05)


def _large_batch(node: Ship) -> tuple[list[ChangeEvent], OutgoingBatch]:
    """3,000 events: a body of well over 64 KiB."""
    events = [make_event(node.node_id, number, amount=f"{number}.{number % 97:02d}")
              for number in range(3000)]
    batch_id = uuid.uuid4()
    batch = OutgoingBatch(batch_id, tuple(events),
                          batch_body(node.node_id, events, batch_id=batch_id), 0)
    assert len(batch.body) > 64 * 1024
    return events, batch


@contextmanager
def _cut_halfway(node: Ship) -> Iterator[tuple[list[ChangeEvent], OutgoingBatch,
                                                HttpShoreLink, BatchUnknown]]:
    """A large batch whose upload was cut halfway through its body, the link, and what the
    shore says it kept of it."""
    events, batch = _large_batch(node)
    link = shore_link(node)
    try:
        _cut_upload(node, batch.body, len(batch.body) // 2)
        yield events, batch, link, _kept(link, batch)
    finally:
        link.close()


def test_an_upload_cut_mid_body_goes_on_with_only_the_rest(ship: Ship) -> None:
    with _cut_halfway(ship) as (events, batch, link, kept):
        batch_id, body = batch.batch_id, batch.body
        assert 16 * 1024 <= kept.resume_from <= len(body) // 2
        # The rest alone, signed over itself, completes the batch.
        answer = link.upload(dataclasses.replace(batch, resume_from=kept.resume_from))
        answers = batch_answers(events, answer)
        assert len(answers) == len(events)
        assert {a.outcome for a in answers} == {ReceiveOutcome.RECEIVED}
        assert link.batch_fate(batch_id, body) == answer  # the batch is in, whole
        # What was kept is gone once used: a second resume of it is refused, never guessed.
        with pytest.raises(ShoreRefused) as refused:
            link.upload(dataclasses.replace(batch, resume_from=kept.resume_from))
        assert (refused.value.status, refused.value.reason) == (409, "RESUME_UNKNOWN")


def test_a_rest_that_does_not_complete_the_body_is_refused(ship: Ship) -> None:
    with _cut_halfway(ship) as (events, batch, link, kept):
        batch_id, body = batch.batch_id, batch.body
        # Another body's rest, under this body's digest: the joined bytes are not the body.
        whole = hashlib.sha256(body).hexdigest()
        with pytest.raises(ShoreRefused) as refused:
            link._request("POST", f"/sync/v1/batches?answer=ranges&resume={kept.resume_from}"
                          f".{whole}", bytes(len(body) - kept.resume_from),
                          resend_unanswered=False)
        assert (refused.value.status, refused.value.reason) == (400, "RESUME_MISMATCH")
        assert link.batch_fate(batch_id, body) is None  # nothing of it was taken in
        answer = link.upload(batch)  # the whole body still goes
        assert len(batch_answers(events, answer)) == len(events)
