"""The shore's answers in the ship state store: send marks, receive answers and receipts (§7.6).

Each answer moves an event's state, never out of a final one; the partitions' watermarks are
recomputed in the same transaction, and a receipts page's cursor is stored with its results.
"""

from __future__ import annotations

import enum
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.ship_intake import DONE, EventState
from tidesync.ship.state.database import ShipStateDatabase
from tidesync.ship.state.watermarks import BlockedKeys, SQLiteWatermarks

RECEIPTS_CURSOR = "receipts"


class ReceiveOutcome(enum.StrEnum):
    RECEIVED = "RECEIVED"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_REJECTED = "PERMANENT_REJECTED"


@dataclass(frozen=True, slots=True)
class ReceiveAnswer:
    """The shore's answer for one uploaded event (`result` set when it is already terminal)."""

    event_id: uuid.UUID
    outcome: ReceiveOutcome
    reason: str = ""
    detail: str = ""
    result: str | None = None


@dataclass(frozen=True, slots=True)
class TerminalResult:
    """A terminal event result from a receipt."""

    event_id: uuid.UUID
    result: str
    reason: str = ""


@dataclass
class Progress:
    """Events whose state moved: which left the send window and how many bytes became final."""

    terminal: set[uuid.UUID] = field(default_factory=set)
    received: set[uuid.UUID] = field(default_factory=set)
    retry: set[uuid.UUID] = field(default_factory=set)
    blocked: set[uuid.UUID] = field(default_factory=set)
    terminal_bytes: int = 0
    unknown: int = 0


@dataclass(frozen=True, slots=True)
class _EventRow:
    """What an answer needs of an event's row."""

    key: PartitionKey
    state: str
    size: int
    key_digest: bytes | None


class SQLiteReceipts:
    """Event states moved by sending and by the shore's answers."""

    def __init__(self, database: ShipStateDatabase, watermarks: SQLiteWatermarks,
                 blocked_keys: BlockedKeys) -> None:
        self.database = database
        self.watermarks = watermarks
        self.blocked_keys = blocked_keys

    def mark(self, event_ids: Iterable[uuid.UUID], state: EventState) -> None:
        """Move sendable events to IN_FLIGHT, READY or RETRY_WAIT (never out of a final one)."""
        with self.database.transaction() as conn:
            conn.executemany(
                "UPDATE event_state SET state = ?, updated_at = ? WHERE event_id = ?"
                " AND state IN ('CONSUMED', 'READY', 'IN_FLIGHT', 'RETRY_WAIT')",
                [(state.value, self.database.now_text(), event_id.bytes)
                 for event_id in event_ids])

    def apply_answers(self, answers: Sequence[ReceiveAnswer]) -> Progress:
        """Record the shore's per-event receive answers and advance the watermarks."""
        progress = Progress()
        now = self.database.now_text()
        with self.database.transaction() as conn:
            rows = self._rows_by_id(conn, [a.event_id for a in answers])
            for answer in answers:
                row = rows.get(answer.event_id.bytes)
                if row is None or row.state in DONE:
                    progress.unknown += row is None
                    continue
                self._apply_answer(conn, answer, row, progress, now)
            self.watermarks.recompute_all(conn, (row.key for row in rows.values()))
        return progress

    def _apply_answer(self, conn: sqlite3.Connection, answer: ReceiveAnswer, row: _EventRow,
                      progress: Progress, now: str) -> None:
        event_id = answer.event_id
        if answer.outcome is ReceiveOutcome.RECEIVED and answer.result:
            conn.execute("UPDATE event_state SET state = 'TERMINAL', result = ?, reason = ?,"
                         " updated_at = ? WHERE event_id = ?",
                         (answer.result, answer.reason or None, now, event_id.bytes))
            progress.terminal.add(event_id)
            progress.terminal_bytes += row.size
        elif answer.outcome is ReceiveOutcome.RECEIVED:
            conn.execute("UPDATE event_state SET state = 'RECEIVED', updated_at = ?"
                         " WHERE event_id = ? AND state != 'RECEIVED'", (now, event_id.bytes))
            progress.received.add(event_id)
        elif answer.outcome is ReceiveOutcome.RETRYABLE_FAILURE:
            conn.execute("UPDATE event_state SET state = 'RETRY_WAIT', reason = ?,"
                         " attempts = attempts + 1, updated_at = ? WHERE event_id = ?",
                         (answer.reason or None, now, event_id.bytes))
            progress.retry.add(event_id)
        else:
            conn.execute("UPDATE event_state SET state = 'BLOCKED', reason = ?, detail = ?,"
                         " updated_at = ? WHERE event_id = ?",
                         (answer.reason or "PERMANENT_REJECTED", answer.detail[:500], now,
                          event_id.bytes))
            if row.key_digest is not None:
                self.blocked_keys.add(row.key, row.key_digest)
            progress.blocked.add(event_id)

    def apply_receipts(self, results: Sequence[TerminalResult], cursor: str) -> Progress:
        """Record terminal results from a receipts page and its cursor in one transaction."""
        progress = Progress()
        now = self.database.now_text()
        with self.database.transaction() as conn:
            rows = self._rows_by_id(conn, [r.event_id for r in results])
            for result in results:
                row = rows.get(result.event_id.bytes)
                if row is None or row.state in DONE:
                    progress.unknown += row is None
                    continue
                conn.execute("UPDATE event_state SET state = 'TERMINAL', result = ?,"
                             " reason = ?, updated_at = ? WHERE event_id = ?",
                             (result.result, result.reason or None, now, result.event_id.bytes))
                progress.terminal.add(result.event_id)
                progress.terminal_bytes += row.size
            self.watermarks.recompute_all(conn, (row.key for row in rows.values()))
            self.database.set_cursor(conn, RECEIPTS_CURSOR, cursor)
        return progress

    def _rows_by_id(self, conn: sqlite3.Connection,
                    event_ids: Sequence[uuid.UUID]) -> dict[bytes, _EventRow]:
        found: dict[bytes, _EventRow] = {}
        for event_id in event_ids:
            row = conn.execute(
                "SELECT topic, kafka_partition, state, bytes, key_digest FROM event_state"
                " WHERE event_id = ? AND direction = ?",
                (event_id.bytes, self.database.direction.value)).fetchone()
            if row is not None:
                found[event_id.bytes] = _EventRow(PartitionKey(row[0], row[1]), row[2],
                                                  row[3], row[4])
        return found
