"""The wire codec: ChangeEvents survive the link losslessly (UPDATEs as key + changed columns),
versions are checked, and hostile bodies fail with named errors without exhausting memory."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import tracemalloc
import uuid
from decimal import Decimal
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clocks import rounded_now
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.values import BitString, JsonText, Value, canonical_value
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import (
    ChecksumMismatch,
    DecompressedTooLarge,
    MalformedPayload,
    NameTable,
    PayloadTooLarge,
    UnsupportedProtocol,
    WireReason,
)

NOW = rounded_now()
MiB = 1 << 20

# ----------------------------------------------------------------------------- strategies

offsets = st.builds(dt.timezone, st.timedeltas(min_value=dt.timedelta(hours=-14),
                                               max_value=dt.timedelta(hours=14)))
moments = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                       timezones=st.one_of(st.just(dt.UTC), offsets))
decimals = st.one_of(
    st.decimals(places=2, allow_nan=False, allow_infinity=False),
    st.decimals(places=0, min_value=-(10**40), max_value=10**40),
    st.decimals(allow_nan=True, allow_infinity=True),  # any scale, exponent or special value
    st.builds(Decimal, st.sampled_from(["-0.00", "1E+3", "0E-30", "-12345678901234567890.123"])),
)
bit_strings = st.integers(1, 64).flatmap(
    lambda n: st.builds(BitString, st.just(n), st.integers(0, (1 << n) - 1))
)
values: st.SearchStrategy[Value] = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**80), 2**80), st.floats(), decimals, st.text(),
    st.binary(max_size=40), moments, st.dates(), st.times(), st.builds(JsonText, st.text()),
    bit_strings,
)
names = st.text(min_size=1, max_size=10)
revisions = st.binary(min_size=16, max_size=16).map(Revision)


@st.composite
def change_events(draw: st.DrawFn) -> ChangeEvent:
    operation = draw(st.sampled_from(list(Operation)))
    key = draw(st.lists(st.tuples(st.sampled_from(["id", "line_no", "code"]), values),
                        min_size=1, max_size=3, unique_by=lambda pair: pair[0]))
    record = RecordKey.of(draw(names), draw(names), key, schema=draw(st.none() | names))
    columns = st.dictionaries(names.filter(lambda n: n not in dict(key)), values, max_size=6)
    before = {**dict(key), **draw(columns)}
    after = {**dict(key), **draw(columns)}
    if operation is Operation.UPDATE and draw(st.booleans()):
        after = {**before, **dict(list(after.items())[: len(key) + 1])}
    event_id = uuid.UUID(bytes=draw(st.binary(min_size=16, max_size=16)))
    return ChangeEvent(
        event_id=event_id, origin_node_id=draw(names), source_connector_id=draw(names),
        source_topic=draw(names), source_partition=draw(st.integers(0, 2**31)),
        source_position=draw(st.integers(0, 2**63)), record=record, operation=operation,
        captured_at=draw(moments),
        before=None if operation in (Operation.INSERT, Operation.SNAPSHOT) else before,
        after=None if operation is Operation.DELETE else after,
        base_revision=draw(st.none() | revisions),
        result_revision=draw(st.none() | revisions),
        source_sequence=draw(st.none() | st.integers(0, 2**63)),
        transaction_id=draw(st.none() | st.text()),
        transaction_order=draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
        rule_id=draw(st.none() | names), rule_version=draw(st.none() | st.integers(0, 2**40)),
        business_occurred_at=draw(st.none() | moments), trace_id=draw(st.text(max_size=8)),
        replay_epoch=draw(st.integers(0, 2**40)),
        schema_version=draw(st.sampled_from(["1.0", "1.3"])),
        source_details=draw(st.dictionaries(names, values, max_size=4)),
    )


# ----------------------------------------------------------------------------- helpers


def comparable(event: ChangeEvent) -> dict[str, Any]:
    """The event with every value in its canonical, type-tagged form (exact comparison)."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    for name in ("before", "after", "source_details"):
        row = fields[name]
        fields[name] = None if row is None else {k: canonical_value(v) for k, v in row.items()}
    fields["record"] = event.record.canonical()
    for name in ("captured_at", "business_occurred_at"):
        fields[name] = None if fields[name] is None else fields[name].isoformat()
    return fields


