"""What the ship state store keeps of events on their way, and of answers applied in bulk: in
flight lives in memory only, so a restart sends those events again under their sequences; a
state file written before 0008 (IN_FLIGHT rows, two open indexes) reads the same afterwards."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from pathlib import Path

from tests.unit.test_ship_state import KEY, NODE, TOPIC, event, event_record
from tidesync.ship.state import (
    EventState,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteShipState,
    TerminalResult,
    capture_id,
    ship_migrations,
)


def stored_states(state: SQLiteShipState) -> list[tuple[int, str]]:
    return state.conn.execute(
        "SELECT kafka_offset, state FROM event_state ORDER BY kafka_offset").fetchall()


def test_events_in_flight_are_sent_again_with_their_sequences_after_a_crash(
        tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    state = SQLiteShipState(path, NODE, "group-1")
    sent = state.record([event_record(offset, offset + 1) for offset in range(3)], 0).sendable
    state.mark([e.event_id for e in sent], EventState.IN_FLIGHT)

    assert state.state_counts() == {"IN_FLIGHT": 3}
    assert stored_states(state) == [(0, "READY"), (1, "READY"), (2, "READY")]

    # The process dies without closing; the next one reads the partition from its checkpoint.
    again = SQLiteShipState(path, NODE, "group-1")
    watermark = again.start_partition(KEY, 0)
    assert watermark is not None and watermark.commit_offset == 0
    resent = again.record([event_record(offset, offset + 1) for offset in range(3)], 0)
    assert [(e.event_id, e.source_sequence) for e in resent.sendable] == [
        (e.event_id, e.source_sequence) for e in sent]
    assert resent.new_events == 0 and again.state_counts() == {"READY": 3}
    again.close()
    state.close()


def test_an_answer_ends_the_flight_and_a_failed_upload_is_stored(tmp_path: Path) -> None:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    ids = [e.event_id for e in state.record([event_record(0, 1), event_record(1, 2)],
                                            0).sendable]
    state.mark(ids, EventState.IN_FLIGHT)
    state.apply_answers([ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="APPLIED")])
    assert state.state_counts() == {"TERMINAL": 1, "IN_FLIGHT": 1}

    state.mark([ids[1]], EventState.RETRY_WAIT)
    assert state.state_counts() == {"TERMINAL": 1, "RETRY_WAIT": 1}
    assert stored_states(state) == [(0, "TERMINAL"), (1, "RETRY_WAIT")]
    state.close()


def test_one_call_applies_every_kind_of_answer(tmp_path: Path) -> None:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    ids = [e.event_id for e in state.record(
        [event_record(offset, offset + 1) for offset in range(5)], 0).sendable]
    state.mark(ids, EventState.IN_FLIGHT)

    progress = state.apply_answers([
        ReceiveAnswer(ids[0], ReceiveOutcome.RECEIVED, result="APPLIED"),
        ReceiveAnswer(ids[1], ReceiveOutcome.RECEIVED),
        ReceiveAnswer(ids[2], ReceiveOutcome.RECEIVED, result="CONFLICT_RECORDED"),
        ReceiveAnswer(ids[3], ReceiveOutcome.RETRYABLE_FAILURE, reason="SHORE_BUSY"),
        ReceiveAnswer(ids[4], ReceiveOutcome.PERMANENT_REJECTED, reason="TOO_OLD", detail="d"),
    ])

    assert (progress.terminal, progress.received, progress.retry, progress.blocked) == (
        {ids[0], ids[2]}, {ids[1]}, {ids[3]}, {ids[4]})
    assert stored_states(state) == [(0, "TERMINAL"), (1, "RECEIVED"), (2, "TERMINAL"),
                                    (3, "RETRY_WAIT"), (4, "BLOCKED")]
    watermark = state.watermark(KEY)
    assert watermark is not None
    assert (watermark.terminal_offset, watermark.received_offset) == (0, 2)
    assert state.blocked_reasons() == {"TOO_OLD": 1}
    state.close()


def test_of_two_receipts_of_an_event_in_one_page_the_later_is_its_verdict(
        tmp_path: Path) -> None:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    ids = [e.event_id for e in state.record([event_record(0, 1), event_record(1, 2)],
                                            0).sendable]
    state.apply_answers([ReceiveAnswer(i, ReceiveOutcome.RECEIVED) for i in ids])

    progress = state.apply_receipts([TerminalResult(ids[0], "APPLIED"),
                                     TerminalResult(ids[1], "APPLIED"),
                                     TerminalResult(ids[0], "REJECTED", "SKIPPED_BY_OPERATOR")],
                                    "c-1")

    assert progress.terminal == set(ids) and progress.reverdicted == {ids[0]}
    assert state.conn.execute("SELECT result, reason FROM event_state ORDER BY kafka_offset"
                              ).fetchall() == [("REJECTED", "SKIPPED_BY_OPERATOR"),
                                               ("APPLIED", None)]
    assert state.receipts.shore_rejections() == 1
    assert state.cursor() == "c-1"
    state.close()


def write_state_file_before_0008(path: Path) -> None:
    """A state file as a client before 0008 left it after a crash: offsets 0 and 3 terminal,
    1 received (awaiting its receipt), 2 stored IN_FLIGHT."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                 " applied_at TEXT NOT NULL)")
    for migration in ship_migrations():
        if migration.version > 7:
            break
        conn.executescript(migration.sql)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                     (migration.version, migration.name, "then"))
    states = ["TERMINAL", "RECEIVED", "IN_FLIGHT", "TERMINAL"]
    conn.executemany(
        "INSERT INTO event_state (event_id, direction, topic, kafka_partition, kafka_offset,"
        " replay_epoch, state, source_sequence, bytes, updated_at)"
        " VALUES (?, 'UPLINK', ?, 0, ?, 0, ?, ?, 100, 'then')",
        [(event(offset, offset + 1).event_id.bytes, TOPIC, offset, state, offset + 1)
         for offset, state in enumerate(states)])
    conn.execute(
        "INSERT INTO partition_watermark (direction, consumer_group, topic, kafka_partition,"
        " replay_epoch, base_offset, read_offset, received_offset, terminal_offset,"
        " next_source_sequence, updated_at) VALUES ('UPLINK', 'group-1', ?, 0, 0, -1, 3, 1, 0,"
        " 5, 'then')", (TOPIC,))
    conn.commit()
    conn.close()


