"""Incremental snapshots of the built-in capture: which rows a chunk publishes at its high
watermark, the requests kept beside the capture position (resumable), the phases an operator
sees, and values read by SELECT as the binlog would give them."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tidesync.capture.change_records import RowChange
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.capture.errors import CaptureError
from tidesync.capture.snapshot import last_images, rows_to_emit, select_value
from tidesync.capture.snapshot_store import (
    SnapshotPhase,
    SnapshotState,
    SnapshotStore,
    decode_key,
    encode_key,
    snapshot_phase,
)
from tidesync.domain.values import BitString, JsonText
from tidesync.entrypoints.snapshot_cli import read_keys

TABLE = TableDefinition("erp", "parts", (ColumnDefinition("id", "int"),
                                         ColumnDefinition("note", "varchar", length=20)),
                        ("id",))
SOURCE = SourceInfo(server_id=1, file="binlog.000001", pos=4, ts_ms=0)


def _chunk(*keys: int) -> dict[tuple[int], dict[str, object]]:
    return {(key,): {"id": key, "note": f"read {key}"} for key in keys}


def test_rows_unchanged_between_the_watermarks_are_published_as_read():
    assert rows_to_emit(_chunk(1, 2, 3), {}) == list(_chunk(1, 2, 3).values())


def test_a_row_changed_between_the_watermarks_is_published_as_it_stands_at_the_high_mark():
    changed = {(2,): {"id": 2, "note": "changed"}, (3,): None, (9,): {"id": 9, "note": "new"}}
    assert rows_to_emit(_chunk(1, 2, 3), changed) == [
        {"id": 1, "note": "read 1"}, {"id": 2, "note": "changed"}]


def test_what_a_change_leaves_under_each_key():
    update = RowChange(TABLE, EnvelopeOp.UPDATE, {"id": 1, "note": "a"}, {"id": 1, "note": "b"},
                       SOURCE)
    moved = RowChange(TABLE, EnvelopeOp.UPDATE, {"id": 1, "note": "a"}, {"id": 5, "note": "a"},
                      SOURCE)
    delete = RowChange(TABLE, EnvelopeOp.DELETE, {"id": 1, "note": "a"}, None, SOURCE)
    assert last_images(TABLE, update) == [((1,), {"id": 1, "note": "b"})]
    assert last_images(TABLE, moved) == [((1,), None), ((5,), {"id": 5, "note": "a"})]
    assert last_images(TABLE, delete) == [((1,), None)]


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 50), unique=True),
       changes=st.lists(st.tuples(st.integers(0, 60), st.one_of(st.none(), st.text(max_size=3)))))
def test_the_published_rows_are_the_chunk_as_it_stands_at_the_high_mark(keys, changes):
    """Applying the window's changes in order to the chunk as read gives exactly the rows
    published, restricted to the chunk's keys, in the chunk's order."""
    chunk = _chunk(*keys)
    changed: dict[tuple[int], dict[str, object] | None] = {}
    state: dict[tuple[int], dict[str, object] | None] = dict(chunk)
    for key, note in changes:
        image = None if note is None else {"id": key, "note": note}
        changed[(key,)] = image
        state[(key,)] = image
    expected = [state[key] for key in chunk if state[key] is not None]
    assert rows_to_emit(chunk, changed) == expected


def test_requests_survive_a_reopen_and_resume_after_the_last_chunk_done(tmp_path: Path):
    clock = ManualClock()
    path = tmp_path / "position.sqlite"
    store = SnapshotStore(path)
    first = store.request("sync.cdc.ship-1", "erp", "parts", keys=None, chunk_rows=100,
                          reason="onboarding", actor="user:ann", now=clock())
    store.request("sync.cdc.ship-1", "erp", "orders", keys=[(1,), (2,)], chunk_rows=100,
                  reason="repair", actor="user:ann", now=clock())
    store.start(first, rows_total=250, chunks_total=3, now=clock())
    store.chunk_done(first, (100,), 100, {("t", 0): 41, ("t", 1): 7}, clock(), last=False)
    store.close()

    reopened = SnapshotStore(path)  # as after a SIGKILL of the capture
    active = reopened.active("sync.cdc.ship-1")
    assert active is not None and active.id == first
    assert (active.state, active.cursor, active.chunks_done, active.rows_emitted) == (
        SnapshotState.SNAPSHOTTING, (100,), 1, 100)
    reopened.chunk_done(first, (200,), 100, {("t", 0): 12, ("t", 2): 3}, clock(), last=False)
    reopened.chunk_done(first, (250,), 50, {}, clock(), last=True)
    done = reopened.requests()[0]
    assert done.state is SnapshotState.EMITTED and done.chunks_total == done.chunks_done == 3
    assert dict(done.barrier) == {("t", 0): 41, ("t", 1): 7, ("t", 2): 3}
    following = reopened.active("sync.cdc.ship-1")
    assert following is not None and following.table == "orders"
    assert following.keys == ((1,), (2,))
    assert reopened.active("sync.cdc.other") is None
    reopened.fail(following.id, "table dropped", clock())
    assert reopened.active("sync.cdc.ship-1") is None
    reopened.close()


def test_a_request_needs_a_reason_and_a_sane_chunk(tmp_path: Path):
    store = SnapshotStore(tmp_path / "p.sqlite")
    with pytest.raises(CaptureError):
        store.request("c", "erp", "parts", keys=None, chunk_rows=0, reason="x", actor="a",
                      now=ManualClock()())
    with pytest.raises(CaptureError):
        store.request("c", "erp", "parts", keys=None, chunk_rows=10, reason=" ", actor="a",
                      now=ManualClock()())
    store.close()


def test_phases_from_snapshotting_to_in_sync(tmp_path: Path):
    clock = ManualClock()
    store = SnapshotStore(tmp_path / "p.sqlite")
    snapshot_id = store.request("c", "erp", "parts", keys=None, chunk_rows=10, reason="r",
                                actor="a", now=clock())
    assert snapshot_phase(store.requests()[0], {})[0] is SnapshotPhase.QUEUED
    store.start(snapshot_id, 15, 2, clock())
    store.chunk_done(snapshot_id, (10,), 10, {("t", 0): 20}, clock(), last=False)
    assert snapshot_phase(store.requests()[0], {})[0] is SnapshotPhase.SNAPSHOTTING
    store.chunk_done(snapshot_id, (15,), 5, {("t", 0): 30, ("t", 1): 4}, clock(), last=True)
    request = store.requests()[0]
    assert snapshot_phase(request, None) == (SnapshotPhase.CATCHING_UP, 36)
    assert snapshot_phase(request, {("t", 0): 25}) == (SnapshotPhase.CATCHING_UP, 10)
    assert snapshot_phase(request, {("t", 0): 30, ("t", 1): 4}) == (SnapshotPhase.IN_SYNC, 0)
    store.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**63, 2**64), st.text(max_size=20), st.binary(max_size=8),
                          st.decimals(allow_nan=False, allow_infinity=False, places=3),
                          st.dates()), min_size=1, max_size=3))
def test_keys_round_trip_through_the_store(key):
    assert decode_key(json.loads(json.dumps(encode_key(key)))) == tuple(key)


def test_keys_files_from_reconcile_keys(tmp_path: Path):
    path = tmp_path / "keys.txt"
    path.write_text('[1]\n\n[2, "b"]\n7\n', encoding="utf-8")
    assert read_keys(path) == [(1,), (2, "b"), (7,)]
    path.write_text('[1]\n{"x": [1]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"keys\.txt:2"):
        read_keys(path)


def test_select_values_are_the_values_binlog_capture_gives():
    def column(kind: str, **kw: object) -> ColumnDefinition:
        return ColumnDefinition("c", kind, **kw)  # type: ignore[arg-type]

    naive = dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    assert select_value(column("timestamp", fsp=3), naive) == naive.replace(tzinfo=dt.UTC)
    assert select_value(column("time", fsp=6), dt.timedelta(hours=13, microseconds=16)) == (
        dt.time(13, 0, 0, 16))
    assert select_value(column("float"), 0.10000000149011612) == 0.1
    assert select_value(column("bit", length=10), b"\x02\x81") == BitString(10, 0b1010000001)
    assert select_value(column("bit", length=1), b"\x01") is True
    assert select_value(column("json"), '{"k": 1}') == JsonText('{"k": 1}')
    assert select_value(column("decimal", precision=6, scale=2), Decimal("1.50")) == (
        Decimal("1.50"))
    assert select_value(column("varbinary", length=4), bytearray(b"ab")) == b"ab"
    assert select_value(column("datetime", nullable=False), "0000-00-00 00:00:00") == (
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