def expected_on_arrival(event: ChangeEvent, include_before: bool) -> ChangeEvent:
    """What the receiver should see, worked out independently of the codec."""
    key = dict(event.record.primary_key)
    before, after = event.before, event.after
    if event.operation is Operation.UPDATE:
        assert before is not None and after is not None
        changed = [name for name in event.changed_columns() if name not in key]
        after = {**key, **{name: after[name] for name in changed}}
        before = {**key, **{name: before[name] for name in changed if name in before}}
    if before is not None and not include_before:
        before = key
    return dataclasses.replace(event, before=before, after=after)


def wire_round_trip(event: ChangeEvent, include_before: bool = True) -> ChangeEvent:
    names = NameTable()
    wire = codec.event_to_wire(event, names, include_before=include_before)
    received = pb.ChangeEvent.FromString(wire.SerializeToString())
    return codec.event_from_wire(received, NameTable(names.names))


def update_event(**changes: Any) -> ChangeEvent:
    before = {"id": 7, "name": "Anders", "notes": "checked pump", "amount": Decimal("12.50"),
              "_sync_revision": "6f1c2a9e-3d4b-4c5a-8e7f-1a2b3c4d5e6f",
              "_sync_updated_at": NOW}
    after = {**before, "amount": Decimal("13.75"),
             "_sync_revision": "0b7e9d3c-1a2f-4e5d-9c8b-7a6f5e4d3c2b",
             "_sync_updated_at": NOW + dt.timedelta(seconds=5)}
    fields: dict[str, Any] = {
        "event_id": uuid.UUID(int=1), "origin_node_id": "ship-0042",
        "source_connector_id": "ship-0042-mysql", "source_topic": "sync.cdc.ship.erp.orders",
        "source_partition": 1, "source_position": 1234, "record": RecordKey.of(
            "erp", "orders", {"id": 7}), "operation": Operation.UPDATE,
        "captured_at": NOW, "before": before, "after": after,
        "base_revision": Revision.parse(str(before["_sync_revision"])),
        "result_revision": Revision.parse(str(after["_sync_revision"])),
    }
    fields.update(changes)
    return ChangeEvent(**fields)


def delete_event() -> ChangeEvent:
    update = update_event()
    return dataclasses.replace(
        update, operation=Operation.DELETE, after=None,
        result_revision=tombstone_revision(update.event_id),
    )


def batch_body(events: list[ChangeEvent], **kwargs: Any) -> bytes:
    return codec.encode_batch(events, node_id="ship-0042", batch_id=uuid.UUID(int=9),
                              created_at=NOW, **kwargs)


def decode(body: bytes) -> codec.DecodedBatch:
    return codec.decode_batch(body, max_compressed=MiB, max_decompressed=4 * MiB)


def rebuilt_body(content: bytes) -> bytes:
    """A batch body around hand-made content bytes, with a correct trailer."""
    trailer = pb.UploadBatch(uncompressed_bytes=len(content),
                             checksum=hashlib.sha256(content).digest()).SerializeToString()
    return codec.compress_bytes(content + trailer)


def content_of(batch: pb.UploadBatch) -> bytes:
    return batch.SerializeToString()


# ----------------------------------------------------------------------------- values


@given(values)
def test_every_value_type_round_trips_exactly(value: Value) -> None:
    wire = pb.Value()
    codec.value_to_wire(value, wire)
    received = pb.Value.FromString(wire.SerializeToString())
    assert canonical_value(codec.value_from_wire(received)) == canonical_value(value)