def test_a_state_file_before_0008_keeps_its_watermarks_and_resends_what_was_in_flight(
        tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    write_state_file_before_0008(path)

    state = SQLiteShipState(path, NODE, "group-1")
    indexes = {row[1] for row in state.conn.execute("PRAGMA index_list(event_state)")}
    assert "event_state_unreceived" not in indexes and "event_state_open" in indexes
    assert stored_states(state) == [(0, "TERMINAL"), (1, "RECEIVED"), (2, "READY"),
                                    (3, "TERMINAL")]
    with state.transaction() as conn:
        state.partition_watermarks.recompute(conn, KEY)
    watermark = state.watermark(KEY)
    assert watermark is not None
    assert (watermark.terminal_offset, watermark.received_offset, watermark.commit_offset) == (
        0, 1, 1)

    # Read again from the checkpoint: the received one awaits its receipt, the one that was
    # in flight goes again with its sequence, the terminal one is done.
    assert state.start_partition(KEY, 0) is not None
    reread = state.record([event_record(offset, offset + 1) for offset in (1, 2, 3)], 0)
    assert [(e.source_position, e.source_sequence) for e in reread.sendable] == [(2, 3)]
    assert reread.awaiting_receipt == 1 and reread.new_events == 0
    state.close()


def test_capture_ids_stay_those_older_clients_stored() -> None:
    """A record the capture emits again after an upgrade is still recognised: the capture id
    is the digest older clients stored for the same coordinates."""
    for offset, details in enumerate([
            {"server_id": 101, "binlog_file": "mysql-bin.000001", "binlog_position": 1000,
             "binlog_row": 0},
            {"gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:23", "server_id": 7,
             "binlog_file": "mysql-bin.000009", "binlog_position": 4, "binlog_row": 2,
             "snapshot": "last"}]):
        changed = dataclasses.replace(event(offset, 5), source_details=details)
        for record_key in (b"key-5", None):
            fields = ("gtid", "server_id", "binlog_file", "binlog_position", "binlog_row",
                      "snapshot")
            parts = [repr(details.get(name)) for name in fields]
            parts += [repr("fleet"), repr("items"), repr(record_key), "INSERT", "0"]
            stored = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:16]
            assert capture_id(changed, record_key) == stored
