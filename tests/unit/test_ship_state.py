"""The ship state store on a real SQLite file: migrations and pragmas, source sequences, re-reads
after a restart, duplicates the capture emitted again, blocked records, and the contiguous
received/terminal watermarks over arbitrary completion orders (hypothesis)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.cdc.kafka import PartitionKey
from tidesync.cdc.outcomes import Block, BlockReason, Normalized, Skip, SkipReason
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.ship.state import (
    DUPLICATE_RESULT,
    Consumed,
    DispositionRefused,
    EventState,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteShipState,
    StateReason,
    TerminalResult,
    queue_key_digest,
)
from tidesync.ship.state.intake import _KNOWN_AT, capture_position
from tidesync.ship.state.watermarks import _FIRST_PER_OPEN_STATE

NODE = "ship-7"
TOPIC = "sync.cdc.fleet.items"
CAPTURED = dt.datetime(2019, 11, 1, tzinfo=dt.UTC)


def event(offset: int, key: int, *, partition: int = 0, binlog_pos: int | None = None,
          epoch: int = 0) -> ChangeEvent:
    record = RecordKey.of("fleet", "items", {"id": key})
    source = SourceCoordinates(NODE, epoch, TOPIC, partition, offset)
    details: dict[str, object] = {"server_id": 101, "binlog_file": "mysql-bin.000001",
                                  "binlog_position": binlog_pos if binlog_pos is not None
                                  else 1000 + offset, "binlog_row": 0}
    return ChangeEvent(
        event_id=event_id_for(source, record, Operation.INSERT), origin_node_id=NODE,
        source_connector_id="dbz", source_topic=TOPIC, source_partition=partition,
        source_position=offset, record=record, operation=Operation.INSERT, captured_at=CAPTURED,
        after={"id": key, "qty": 1}, replay_epoch=epoch,
        source_details=details,  # type: ignore[arg-type]
    )


def consumed(offset: int, outcome: object, key: int | None = None,
             partition: int = 0) -> Consumed:
    digest = queue_key_digest(None if key is None else b"key-%d" % key)
    return Consumed(TOPIC, partition, offset, outcome, 100, digest)  # type: ignore[arg-type]


def event_record(offset: int, key: int, partition: int = 0, **kw: int) -> Consumed:
    return consumed(offset, Normalized(event(offset, key, partition=partition, **kw)), key,
                    partition)


def skip_record(offset: int, partition: int = 0) -> Consumed:
    return consumed(offset, Skip(SkipReason.TOMBSTONE, "tombstone"), None, partition)


def block_record(offset: int, key: int | None = None) -> Consumed:
    return consumed(offset, Block(BlockReason.MALFORMED_JSON, "value is not JSON"), key)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    yield state
    state.close()


KEY = PartitionKey(TOPIC, 0)


# ----------------------------------------------------------------------------- the file


def test_migrations_pragmas_and_indexes(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    state = SQLiteShipState(path, NODE, "group-1")
    assert state.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert state.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert state.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert state.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10000
    versions = state.conn.execute("SELECT version, name FROM schema_version").fetchall()
    assert versions == [(1, "0001_state"), (2, "0002_downlink_commands"),
                        (3, "0003_operator_actions"), (4, "0004_domain_command_kinds"),
                        (5, "0005_rule_switch"), (6, "0006_resend_command_kind"),
                        (7, "0007_replay_runs"), (8, "0008_open_events_by_state"),
                        (9, "0009_reconcile_command_kinds"), (10, "0010_pruned_events"),
                        (11, "0011_capture_positions")]
    tables = {row[0] for row in state.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"event_state", "partition_watermark", "rule_snapshot", "inbound_command",
            "applied_command", "queue_metric"} <= tables
    plan = " ".join(str(row) for row in state.conn.execute(
        "EXPLAIN QUERY PLAN " + _FIRST_PER_OPEN_STATE, ("UPLINK", TOPIC, 0, 0)))
    assert "COVERING INDEX event_state_open" in plan and "state=?" in plan
    state.close()
    again = SQLiteShipState(path, NODE, "group-1")  # reopening applies nothing twice
    assert again.migrate() == []
    again.close()


def test_state_and_position_are_constrained(store: SQLiteShipState) -> None:
    store.record([event_record(0, 1)], 0)
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute("UPDATE event_state SET state = 'DONE'")
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute("UPDATE partition_watermark SET terminal_offset = read_offset + 1")


# ----------------------------------------------------------------------------- sequences


def test_sequences_are_contiguous_over_events_only(store: SQLiteShipState) -> None:
    recorded = store.record([event_record(0, 1), skip_record(1), event_record(2, 2),
                             block_record(3, 9), event_record(4, 3)], 0)
    assert [e.source_sequence for e in recorded.sendable] == [1, 2, 3]
    assert (recorded.new_events, recorded.skipped, recorded.blocked) == (3, 1, 1)
    watermark = store.watermark(KEY)
    assert watermark is not None
    assert (watermark.read_offset, watermark.terminal_offset) == (4, -1)
    assert watermark.next_source_sequence == 4


def test_a_reread_keeps_its_sequence_and_state(store: SQLiteShipState) -> None:
    first = store.record([event_record(0, 1), event_record(1, 2), skip_record(2),
                          event_record(3, 3)], 0)
    ids = [e.event_id for e in first.sendable]
    store.apply_answers([ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="APPLIED"),
                         ReceiveAnswer(ids[1], ReceiveOutcome.RECEIVED)])
    # After a restart the queue replays from the committed offset (terminal + 1 = 1).
    watermark = store.start_partition(KEY, 0)
    assert watermark is not None and watermark.commit_offset == 1
    again = store.record([event_record(1, 2), skip_record(2), event_record(3, 3),
                          event_record(4, 4)], 0)
    assert [(e.event_id, e.source_sequence) for e in again.sendable] == [
        (ids[2], 3), (again.sendable[1].event_id, 4)]
    assert (again.rereads, again.awaiting_receipt, again.new_events) == (3, 1, 1)
    assert store.state_counts() == {"TERMINAL": 1, "RECEIVED": 1, "READY": 2}


def test_terminal_upload_answers_move_each_event_once(store: SQLiteShipState) -> None:
    ids = [e.event_id for e in store.record([event_record(o, o) for o in range(5)], 0).sendable]
    rejected_before = store.receipts.shore_rejections()
    store.apply_answers([ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="APPLIED")])
    progress = store.apply_answers([
        ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="CONFLICT_RECORDED"),  # final
        ReceiveAnswer(ids[1], ReceiveOutcome.RECEIVED, result="APPLIED"),
        ReceiveAnswer(ids[2], ReceiveOutcome.RECEIVED, result="REJECTED", reason="BAD_ROW"),
        ReceiveAnswer(ids[3], ReceiveOutcome.RETRYABLE_FAILURE, reason="BUSY"),
        ReceiveAnswer(uuid.uuid4(), ReceiveOutcome.RECEIVED, result="APPLIED"),
    ])
    assert progress.terminal == {ids[1], ids[2]} and progress.unknown == 1
    assert progress.retry == {ids[3]} and progress.terminal_bytes == 200
    assert store.receipts.shore_rejections() == rejected_before + 1
    assert store.state_counts() == {"TERMINAL": 3, "RETRY_WAIT": 1, "READY": 1}
    watermark = store.watermark(KEY)
    assert watermark is not None and watermark.terminal_offset == 2


def test_receipts_advance_the_terminal_watermark_and_the_cursor(store: SQLiteShipState) -> None:
    ids = [e.event_id for e in store.record([event_record(o, o) for o in range(4)], 0).sendable]
    store.apply_answers([ReceiveAnswer(i, ReceiveOutcome.RECEIVED) for i in ids])
    watermark = store.watermark(KEY)
    assert watermark is not None
    assert (watermark.received_offset, watermark.terminal_offset) == (3, -1)
    progress = store.apply_receipts([TerminalResult(ids[1], "APPLIED"),
                                     TerminalResult(ids[0], "CONFLICT_RECORDED"),
                                     TerminalResult(uuid.uuid4(), "APPLIED")], "17")
    assert progress.terminal == {ids[0], ids[1]} and progress.unknown == 1
    assert progress.terminal_bytes == 200
    watermark = store.watermark(KEY)
    assert watermark is not None and watermark.terminal_offset == 1
    assert store.cursor() == "17"
    # A repeated receipt changes nothing.
    assert store.apply_receipts([TerminalResult(ids[1], "APPLIED")], "18").terminal == set()


# ----------------------------------------------------------------------------- duplicates, blocks


def test_a_record_the_capture_emitted_again_is_a_duplicate(store: SQLiteShipState) -> None:
    original = store.record([event_record(0, 1, binlog_pos=500)], 0).sendable[0]
    again = store.record([event_record(1, 1, binlog_pos=500), event_record(2, 2)], 0)
    assert [e.source_sequence for e in again.sendable] == [2]
    assert again.duplicates == 1
    row = store.conn.execute("SELECT state, result, reason, duplicate_of, source_sequence"
                             " FROM event_state WHERE kafka_offset = 1").fetchone()
    assert row == ("TERMINAL", DUPLICATE_RESULT, StateReason.CAPTURE_REEMITTED,
                   original.event_id.bytes, None)
    # Within one poll as well.
    twice = store.record([event_record(3, 3, binlog_pos=900), event_record(4, 3, binlog_pos=900)],
                         0)
    assert (len(twice.sendable), twice.duplicates) == (1, 1)


def test_captures_are_indexed_in_binlog_order(store: SQLiteShipState) -> None:
    store.record([event_record(0, 1, binlog_pos=500)], 0)
    assert store.conn.execute("SELECT capture_pos FROM event_state").fetchone()[0] == (
        1 << 40 | 500)  # mysql-bin.000001, position 500
    plan = " ".join(str(row) for row in store.conn.execute(
        "EXPLAIN QUERY PLAN " + _KNOWN_AT.format(values="VALUES (?, ?)"), (1, b"x")))
    assert "event_state_capture_at (capture_pos=? AND capture_id=?)" in plan


@pytest.mark.parametrize(("file", "position", "place"), [
    ("mysql-bin.000042", 4, 42 << 40 | 4), ("mariadb-bin.999999", (1 << 40) - 1,
                                            999999 << 40 | (1 << 40) - 1),
    ("binlog", 4, None), ("mysql-bin.0000001", 4, None), ("mysql-bin.000001", 1 << 40, None),
    ("mysql-bin.00001٣", 4, None), (None, 4, None), ("mysql-bin.000001", None, None)])
def test_a_capture_place_is_only_taken_from_a_numbered_file_and_a_position(
        file: str | None, position: int | None, place: int | None) -> None:
    plain = event(0, 1)
    details = {**plain.source_details, "binlog_file": file, "binlog_position": position}
    assert capture_position(dataclasses.replace(plain, source_details=details)) == place


def test_a_capture_recorded_before_places_were_kept_is_still_recognised(
        store: SQLiteShipState) -> None:
    original = store.record([event_record(0, 1, binlog_pos=500)], 0).sendable[0]
    # As a state file written before 0011 holds it: no place, in the capture-id index.
    store.conn.execute("UPDATE event_state SET capture_pos = NULL")
    again = store.record([event_record(1, 1, binlog_pos=500)], 0)
    assert (again.duplicates, again.new_events) == (1, 0)
    assert store.conn.execute("SELECT duplicate_of FROM event_state WHERE kafka_offset = 1"
                              ).fetchone()[0] == original.event_id.bytes


def test_a_blocked_record_holds_the_checkpoint_and_its_key(store: SQLiteShipState) -> None:
    recorded = store.record([event_record(0, 1), block_record(1, key=2), event_record(2, 3),
                             event_record(3, 2)], 0)
    assert [e.source_position for e in recorded.sendable] == [0, 2]  # key 2 waits behind it
    store.apply_answers([ReceiveAnswer(e.event_id, ReceiveOutcome.RECEIVED, result="APPLIED")
                         for e in recorded.sendable])
    watermark = store.watermark(KEY)
    assert watermark is not None and watermark.terminal_offset == 0  # never past the block
    assert store.blocked_reasons() == {"MALFORMED_JSON": 1, "BEHIND_BLOCKED_RECORD": 1}
    # A shore rejection blocks too, and holds that key's later events.
    later = store.record([event_record(4, 5)], 0).sendable
    store.apply_answers([ReceiveAnswer(later[0].event_id, ReceiveOutcome.PERMANENT_REJECTED,
                                       "INTEGRITY_MISMATCH", "digest differs")])
    held = store.record([event_record(5, 5), event_record(6, 6)], 0)
    assert [e.source_position for e in held.sendable] == [6]


def test_an_expired_block_lets_its_key_go_on_and_is_recorded(store: SQLiteShipState) -> None:
    recorded = store.record([event_record(0, 1), block_record(1, key=2), event_record(2, 3),
                             event_record(3, 2), event_record(4, 2)], 0)
    store.apply_answers([ReceiveAnswer(e.event_id, ReceiveOutcome.RECEIVED, result="APPLIED")
                         for e in recorded.sendable])
    reread = store.record([event_record(3, 2), event_record(4, 2)], 0)
    assert reread.sendable == []  # read again while blocked: key 2 still waits

    done = store.expire_blocked(TOPIC, 0, 1, actor="user:ana", reason="bad capture, re-keyed")

    assert (done.record.offset, done.record.reason) == (1, "MALFORMED_JSON")
    assert (done.released, done.still_held_at) == (2, None)
    assert store.blocked_reasons() == {}
    watermark = store.watermark(KEY)
    assert watermark is not None and watermark.terminal_offset == 2  # up to the released ones
    (action,) = store.operator_actions()
    assert (action["action"], action["offset"], action["blocked_reason"], action["released"],
            action["actor"], action["reason"]) == (
        "EXPIRE_BLOCKED", 1, "MALFORMED_JSON", 2, "user:ana", "bad capture, re-keyed")
    # After `ship run` restarts at terminal + 1 the released records are sent, without a
    # source sequence (theirs went to later records); new records continue the sequence.
    restart = store.start_partition(KEY, 0)
    assert restart is not None and restart.commit_offset == 3
    again = store.record([event_record(3, 2), event_record(4, 2), event_record(5, 4)], 0)
    assert [(e.source_position, e.source_sequence) for e in again.sendable] == [
        (3, None), (4, None), (5, 3)]
    rows = store.conn.execute("SELECT kafka_offset, state FROM event_state"
                              " ORDER BY kafka_offset").fetchall()
    assert rows[1] == (1, "EXPIRED_APPROVED")


def test_only_a_holding_block_is_expired_and_a_later_one_keeps_holding(
        store: SQLiteShipState) -> None:
    store.record([block_record(0, key=2), event_record(1, 2), block_record(2, key=2),
                  event_record(3, 2)], 0)
    with pytest.raises(DispositionRefused) as waits:
        store.expire_blocked(TOPIC, 0, 1, actor="user:ana", reason="r")
    assert waits.value.code == "WAITS_BEHIND" and "offset 0" in str(waits.value)
    with pytest.raises(DispositionRefused) as unnamed:
        store.expire_blocked(TOPIC, 0, 0, actor=" ", reason="r")
    assert unnamed.value.code == "REASON_REQUIRED"

    done = store.expire_blocked(TOPIC, 0, 0, actor="user:ana", reason="r")

    assert (done.released, done.still_held_at) == (1, 2)
    assert store.blocked_reasons() == {"MALFORMED_JSON": 1, "BEHIND_BLOCKED_RECORD": 1}
    with pytest.raises(DispositionRefused) as gone:
        store.expire_blocked(TOPIC, 0, 0, actor="user:ana", reason="again")
    assert gone.value.code == "NOT_BLOCKED"
    assert len(store.operator_actions()) == 1  # a refusal records nothing


def test_a_two_way_rules_record_never_expires_and_an_unproven_origin_is_confirmed(
        store: SQLiteShipState) -> None:
    sent = store.record([event_record(0, 5)], 0).sendable
    store.apply_answers([ReceiveAnswer(sent[0].event_id, ReceiveOutcome.PERMANENT_REJECTED,
                                       "INTEGRITY_MISMATCH", "digest differs")])
    two_way = frozenset({"table:fleet.items"})
    with pytest.raises(DispositionRefused) as refused:
        store.expire_blocked(TOPIC, 0, 0, actor="user:ana", reason="r", two_way_rules=two_way)
    assert refused.value.code == "TWO_WAY_RULE"
    with pytest.raises(DispositionRefused) as not_unproven:
        store.confirm_origin(TOPIC, 0, 0, actor="user:ana", reason="r")
    assert not_unproven.value.code == "NOT_ORIGIN_UNPROVEN"
    assert store.expire_blocked(TOPIC, 0, 0, actor="user:ana", reason="one-way after all"
                                ).record.rule_id == "table:fleet.items"

    unproven = consumed(1, Normalized(event(1, 6)), 6)
    store.record([dataclasses.replace(unproven, platform_id=uuid.uuid4().bytes),
                  event_record(2, 6)], 0)
    with pytest.raises(DispositionRefused) as use_confirm:
        store.expire_blocked(TOPIC, 0, 1, actor="user:ana", reason="r")
    assert use_confirm.value.code == "USE_CONFIRM_ORIGIN"

    done = store.confirm_origin(TOPIC, 0, 1, actor="user:ana", reason="state file restored")

    assert done.released == 1 and store.blocked_reasons() == {}
    row = store.conn.execute("SELECT state, result, reason FROM event_state"
                             " WHERE kafka_offset = 1").fetchone()
    assert row == ("TERMINAL", "PLATFORM_WRITE", "OPERATOR_CONFIRMED")
    assert [a["action"] for a in store.operator_actions()] == ["CONFIRM_ORIGIN",
                                                               "EXPIRE_BLOCKED"]


def test_a_new_replay_epoch_starts_the_partition_again(store: SQLiteShipState) -> None:
    store.record([event_record(0, 1), event_record(1, 2)], 0)
    assert store.start_partition(KEY, 0) is not None
    assert store.start_partition(KEY, 1) is None
    recorded = store.record([event_record(0, 1, epoch=1)], 1)
    assert [e.source_sequence for e in recorded.sendable] == [1]


def test_sending_marks_never_leave_a_final_state(store: SQLiteShipState) -> None:
    ids = [e.event_id for e in store.record([event_record(0, 1), event_record(1, 2)], 0).sendable]
    store.apply_answers([ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="APPLIED")])
    store.mark(ids, EventState.RETRY_WAIT)
    assert store.state_counts() == {"TERMINAL": 1, "RETRY_WAIT": 1}


# ----------------------------------------------------------------------------- the property

KINDS = st.sampled_from(["event", "event", "event", "skip", "block"])


def model_offset(kinds: list[str], done: set[int], read: int) -> int:
    """The last offset X <= read with every record up to X complete (-1 for none)."""
    offset = -1
    for position in range(read + 1):
        if kinds[position] == "skip" or position in done:
            offset = position
        else:
            break
    return offset


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(KINDS, min_size=1, max_size=25), data=st.data())
def test_watermarks_are_contiguous_over_any_completion_order(kinds: list[str],
                                                             data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as directory:
        state = SQLiteShipState(Path(directory) / "s.sqlite", NODE, "g", durable=False)
        try:
            _check_completion_order(state, kinds, data)
        finally:
            state.close()


def _check_completion_order(state: SQLiteShipState, kinds: list[str],
                            data: st.DataObject) -> None:
    # Records arrive in polls of arbitrary size; events complete in an arbitrary order.
    records = [event_record(o, o) if kind == "event" else
               skip_record(o) if kind == "skip" else block_record(o) for o, kind in
               enumerate(kinds)]
    cuts = sorted(data.draw(st.sets(st.integers(1, len(records)), max_size=4)) | {len(records)})
    events: dict[int, uuid.UUID] = {}
    start = 0
    for cut in cuts:
        for e in state.record(records[start:cut], 0).sendable:
            events[e.source_position] = e.event_id
        start = cut
    order = data.draw(st.permutations(sorted(events)))
    received: set[int] = set()
    terminal: set[int] = set()
    for offset in order:
        if data.draw(st.booleans()):
            state.apply_answers([ReceiveAnswer(events[offset], ReceiveOutcome.RECEIVED)])
            received.add(offset)
        else:
            state.apply_receipts([TerminalResult(events[offset], "APPLIED")], "c")
            terminal.add(offset)
        watermark = state.watermark(KEY)
        assert watermark is not None
        read = len(kinds) - 1
        assert watermark.terminal_offset == model_offset(kinds, terminal, read)
        assert watermark.received_offset == model_offset(kinds, terminal | received, read)
        assert watermark.commit_offset == watermark.terminal_offset + 1
    assert [e for e in sorted(events)] == sorted(events)
