"""Ship state migrations on a real SQLite file: a state file written before 0004 (the ship's own
"DECISION" command kind) reads with the domain's CommandKind and CommandResult afterwards."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from tidesync.domain.downlink_command import CommandKind, CommandResult
from tidesync.ship.state import CommandState, SQLiteShipState, ship_migrations

NODE = "ship-7"
NOW = "2019-11-01T00:00:00+00:00"
DECISION_ID = uuid.UUID(int=1).bytes
ROW_CHANGE_ID = uuid.UUID(int=2).bytes
APPLYING_ID = uuid.UUID(int=3).bytes


def write_old_state_file(path: Path) -> None:
    """A state file as a ship client before 0004 left it: migrations 0001–0003 applied, a
    decision and a row change applied, a decision still APPLYING."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                 " applied_at TEXT NOT NULL)")
    for migration in ship_migrations():
        if migration.version > 3:
            break
        conn.executescript(migration.sql)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                     (migration.version, migration.name, NOW))
    conn.executemany(
        "INSERT INTO applied_command (applied_id, command_id, sequence, kind, state, result,"
        " reason, local_revision, recorded_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(DECISION_ID, b"c1", 1, "DECISION", "DONE", "COMMAND_CONFLICT_REPORTED",
          "DECISION_STALE", b"r1", NOW, NOW),
         (ROW_CHANGE_ID, b"c2", 2, "ROW_CHANGE", "DONE", "COMMAND_APPLIED", None, None, NOW,
          NOW),
         (APPLYING_ID, b"c3", 3, "DECISION", "APPLYING", None, None, None, NOW, NOW)])
    conn.executemany("INSERT INTO command_result_count (result, total) VALUES (?, ?)",
                     [("COMMAND_CONFLICT_REPORTED", 1), ("COMMAND_APPLIED", 1)])
    conn.commit()
    conn.close()


def test_old_command_kinds_read_as_the_domains_after_migration(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    write_old_state_file(path)
    with pytest.raises(ValueError, match="DECISION"):
        CommandKind("DECISION")  # the old value is no domain kind

    state = SQLiteShipState(path, NODE, "group-1")
    try:
        decision = state.applied_command_record(DECISION_ID)
        assert decision is not None
        assert (decision.kind, decision.state, decision.result, decision.reason) == (
            CommandKind.CONFLICT_DECISION, CommandState.DONE,
            CommandResult.COMMAND_CONFLICT_REPORTED, "DECISION_STALE")
        assert (decision.command_id, decision.sequence) == (b"c1", 1)
        row_change = state.applied_command_record(ROW_CHANGE_ID)
        assert row_change is not None
        assert (row_change.kind, row_change.result) == (CommandKind.ROW_CHANGE,
                                                         CommandResult.COMMAND_APPLIED)
        applying = state.applied_command_record(APPLYING_ID)
        assert applying is not None
        assert (applying.kind, applying.state, applying.result) == (
            CommandKind.CONFLICT_DECISION, CommandState.APPLYING, None)
        assert state.applied_command(DECISION_ID) == ("DONE", "COMMAND_CONFLICT_REPORTED",
                                                      "DECISION_STALE")
        assert {CommandResult(name) for name in state.command_counts()} == {
            CommandResult.COMMAND_CONFLICT_REPORTED, CommandResult.COMMAND_APPLIED}
        # The migrated table still finds rows by command and takes the domain's kinds only.
        indexes = {row[1] for row in state.conn.execute("PRAGMA index_list(applied_command)")}
        assert "applied_command_command" in indexes
        state.begin_command(uuid.UUID(int=4).bytes, b"c4", 4, CommandKind.CONFLICT_DECISION)
        with pytest.raises(sqlite3.IntegrityError):
            state.conn.execute(
                "INSERT INTO applied_command (applied_id, command_id, sequence, kind, state,"
                " recorded_at, updated_at) VALUES (?, 'c5', 5, 'DECISION', 'APPLYING', ?, ?)",
                (uuid.UUID(int=5).bytes, NOW, NOW))
    finally:
        state.close()
    again = SQLiteShipState(path, NODE, "group-1")
    try:
        assert again.migrate() == []
        versions = [row[0] for row in again.conn.execute("SELECT version FROM schema_version")]
        assert versions == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    finally:
        again.close()


def test_a_new_state_file_takes_every_domain_kind(tmp_path: Path) -> None:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    try:
        for number, kind in enumerate(CommandKind, 1):
            applied_id = uuid.UUID(int=number).bytes
            state.begin_command(applied_id, b"c%d" % number, number, kind)
            state.finish_command(applied_id, b"c%d" % number, number,
                                 CommandResult.COMMAND_APPLIED, "", b"", b"ack")
            found = state.applied_command_record(applied_id)
            assert found is not None
            assert (found.kind, found.result) == (kind, CommandResult.COMMAND_APPLIED)
        assert state.command_counts() == {"COMMAND_APPLIED": len(CommandKind)}
    finally:
        state.close()