def test_value_kinds_are_compact_and_typed() -> None:
    cases: list[tuple[Value, str]] = [
        (None, "is_null"), (True, "bool_value"), (-5, "int_value"), (2**64 - 1, "big_int"),
        (1.5, "float_value"), (Decimal("-0.010"), "decimal"), ("ü", "text"), (b"\0", "blob"),
        (NOW, "timestamp_micros"), (dt.date(1969, 12, 31), "date_days"),
        (dt.time(23, 59, 59, 999999), "time_micros"), (JsonText("{}"), "json"),
        (BitString(12, 4095), "bits"),
    ]
    for value, kind in cases:
        wire = pb.Value()
        codec.value_to_wire(value, wire)
        assert wire.WhichOneof("kind") == kind
    wire = pb.Value()
    codec.value_to_wire(NOW, wire)
    assert wire.timestamp_micros == int(NOW.timestamp()) * 1_000_000


def test_zoned_time_values_are_refused() -> None:
    with pytest.raises(ValueError, match="zone"):
        codec.value_to_wire(dt.time(1, tzinfo=dt.UTC), pb.Value())


@pytest.mark.parametrize("wire", [
    pb.Value(), pb.Value(decimal="twelve"), pb.Value(big_int="1x"),
    pb.Value(time_micros=86_400_000_000), pb.Value(date_days=10**9),
    pb.Value(timestamp_micros=2**62), pb.Value(bits=pb.Bits(length=3, value=9)),
    pb.Value(event_revision=pb.RESULT_REVISION_TEXT),
])
def test_unreadable_values_are_malformed(wire: pb.Value) -> None:
    with pytest.raises(MalformedPayload):
        codec.value_from_wire(wire)


# ----------------------------------------------------------------------------- events


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(change_events(), st.booleans())
def test_change_events_round_trip(event: ChangeEvent, include_before: bool) -> None:
    received = wire_round_trip(event, include_before)
    assert comparable(received) == comparable(expected_on_arrival(event, include_before))
    if event.operation in (Operation.INSERT, Operation.SNAPSHOT) or (
        event.operation is Operation.DELETE and include_before
    ):
        assert comparable(received) == comparable(event)


def test_update_carries_only_changed_columns_and_their_before_values() -> None:
    event = update_event()
    names = NameTable()
    wire = codec.event_to_wire(event, names)
    sent = {names.name(column.name_ref) for column in wire.after}
    assert sent == {"amount", "_sync_revision", "_sync_updated_at"}
    assert {names.name(column.name_ref) for column in wire.before} == sent
    received = codec.event_from_wire(wire, names)
    assert dict(received.after or {}) == {
        "id": 7, "amount": Decimal("13.75"),
        "_sync_revision": "0b7e9d3c-1a2f-4e5d-9c8b-7a6f5e4d3c2b",
        "_sync_updated_at": NOW + dt.timedelta(seconds=5),
    }
    assert dict(received.before or {}) == {
        "id": 7, "amount": Decimal("12.50"),
        "_sync_revision": "6f1c2a9e-3d4b-4c5a-8e7f-1a2b3c4d5e6f", "_sync_updated_at": NOW,
    }


def test_update_without_before_values_says_so() -> None:
    names = NameTable()
    wire = codec.event_to_wire(update_event(), names, include_before=False)
    assert wire.before_omitted and not wire.before
    received = codec.event_from_wire(wire, names)
    assert dict(received.before or {}) == {"id": 7}


def test_revision_column_is_not_sent_twice() -> None:
    names = NameTable()
    wire = codec.event_to_wire(update_event(), names)
    revision_columns = [c for c in list(wire.after) + list(wire.before)
                        if names.name(c.name_ref) == "_sync_revision"]
    kinds = {c.value.WhichOneof("kind") for c in revision_columns}
    assert kinds == {"event_revision"}
    assert len(wire.base_revision) == len(wire.result_revision) == len(wire.event_id) == 16


