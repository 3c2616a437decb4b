"""zstd dictionaries of upload bodies: a body compressed with one reads back as the same batch,
one naming a dictionary the receiver does not hold is refused as UNKNOWN_DICTIONARY (never read
with another), and the ship uses a dictionary only while it pays, sending it before use and
again whenever the shore says it does not hold it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import random
import uuid
from decimal import Decimal
from typing import Any

import pytest
import zstandard

from tests.unit.test_wire_codec import NOW, update_event
from tidesync.domain.change_event import ChangeEvent, RecordKey
from tidesync.ship.batcher import BatchLimits, OutgoingBatch, build_batch
from tidesync.ship.dictionaries import BatchDictionaries, DictionaryLink
from tidesync.ship.transport import LinkDown, LinkReason, ShoreRefused
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.batches import inflate
from tidesync.wire.dictionaries import (
    MAX_DICTIONARY_BYTES,
    compress_with,
    dictionary_id,
    load_dictionary,
    named_dictionary,
)
from tidesync.wire.protocol import (
    BadDictionary,
    UnknownDictionary,
    UnsupportedProtocol,
    WireReason,
    error_response,
)

MiB = 1 << 20
NODE = "ship-0042"


def ship_events(count: int, seed: int = 1, start: int = 0) -> list[ChangeEvent]:
    """Updates of a few narrow rows, as a ship's noon reports and fuel logs make them."""
    rng = random.Random(seed)
    base = update_event()
    events = []
    for number in range(start, start + count):
        row = rng.randrange(40)
        after = {**(base.after or {}), "id": row, "amount": Decimal(rng.randrange(10**6)) / 100,
                 "notes": rng.choice(["checked pump", "fuel transfer", "noon report"]),
                 "_sync_updated_at": NOW + dt.timedelta(seconds=number)}
        before = {**(base.before or {}), "id": row}
        event = dataclasses.replace(base, record=RecordKey.of("erp", "orders", {"id": row}),
                                    source_position=1000 + number, before=before, after=after,
                                    captured_at=NOW + dt.timedelta(seconds=number))
        events.append(dataclasses.replace(event, event_id=event.expected_event_id()))
    return events


def raw_batch(events: list[ChangeEvent], number: int = 0) -> bytes:
    return codec.serialize_batch(codec.build_any_batch(
        events, node_id=NODE, batch_id=uuid.UUID(int=number), created_at=NOW, wire_version=2))


def trained(count: int = 40) -> bytes:
    samples = [raw_batch(ship_events(10, seed=n, start=10 * n), n) for n in range(count)]
    return zstandard.train_dictionary(4096, samples).as_bytes()


# ----------------------------------------------------------------------------- the wire


def test_a_body_with_a_dictionary_reads_back_as_the_same_batch_and_is_smaller():
    content = trained()
    dictionary = load_dictionary(content)
    events = ship_events(10, seed=99, start=5000)
    raw = raw_batch(events)
    body = compress_with(raw, dictionary, dictionary_id(content))
    plain = codec.compress_bytes(raw)
    assert len(body) < len(plain)
    asked: list[bytes] = []

    def lookup(name: bytes) -> zstandard.ZstdCompressionDict | None:
        asked.append(name)
        return dictionary
    assert codec.open_batch(body, MiB, 8 * MiB, dictionaries=lookup) == codec.open_batch(
        plain, MiB, 8 * MiB)
    assert asked == [dictionary_id(content)]
    assert codec.decode_batch(body, MiB, 8 * MiB, dictionaries=lookup).events == (
        codec.decode_batch(plain, MiB, 8 * MiB).events)
    assert [e.event_id for e in codec.decode_batch(plain, MiB, 8 * MiB).events] == [
        e.event_id for e in events]


