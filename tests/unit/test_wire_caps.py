"""The bounded cost of opening a batch: shape caps checked on the raw bytes before parsing,
NUL characters refused in text, and fields unknown to this version dropped before storage."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from tests.clocks import rounded_now
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.batches import MAX_COLUMNS, MAX_NAME_BYTES, MAX_NAMES, check_batch_shape
from tidesync.wire.protocol import NulInString, ShapeTooLarge, WireReason

NOW = rounded_now()
MiB = 1 << 20


def body_of(content: bytes) -> bytes:
    """A compressed batch body around hand-made content bytes, with a correct trailer."""
    trailer = pb.UploadBatch(uncompressed_bytes=len(content),
                             checksum=hashlib.sha256(content).digest()).SerializeToString()
    return codec.compress_bytes(content + trailer)


def header(**fields: object) -> pb.UploadBatch:
    batch = pb.UploadBatch(protocol_version="1.0", node_id="ship-0042",
                           batch_id=uuid.UUID(int=9).bytes)
    for name, value in fields.items():
        getattr(batch, name).extend(value) if isinstance(value, list) else setattr(
            batch, name, value)
    return batch


def open_(body: bytes, max_events: int = 500) -> tuple[bytes, pb.UploadBatch]:
    return codec.open_batch(body, MiB, 8 * MiB, max_events=max_events)


def test_a_body_of_one_character_names_is_refused_before_it_is_parsed() -> None:
    # The attack of the issue: a few KB that inflate to millions of tiny strings. The scan of
    # the raw bytes stops at the first name past the cap; the parser never sees them.
    content = header().SerializeToString() + b"\x32\x01a" * (2 * MAX_NAMES)
    body = body_of(content)
    assert len(body) < 8 * 1024
    with pytest.raises(ShapeTooLarge) as refused:
        open_(body)
    assert refused.value.reason is WireReason.TOO_MANY_NAMES


def test_the_name_cap_itself_is_accepted() -> None:
    batch = header(strings=[f"n{i}" for i in range(MAX_NAMES)])
    _, opened = open_(body_of(batch.SerializeToString()))
    assert len(opened.strings) == MAX_NAMES


def test_a_name_longer_than_its_cap_is_refused() -> None:
    for batch in (header(strings=["t" * (MAX_NAME_BYTES + 1)]),
                  header(node_id="s" * (MAX_NAME_BYTES + 1))):
        with pytest.raises(ShapeTooLarge) as refused:
            open_(body_of(batch.SerializeToString()))
        assert refused.value.reason is WireReason.FIELD_TOO_LONG


def test_events_are_counted_before_parsing() -> None:
    batch = header()
    for n in range(6):
        batch.events.add(event_id=uuid.UUID(int=n).bytes)
    content = batch.SerializeToString()
    check_batch_shape(content, 6)
    with pytest.raises(ShapeTooLarge) as refused:
        open_(body_of(content), max_events=5)
    assert refused.value.reason is WireReason.TOO_MANY_EVENTS


def test_a_nul_in_a_name_or_the_header_is_refused() -> None:
    for batch in (header(strings=["sync.cdc.a\x00b"]), header(node_id="ship\x00")):
        with pytest.raises(NulInString) as refused:
            open_(body_of(batch.SerializeToString()))
        assert refused.value.reason is WireReason.NUL_IN_STRING


def test_a_nul_anywhere_in_a_heartbeat_is_refused() -> None:
    heartbeat = pb.Heartbeat(node_id="ship-0042", protocol_version="1.0")
    heartbeat.health.add(reason_code="DISK", detail="full\x00")
    with pytest.raises(NulInString):
        codec.decompress_message(codec.compress(heartbeat), pb.Heartbeat,
                                 max_compressed=MiB, max_decompressed=MiB)


def test_fields_unknown_to_this_version_are_not_stored() -> None:
    batch = header(strings=["ship-0042", "sync.cdc.a"])
    batch.events.add(event_id=uuid.UUID(int=1).bytes, operation=pb.INSERT)
    known = batch.SerializeToString()
    unknown_top = b"\xfa\x06\x05extra"  # field 111, length-delimited
    event_bytes = batch.events[0].SerializeToString() + b"\xa0\x1f\x2a"  # field 500 = 42
    smuggled = header(strings=["ship-0042", "sync.cdc.a"]).SerializeToString() + (
        b"\x2a" + bytes([len(event_bytes)]) + event_bytes) + unknown_top
    raw, _ = open_(body_of(smuggled))
    assert b"extra" not in raw and b"\xa0\x1f\x2a" not in raw
    assert raw.startswith(known)
    # What is stored is itself a valid batch with a correct trailer.
    stored, again = open_(codec.compress_bytes(raw))
    assert stored == raw and again.events[0].event_id == uuid.UUID(int=1).bytes


def test_a_batch_without_unknown_fields_is_stored_as_sent() -> None:
    batch = header(strings=["ship-0042"])
    body = body_of(batch.SerializeToString())
    raw, _ = open_(body)
    assert codec.compress_bytes(raw) == body


def test_a_batch_of_more_columns_than_its_cap_is_refused_before_decoding() -> None:
    batch = header(strings=["ship-0042", "c"])
    event = batch.events.add(event_id=uuid.UUID(int=1).bytes, operation=pb.INSERT)
    column = pb.Column(name_ref=1, value=pb.Value(text="a"))
    event.after.extend([column] * (MAX_COLUMNS + 1))
    with pytest.raises(ShapeTooLarge) as refused:
        open_(body_of(batch.SerializeToString()))
    assert refused.value.reason is WireReason.TOO_MANY_COLUMNS