def test_a_revision_column_in_other_text_form_is_sent_as_text() -> None:
    event = update_event()
    after = {**dict(event.after or {}), "_sync_revision": event.result_revision.text.upper()}
    event = dataclasses.replace(event, after=after)
    assert comparable(wire_round_trip(event)) == comparable(expected_on_arrival(event, True))


def test_delete_carries_its_before_image_unless_left_out() -> None:
    event = delete_event()
    assert comparable(wire_round_trip(event)) == comparable(event)
    without = wire_round_trip(event, include_before=False)
    assert dict(without.before or {}) == {"id": 7} and without.after is None
    assert without.result_revision == tombstone_revision(event.event_id)


def test_an_image_that_disagrees_with_the_key_cannot_be_sent() -> None:
    event = update_event(record=RecordKey.of("erp", "orders", {"id": 8}))
    with pytest.raises(ValueError, match="record key"):
        codec.event_to_wire(event, NameTable())


def test_names_are_interned_once_per_batch() -> None:
    events = [update_event(event_id=uuid.UUID(int=n), source_position=n) for n in range(50)]
    batch = codec.build_batch(events, node_id="ship-0042", batch_id=uuid.UUID(int=1),
                              created_at=NOW)
    assert len(batch.strings) == len(set(batch.strings))
    assert "sync.cdc.ship.erp.orders" in batch.strings and "amount" in batch.strings


# ----------------------------------------------------------------------------- batches


def test_batch_round_trips_with_header_and_trailer() -> None:
    events = [update_event(), delete_event()]
    decoded = decode(batch_body(events))
    assert decoded.node_id == "ship-0042" and decoded.batch_id == uuid.UUID(int=9)
    assert decoded.created_at == NOW and decoded.protocol_version == codec.PROTOCOL_VERSION
    assert [comparable(e) for e in decoded.events] == [
        comparable(expected_on_arrival(e, True)) for e in events]
    raw = zstandard.ZstdDecompressor().decompress(batch_body(events))
    assert decoded.uncompressed_bytes < len(raw)
    assert decoded.checksum == hashlib.sha256(raw[: decoded.uncompressed_bytes]).digest()


def test_compression_level_is_configurable() -> None:
    events = [update_event(event_id=uuid.UUID(int=n)) for n in range(200)]
    assert len(batch_body(events, level=19)) <= len(batch_body(events, level=1))
    assert len(decode(batch_body(events, level=19)).events) == 200


def test_a_bad_event_is_rejected_alone() -> None:
    batch = codec.build_batch([update_event(), delete_event()], node_id="ship-0042",
                              batch_id=uuid.UUID(int=1), created_at=NOW)
    batch.events[0].event_id = b"short"
    decoded = decode(codec.compress_bytes(codec.serialize_batch(batch)))
    assert [type(item).__name__ for item in decoded.items] == ["RejectedEvent", "ChangeEvent"]
    assert decoded.rejected[0].error.reason is WireReason.MALFORMED_PAYLOAD
    assert decoded.rejected[0].index == 0


# ----------------------------------------------------------------------------- versions


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.17", "1.999999"])
def test_known_major_with_any_minor_is_accepted(version: str) -> None:
    assert codec.check_protocol_version(version)[0] == 1


@pytest.mark.parametrize("version", ["3.0", "0.9", "17.3"])
def test_unknown_major_is_refused(version: str) -> None:
    with pytest.raises(UnsupportedProtocol) as refused:
        codec.check_protocol_version(version)
    assert refused.value.reason is WireReason.UNSUPPORTED_PROTOCOL


@pytest.mark.parametrize("version", ["", "1", "1.", ".0", "1.0.0", "v1.0", " 1.0", "01.0",
                                     "1.x", "1.0\n", "1" * 40 + ".0"])
