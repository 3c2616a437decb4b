"""Shore commands in the ship state store (§12): applied ids, results, acks awaiting acceptance.

An id is recorded APPLYING before the business database is written (a captured platform write
with it is provably ours from then on), DONE with its result and ack afterwards. The commands
cursor moves past a page only once every ack of it was accepted.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from tidesync.domain.downlink_command import CommandKind, CommandResult
from tidesync.ship.state.database import ShipStateDatabase

COMMANDS_CURSOR = "commands"
COMMANDS_PAGE_END = "commands_page_end"


class CommandState(enum.StrEnum):
    APPLYING = "APPLYING"
    DONE = "DONE"


@dataclass(frozen=True, slots=True)
class AppliedCommand:
    """An applied_command row: the id a command wrote, its kind, how far it got, its result."""

    applied_id: bytes
    command_id: bytes
    sequence: int
    kind: CommandKind
    state: CommandState
    result: CommandResult | None
    reason: str | None


class SQLiteCommands:
    """applied_command, pending_command_ack and command_result_count, and the commands cursor."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database

    def command_progress(self, applied_id: bytes | None,
                         command_id: bytes) -> tuple[str | None, bool]:
        """(applied_command state or None, whether an ack of the command awaits acceptance)."""
        conn = self.database.conn
        state = None
        if applied_id:
            row = conn.execute("SELECT state FROM applied_command WHERE applied_id = ?",
                               (applied_id,)).fetchone()
            state = None if row is None else str(row[0])
        pending = conn.execute("SELECT 1 FROM pending_command_ack WHERE command_id = ?",
                               (command_id,)).fetchone() is not None
        return state, pending

    def begin_command(self, applied_id: bytes, command_id: bytes, sequence: int,
                      kind: CommandKind) -> None:
        """Record (durably, before the business database is written) that this id is about
        to be applied: from now on a captured platform write with it is proven ours."""
        now = self.database.now_text()
        with self.database.transaction() as conn:
            conn.execute(
                "INSERT INTO applied_command (applied_id, command_id, sequence, kind, state,"
                " recorded_at, updated_at) VALUES (?, ?, ?, ?, 'APPLYING', ?, ?)"
                " ON CONFLICT (applied_id) DO NOTHING",
                (applied_id, command_id, sequence, kind.value, now, now))

    def finish_command(self, applied_id: bytes | None, command_id: bytes, sequence: int,
                       result: CommandResult, reason: str, local_revision: bytes,
                       ack: bytes) -> None:
        """The command's result (applied_command DONE) and its ack to send, in one transaction."""
        now = self.database.now_text()
        with self.database.transaction() as conn:
            if applied_id:
                conn.execute(
                    "UPDATE applied_command SET state = 'DONE', result = ?, reason = ?,"
                    " local_revision = ?, updated_at = ? WHERE applied_id = ?",
                    (result.value, reason or None, local_revision or None, now, applied_id))
            conn.execute(
                "INSERT INTO pending_command_ack (command_id, sequence, result, ack, recorded_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (command_id) DO UPDATE SET"
                " result = excluded.result, ack = excluded.ack",
                (command_id, sequence, result.value, ack, now))
            conn.execute(
                "INSERT INTO command_result_count (result, total) VALUES (?, 1)"
                " ON CONFLICT (result) DO UPDATE SET total = total + 1", (result.value,))

    def pending_acks(self, limit: int) -> list[tuple[bytes, bytes]]:
        """(command id, serialized one-ack CommandAcks) of unaccepted acks, in sequence order."""
        rows = self.database.conn.execute("SELECT command_id, ack FROM pending_command_ack"
                                          " ORDER BY sequence LIMIT ?", (limit,)).fetchall()
        return [(bytes(row[0]), bytes(row[1])) for row in rows]

    def pending_ack_count(self) -> int:
        return int(self.database.conn.execute(
            "SELECT count(*) FROM pending_command_ack").fetchone()[0])

    def acks_answered(self, answered: Iterable[bytes]) -> None:
        """Forget acks the shore answered (accepted, or rejected as not this node's); when none
        is left, a fully processed page's end becomes the commands cursor."""
        with self.database.transaction() as conn:
            conn.executemany("DELETE FROM pending_command_ack WHERE command_id = ?",
                             [(command_id,) for command_id in answered])
            self._promote_commands_cursor(conn)

    def page_processed(self, next_cursor: str) -> None:
        """Every command of a page has its result: its end is the cursor once acks are in."""
        with self.database.transaction() as conn:
            self.database.set_cursor(conn, COMMANDS_PAGE_END, next_cursor)
            self._promote_commands_cursor(conn)

    def _promote_commands_cursor(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM pending_command_ack LIMIT 1").fetchone() is not None:
            return
        row = conn.execute("SELECT cursor FROM sync_cursor WHERE name = ?",
                           (COMMANDS_PAGE_END,)).fetchone()
        if row is not None:
            self.database.set_cursor(conn, COMMANDS_CURSOR, str(row[0]))
            conn.execute("DELETE FROM sync_cursor WHERE name = ?", (COMMANDS_PAGE_END,))

    def applied_command(self, applied_id: bytes) -> tuple[str, str | None, str | None] | None:
        """(state, result, reason) of an applied id, or None."""
        row = self.database.conn.execute("SELECT state, result, reason FROM applied_command"
                                         " WHERE applied_id = ?", (applied_id,)).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def applied_command_record(self, applied_id: bytes) -> AppliedCommand | None:
        """The applied_command row of an applied id, or None."""
        row = self.database.conn.execute(
            "SELECT applied_id, command_id, sequence, kind, state, result, reason"
            " FROM applied_command WHERE applied_id = ?", (applied_id,)).fetchone()
        if row is None:
            return None
        return AppliedCommand(bytes(row[0]), bytes(row[1]), int(row[2]), CommandKind(row[3]),
                              CommandState(row[4]),
                              None if row[5] is None else CommandResult(row[5]), row[6])

    def command_counts(self) -> dict[str, int]:
        """Command results recorded, by result (re-applies after a crash count again)."""
        rows = self.database.conn.execute(
            "SELECT result, total FROM command_result_count").fetchall()
        return {str(row[0]): int(row[1]) for row in rows}