def test_a_body_naming_a_dictionary_the_receiver_does_not_hold_is_refused_not_misread():
    content = trained()
    body = compress_with(raw_batch(ship_events(10)), load_dictionary(content),
                         dictionary_id(content))
    with pytest.raises(UnknownDictionary) as refused:
        codec.open_batch(body, MiB, 8 * MiB, dictionaries=lambda name: None)
    assert refused.value.reason is WireReason.UNKNOWN_DICTIONARY
    with pytest.raises(UnknownDictionary):
        codec.open_batch(body, MiB, 8 * MiB)  # a receiver that takes no dictionaries
    # Another dictionary under the right name would not even be asked for: the name is the
    # SHA-256 of the content, and a frame read with the wrong one fails its checks.
    other = load_dictionary(trained(30))
    with pytest.raises(codec.WireError):
        codec.open_batch(body, MiB, 8 * MiB, dictionaries=lambda name: other)


def test_dictionaries_are_checked_and_bounded():
    with pytest.raises(BadDictionary):
        load_dictionary(os.urandom(2000))
    with pytest.raises(BadDictionary):
        load_dictionary(trained()[:4] + os.urandom(2000))
    with pytest.raises(BadDictionary):
        load_dictionary(bytes.fromhex("37a430ec") + bytes(MAX_DICTIONARY_BYTES))
    with pytest.raises(codec.MalformedPayload):
        named_dictionary(bytes.fromhex("5d2a4d18") + (5).to_bytes(4, "little") + b"short")


def test_a_receiver_of_major_1_only_refuses_v2_and_dictionaries_naming_1_0():
    events = ship_events(5)
    v1 = codec.encode_batch(events, node_id=NODE, batch_id=uuid.UUID(int=1), created_at=NOW)
    v2 = codec.encode_batch(events, node_id=NODE, batch_id=uuid.UUID(int=1), created_at=NOW,
                            wire_version=2)
    content = trained()
    named = compress_with(raw_batch(events), load_dictionary(content), dictionary_id(content))
    assert codec.open_batch(v1, MiB, 8 * MiB, accept_v2=False)[1].events
    for body in (v2, named):
        with pytest.raises(UnsupportedProtocol) as refused:
            codec.open_batch(body, MiB, 8 * MiB, accept_v2=False,
                             dictionaries=lambda name: None)
        answer = error_response(refused.value)
        assert answer.reason_code == "UNSUPPORTED_PROTOCOL"
        assert list(answer.supported_protocol_versions) == ["1.0"]


# ----------------------------------------------------------------------------- the ship


def feed(dictionaries: BatchDictionaries, batches: int, seed: int = 0) -> list[bytes]:
    limits = BatchLimits(max_events=10, compressor=dictionaries)
    bodies = []
    for number in range(batches):
        batch, _ = build_batch(ship_events(10, seed=seed + number, start=10 * number), NODE,
                               NOW, limits)
        bodies.append(batch.body)
    return bodies


def test_the_ship_chooses_a_dictionary_only_when_it_pays():
    dictionaries = BatchDictionaries(4096, min_samples=16, retrain_every=64)
    feed(dictionaries, 16)
    assert dictionaries.last is not None and dictionaries.waiting is not None
    assert dictionaries.last.trained is not None
    assert dictionaries.last.trained <= 0.95 * dictionaries.last.plain
    # Not used before the shore holds it; used once it does.
    assert named_dictionary(feed(dictionaries, 1, seed=100)[0])[0] is None
    waiting = dictionaries.waiting
    dictionaries.accepted(waiting)
    body = feed(dictionaries, 1, seed=200)[0]
    assert named_dictionary(body)[0] == dictionary_id(waiting.content)

    noise = BatchDictionaries(4096, min_samples=16, retrain_every=64)
    for _ in range(16):
        noise.compress(os.urandom(3000), 3)
    assert noise.last is not None and noise.waiting is None and noise.active is None