def test_malformed_version_is_refused(version: str) -> None:
    with pytest.raises(UnsupportedProtocol) as refused:
        codec.check_protocol_version(version)
    assert refused.value.reason is WireReason.MALFORMED_PROTOCOL_VERSION


def test_batch_of_unknown_major_is_refused() -> None:
    batch = codec.build_batch([update_event()], node_id="n", batch_id=uuid.UUID(int=1),
                              created_at=NOW)
    batch.protocol_version = "3.0"
    with pytest.raises(UnsupportedProtocol):
        decode(codec.compress_bytes(codec.serialize_batch(batch)))


def test_newer_minor_with_unknown_fields_is_accepted() -> None:
    batch = codec.build_batch([update_event()], node_id="n", batch_id=uuid.UUID(int=1),
                              created_at=NOW)
    batch.protocol_version = "1.4"
    # Field 99 (varint 5) and a field 40 inside the event stand for what a newer minor adds.
    batch.events[0].MergeFromString(b"\xc0\x02\x07")
    content = content_of(batch) + b"\x98\x06\x05"
    decoded = decode(rebuilt_body(content))
    assert decoded.protocol_version == "1.4" and len(decoded.events) == 1


def test_event_of_unknown_schema_major_is_rejected() -> None:
    decoded = decode(batch_body([update_event(schema_version="2.0"), delete_event()]))
    assert len(decoded.events) == 1
    assert decoded.rejected[0].error.reason is WireReason.UNSUPPORTED_PROTOCOL


def test_other_messages_are_version_checked() -> None:
    body = codec.compress(pb.Heartbeat(protocol_version="3.1", node_id="ship-0042"))
    with pytest.raises(UnsupportedProtocol):
        codec.decompress_message(body, pb.Heartbeat, max_compressed=MiB, max_decompressed=MiB)
    ok = codec.compress(pb.Heartbeat(protocol_version="1.2", node_id="ship-0042"))
    heartbeat = codec.decompress_message(ok, pb.Heartbeat, max_compressed=MiB,
                                         max_decompressed=MiB)
    assert heartbeat.node_id == "ship-0042"
    page = codec.decompress_message(codec.compress(pb.ReceiptsPage(has_more=True)),
                                    pb.ReceiptsPage, max_compressed=MiB, max_decompressed=MiB)
    assert page.has_more


def test_error_response_carries_reason_and_supported_versions() -> None:
    response = codec.error_response(UnsupportedProtocol("major 2"), request_id="r-1")
    assert response.reason_code == "UNSUPPORTED_PROTOCOL"
    assert list(response.supported_protocol_versions) == ["1.0", "2.0"]


# ----------------------------------------------------------------------------- hostile bodies


