"""Column-wise upload batches (protocol major 2): lossless, event ids derived on both sides, and
what the shore stores is the UploadBatch of the same events."""

from __future__ import annotations

import dataclasses
import uuid
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.test_wire_codec import (
    NOW,
    change_events,
    comparable,
    delete_event,
    expected_on_arrival,
    update_event,
)
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import BeforeValues, MalformedPayload, WireReason

MiB = 1 << 20
NODE = "ship-0042"


def derived(event: ChangeEvent) -> ChangeEvent:
    """The event with the id its coordinates give (what a ship's normalizer records)."""
    return dataclasses.replace(event, event_id=event.expected_event_id())


def sendable(events: list[ChangeEvent]) -> bool:
    """No name holds NUL (names are refused with NUL_IN_STRING by either major)."""
    names: list[str | None] = []
    for e in events:
        names += [e.origin_node_id, e.source_connector_id, e.source_topic, e.database, e.table,
                  e.schema, e.rule_id, *e.record.as_dict(), *e.source_details,
                  *(e.before or {}), *(e.after or {})]
    return not any(name and "\x00" in name for name in names)


def v2_body(events: list[ChangeEvent], before: BeforeValues = BeforeValues.ALL) -> bytes:
    return codec.encode_batch(events, node_id=NODE, batch_id=uuid.UUID(int=7), created_at=NOW,
                              wire_version=2, before_values=before)


def decode(body: bytes) -> codec.DecodedBatch:
    return codec.decode_batch(body, max_compressed=MiB, max_decompressed=8 * MiB)


def position(offset: int, latitude: str, *, op: Operation = Operation.UPDATE,
             base: Revision | None = None, result: Revision | None = None) -> ChangeEvent:
    record = RecordKey.of("vessel_ops", "vessel_state", {"id": 1})
    coordinates = SourceCoordinates(NODE, 0, "ship.vessel_ops.vessel_state", 0, offset)
    before = {"id": 1, "latitude": Decimal("51.900000"), "note": "ok"}
    after = {"id": 1, "latitude": Decimal(latitude), "note": "ok"}
    return ChangeEvent(
        event_id=event_id_for(coordinates, record, op), origin_node_id=NODE,
        source_connector_id="dbz", source_topic=coordinates.topic, source_partition=0,
        source_position=offset, record=record, operation=op, captured_at=NOW,
        before=None if op is Operation.INSERT else before,
        after=None if op is Operation.DELETE else after, base_revision=base,
        result_revision=result, source_sequence=offset, source_details={"binlog_position": 4})


# ----------------------------------------------------------------------------- properties


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_events(), min_size=1, max_size=6), st.booleans())
def test_decode_of_encode_is_the_batch(events: list[ChangeEvent], derive: bool) -> None:
    # Arbitrary events of many tables, every value type, NULLs and non-ASCII text; their ids
    # either derived from their coordinates (as ships record them) or not (sent explicitly).
    assume(sendable(events))
    events = [derived(event) for event in events] if derive else events
    decoded = decode(v2_body(events))
    assert [comparable(e) for e in decoded.events] == [
        comparable(expected_on_arrival(e, True)) for e in events]
    # What the shore stores is the UploadBatch of the same events.
    raw, stored = codec.open_batch(v2_body(events), MiB, 8 * MiB)
    names = codec.NameTable(stored.strings)
    assert [comparable(codec.event_from_wire(w, names)) for w in stored.events] == [
        comparable(expected_on_arrival(e, True)) for e in events]
    assert raw == codec.serialize_batch(stored)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_events(), min_size=1, max_size=6))