@dataclasses.dataclass
class FakeShore:
    """A shore link reading bodies with the dictionaries it was sent (and may lose)."""

    dictionaries: dict[bytes, zstandard.ZstdCompressionDict] = dataclasses.field(
        default_factory=dict)
    events: list[ChangeEvent] = dataclasses.field(default_factory=list)
    calls: list[str] = dataclasses.field(default_factory=list)
    takes_dictionaries: bool = True

    def send_dictionary(self, message: pb.WireDictionary) -> pb.WireDictionaryResponse:
        self.calls.append("dictionary")
        if not self.takes_dictionaries:
            raise ShoreRefused("UNSUPPORTED_PROTOCOL", "major 1 only", status=426)
        content = bytes(message.dictionary)
        self.dictionaries[dictionary_id(content)] = load_dictionary(content)
        return pb.WireDictionaryResponse(dictionary_id=dictionary_id(content))

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        self.calls.append("upload")
        try:
            raw = inflate(batch.body, MiB, 8 * MiB, self.dictionaries.get)
        except UnknownDictionary as error:
            raise ShoreRefused(error.reason, str(error), status=409) from error
        decoded = codec.decode_batch(codec.compress_bytes(raw), MiB, 8 * MiB)
        self.events += decoded.events
        return pb.UploadBatchResponse()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def essence(event: ChangeEvent) -> tuple[Any, ...]:
    """What the wire carries of an update (it leaves unchanged columns out)."""
    return (event.event_id, event.source_position, event.record, event.base_revision,
            event.result_revision, (event.after or {}).get("amount"))


def upload_all(link: DictionaryLink, dictionaries: BatchDictionaries, batches: int,
               start: int) -> list[ChangeEvent]:
    limits = BatchLimits(max_events=10, compressor=dictionaries)
    sent = []
    for number in range(start, start + batches):
        events = ship_events(10, seed=number, start=10 * number)
        batch, _ = build_batch(events, NODE, NOW, limits)
        link.upload(batch)
        sent += events
    return sent


def test_the_link_sends_the_dictionary_before_use_and_again_when_the_shore_lost_it():
    shore = FakeShore()
    dictionaries = BatchDictionaries(4096, min_samples=16, retrain_every=1000)
    link = DictionaryLink(shore, dictionaries, NODE)  # type: ignore[arg-type]
    sent = upload_all(link, dictionaries, 24, 0)
    assert shore.calls.count("dictionary") == 1 and dictionaries.active is not None
    first_named = shore.calls.index("dictionary")
    assert shore.calls[:first_named] == ["upload"] * first_named
    shore.dictionaries.clear()  # the shore lost it (pruned, or a new database)
    sent += upload_all(link, dictionaries, 8, 24)
    assert shore.calls.count("dictionary") == 2
    assert shore.calls[-8:] == ["upload"] * 8
    # Every event arrived once, read with the right dictionary.
    assert [essence(e) for e in shore.events] == [essence(e) for e in sent]


def test_a_shore_without_dictionaries_gets_plain_bodies():
    shore = FakeShore(takes_dictionaries=False)
    dictionaries = BatchDictionaries(4096, min_samples=16, retrain_every=16)
    link = DictionaryLink(shore, dictionaries, NODE)  # type: ignore[arg-type]
    sent = upload_all(link, dictionaries, 40, 0)
    assert shore.calls.count("dictionary") == 1 and dictionaries.disabled
    assert [essence(e) for e in shore.events] == [essence(e) for e in sent]


def test_a_link_down_while_sending_the_dictionary_does_not_give_it_up():
    shore = FakeShore()
    down = [True]
    send = shore.send_dictionary

    def flaky(message: pb.WireDictionary) -> pb.WireDictionaryResponse:
        if down[0]:
            raise LinkDown(LinkReason.NETWORK_ERROR, "no link")
        return send(message)
    shore.send_dictionary = flaky  # type: ignore[method-assign]
    clock = [0.0]
    dictionaries = BatchDictionaries(4096, min_samples=16, retrain_every=1000)
    link = DictionaryLink(shore, dictionaries, NODE,  # type: ignore[arg-type]
                          monotonic=lambda: clock[0])
    upload_all(link, dictionaries, 20, 0)
    assert dictionaries.waiting is not None and not dictionaries.disabled
    down[0], clock[0] = False, 3600.0
    upload_all(link, dictionaries, 2, 20)
    assert dictionaries.active is not None and dictionaries.waiting is None