def zero_bomb(size: int, pledge: bool) -> bytes:
    """`size` zero bytes as one zstd frame, built in 1 MiB steps (never held in memory)."""
    compressor = zstandard.ZstdCompressor(level=3)
    stream = compressor.compressobj(size=size if pledge else -1)
    chunk = bytes(MiB)
    parts = [stream.compress(chunk) for _ in range(size // MiB)]
    return b"".join([*parts, stream.flush()])


@pytest.fixture(scope="module")
def gigabyte_bomb() -> bytes:
    return zero_bomb(1 << 30, pledge=False)


@pytest.mark.parametrize("decoder", ["batch", "message"])
def test_zstd_bomb_stops_at_the_cap_without_allocating_past_it(
    gigabyte_bomb: bytes, decoder: str,
) -> None:
    cap = 4 * MiB
    assert len(gigabyte_bomb) < 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLarge) as refused:
            if decoder == "batch":
                codec.decode_batch(gigabyte_bomb, max_compressed=MiB, max_decompressed=cap)
            else:
                codec.decompress_message(gigabyte_bomb, pb.Heartbeat, max_compressed=MiB,
                                         max_decompressed=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.reason is WireReason.DECOMPRESSED_TOO_LARGE
    assert peak < 3 * cap


def test_declared_content_size_is_not_trusted() -> None:
    bomb = zero_bomb(256 * MiB, pledge=True)
    assert zstandard.get_frame_parameters(bomb).content_size == 256 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLarge):
            codec.decompress_bytes(bomb, max_compressed=MiB, max_decompressed=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MiB


def test_oversized_body_is_refused_before_decompressing() -> None:
    with pytest.raises(PayloadTooLarge) as refused:
        codec.decode_batch(b"\0" * 2048, max_compressed=1024, max_decompressed=MiB)
    assert refused.value.reason is WireReason.PAYLOAD_TOO_LARGE


@pytest.mark.parametrize("mangle", [
    lambda body: body[: len(body) // 2],
    lambda body: body[:-1],
    lambda body: b"",
    lambda body: b"definitely not zstd",
    lambda body: body + b"trailing",
    lambda body: body + body,
    lambda body: codec.compress_bytes(b"\xff\xff\xff\xff garbage protobuf"),
    lambda body: codec.compress_bytes(zstandard.ZstdDecompressor().decompress(body)[:-7]),
])
def test_truncated_or_garbage_bodies_are_malformed(mangle: Any) -> None:
    body = batch_body([update_event(), delete_event()])
    with pytest.raises(MalformedPayload) as refused:
        decode(mangle(body))
    assert refused.value.reason is WireReason.MALFORMED_PAYLOAD


def test_truncated_frames_are_malformed_not_empty() -> None:
    body = codec.compress(pb.ReceiptsPage(next_cursor="c" * 5000))
    for cut in (1, 5, len(body) // 2, len(body) - 1):
        with pytest.raises(MalformedPayload):
            codec.decompress_message(body[:cut], pb.ReceiptsPage, max_compressed=MiB,
                                     max_decompressed=MiB)


def test_changed_content_fails_the_checksum() -> None:
    body = batch_body([update_event()])
    raw = bytearray(zstandard.ZstdDecompressor().decompress(body))
    position = raw.index(b"ship-0042")
    raw[position] = ord("S")
    with pytest.raises(ChecksumMismatch) as refused:
        decode(codec.compress_bytes(bytes(raw)))
    assert refused.value.reason is WireReason.CHECKSUM_MISMATCH


def test_content_cut_at_an_event_boundary_fails_the_checksum() -> None:
    both = codec.build_batch([update_event(), delete_event()], node_id="n",
                             batch_id=uuid.UUID(int=1), created_at=NOW)
    trailer = codec.serialize_batch(both)[len(content_of(both)):]
    first_only = pb.UploadBatch()
    first_only.CopyFrom(both)
    del first_only.events[1]
    # The shorter content parses, but the original trailer does not add up for it.
    with pytest.raises(ChecksumMismatch):
        decode(codec.compress_bytes(content_of(first_only) + trailer))


def test_batch_without_trailer_fails_the_checksum() -> None:
    batch = codec.build_batch([update_event()], node_id="n", batch_id=uuid.UUID(int=1),
                              created_at=NOW)
    with pytest.raises(ChecksumMismatch):
        decode(codec.compress(batch))


def test_every_error_has_a_stable_reason() -> None:
    assert {cls.reason.value for cls in (
        PayloadTooLarge, DecompressedTooLarge, MalformedPayload, UnsupportedProtocol,
        ChecksumMismatch,
    )} == {"PAYLOAD_TOO_LARGE", "DECOMPRESSED_TOO_LARGE", "MALFORMED_PAYLOAD",
           "UNSUPPORTED_PROTOCOL", "CHECKSUM_MISMATCH"}


def test_an_image_repeating_a_key_column_is_malformed() -> None:
    names = NameTable()
    wire = codec.event_to_wire(update_event(), names)
    column = wire.after.add(name_ref=names.ref("id"))
    column.value.int_value = 8
    with pytest.raises(MalformedPayload, match="key column"):
        codec.event_from_wire(wire, names)