def test_every_event_id_the_shore_derives_is_the_one_the_ship_recorded(
        events: list[ChangeEvent]) -> None:
    assume(sendable(events))
    events = [derived(event) for event in events]
    batch = codec.build_batch_v2(events, node_id=NODE, batch_id=uuid.UUID(int=1),
                                 created_at=NOW)
    assert not batch.explicit_id_indexes  # no id crosses the link
    _, stored = codec.open_batch(codec.compress_bytes(codec.serialize_batch(batch)), MiB,
                                 8 * MiB)
    assert [uuid.UUID(bytes=w.event_id) for w in stored.events] == [e.event_id for e in events]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_events(), min_size=1, max_size=6))
def test_before_values_are_kept_only_where_a_conflict_can_be_recorded(
        events: list[ChangeEvent]) -> None:
    assume(sendable(events))
    decoded = decode(v2_body(events, BeforeValues.CONFLICT))
    assert [comparable(e) for e in decoded.events] == [
        comparable(expected_on_arrival(e, e.base_revision is not None)) for e in events]


# ----------------------------------------------------------------------------- compactness


def test_a_drifting_position_costs_a_few_bytes_per_event() -> None:
    events = [position(1000 + n, f"51.{900000 - 37 * n:06d}") for n in range(200)]
    v1 = codec.encode_batch(events, node_id=NODE, batch_id=uuid.UUID(int=1), created_at=NOW)
    v2 = v2_body(events)
    assert len(v2) * 4 < len(v1)
    assert [comparable(e) for e in decode(v2).events] == [
        comparable(expected_on_arrival(e, True)) for e in events]


def test_revisions_are_derived_where_they_can_be() -> None:
    first, second = Revision(b"\x01" * 16), Revision(b"\x02" * 16)
    chained = [position(1, "51.1", base=Revision(b"\x00" * 16), result=first),
               position(2, "51.2", base=first, result=second)]
    deleted = position(3, "51.2", op=Operation.DELETE, base=second)
    deleted = dataclasses.replace(deleted, result_revision=tombstone_revision(deleted.event_id))
    batch = codec.build_batch_v2([*chained, deleted], node_id=NODE, batch_id=uuid.UUID(int=1),
                                 created_at=NOW, before_values=BeforeValues.ALL)
    # Explicit: the first base and the two update results; the chained bases and the
    # tombstone are derived.
    assert len(batch.events.revisions) == 3 * 16
    decoded = decode(codec.compress_bytes(codec.serialize_batch(batch)))
    assert [(e.base_revision, e.result_revision) for e in decoded.events] == [
        (Revision(b"\x00" * 16), first), (first, second),
        (second, tombstone_revision(deleted.event_id))]


def test_revisions_chain_only_within_one_record() -> None:
    # Keys equal in Python but not as canonical keys (1, True, "1", decimals of two exponents)
    # are different records: a base equal to another record's result is sent explicitly.
    revision = Revision(b"\x01" * 16)
    keys: list[int | str | Decimal] = [1, True, "1", Decimal("1.0"), Decimal("1.00"), 1]
    latitudes = ["51.1", "51.10", "51.1", "51.100", "51.10", "51.1"]
    events = []
    for offset, (key, latitude) in enumerate(zip(keys, latitudes, strict=True), start=1):
        event = position(offset, latitude, base=revision, result=revision)
        assert event.before is not None and event.after is not None
        events.append(derived(dataclasses.replace(
            event, record=RecordKey.of("vessel_ops", "vessel_state", {"id": key}),
            before={**event.before, "id": key}, after={**event.after, "id": key})))
    batch = codec.build_batch_v2(events, node_id=NODE, batch_id=uuid.UUID(int=1),
                                 created_at=NOW, before_values=BeforeValues.ALL)
    # Explicit: every result and every base but the last (key 1 again).
    assert len(batch.events.revisions) == (6 + 5) * 16
    decoded = decode(codec.compress_bytes(codec.serialize_batch(batch))).events
    assert [(e.base_revision, e.result_revision) for e in decoded] == [(revision, revision)] * 6
    assert [e.record.key_text() for e in decoded] == [e.record.key_text() for e in events]
    # Decimals equal in value keep their own exponents.
    assert [str(e.after["latitude"]) for e in decoded if e.after] == latitudes


# ----------------------------------------------------------------------------- refusals


def reencoded(batch: pb.UploadBatchV2) -> bytes:
    return codec.compress_bytes(codec.serialize_batch(batch))


def test_a_batch_whose_derived_ids_are_not_the_recorded_ones_is_refused() -> None:
    batch = codec.build_batch_v2([derived(update_event()), derived(delete_event())],
                                 node_id=NODE, batch_id=uuid.UUID(int=1), created_at=NOW)
    batch.events.offset_deltas[0] += 1  # another position: another id than the ship's
    with pytest.raises(codec.EventIdMismatch) as refused:
        codec.open_batch(reencoded(batch), MiB, 8 * MiB)
    assert refused.value.reason is WireReason.EVENT_ID_MISMATCH


@pytest.mark.parametrize("damage", [
    lambda b: b.events.operations.append(1),                  # one operation too many
    lambda b: b.events.table_runs.extend([0, 1]),             # runs beyond the batch
    lambda b: b.tables[0].after.add().deltas.append(1),       # a column nobody holds
    lambda b: b.tables[0].after_bits.append(1),               # a bitmap too many
    lambda b: b.tables[0].after[0].deltas.append(5),          # a value too many
    lambda b: setattr(b, "event_count", 3),                   # events the columns lack
    lambda b: b.events.revision_modes.append(5),              # revision modes too many
    lambda b: b.tables[0].key_refs.append(b.tables[0].column_refs[0]),  # a key lacking values
])
def test_an_inconsistent_batch_is_refused_with_a_reason(damage: object) -> None:
    events = [position(1000 + n, f"51.{900000 - n:06d}") for n in range(2)]
    batch = codec.build_batch_v2(events, node_id=NODE, batch_id=uuid.UUID(int=1),
                                 created_at=NOW, before_values=BeforeValues.ALL)
    damage(batch)  # type: ignore[operator]
    with pytest.raises(MalformedPayload) as refused:
        codec.open_batch(reencoded(batch), MiB, 8 * MiB)
    assert refused.value.reason is WireReason.MALFORMED_PAYLOAD and str(refused.value)


def test_caps_hold_for_v2_batches() -> None:
    events = [position(1000 + n, "51.1") for n in range(20)]
    with pytest.raises(codec.WireError) as refused:
        codec.open_batch(v2_body(events), MiB, 8 * MiB, max_events=10)
    assert refused.value.reason is WireReason.TOO_MANY_EVENTS
    batch = codec.build_batch_v2(events, node_id=NODE, batch_id=uuid.UUID(int=1),
                                 created_at=NOW)
    batch.strings[0] = "a\x00b"
    with pytest.raises(codec.WireError) as nul:
        codec.open_batch(reencoded(batch), MiB, 8 * MiB)
    assert nul.value.reason is WireReason.NUL_IN_STRING
    batch.strings[0] = NODE
    body = codec.serialize_batch(batch)
    at = body.index(batch.batch_id)  # one byte of the batch id changed on the way
    damaged = body[:at] + b"\xff" + body[at + 1:]
    with pytest.raises(codec.ChecksumMismatch):
        codec.open_batch(codec.compress_bytes(damaged), MiB, 8 * MiB)


def test_a_shore_of_major_1_only_refuses_v2_as_unsupported() -> None:
    # What a shore that knows no major 2 does: parse the body as an UploadBatch, check the
    # version.
    raw = codec.serialize_batch(codec.build_batch_v2(
        [position(1, "51.1")], node_id=NODE, batch_id=uuid.UUID(int=1), created_at=NOW))
    as_v1 = pb.UploadBatch.FromString(raw)
    assert as_v1.protocol_version == "2.0" and not as_v1.events
    assert as_v1.protocol_version.split(".")[0] == "2"
