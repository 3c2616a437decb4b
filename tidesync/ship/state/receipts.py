"""The shore's answers in the ship state store: send marks, receive answers and receipts (§7.6).

Each answer moves an event's state, never out of a final one; the partitions' watermarks are
recomputed in the same transaction, and a receipts page's cursor is stored with its results.
A later receipt of a terminal event is the shore's new verdict (an operator replayed or skipped
it there): it replaces the result and reason, and the event stays terminal.
"""

from __future__ import annotations

import enum
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.change_event import uuid_of_bytes
from tidesync.domain.ship_intake import DONE, SENDABLE, EventState
from tidesync.ship.state.database import OrderedWrites, ShipStateDatabase, look_up
from tidesync.ship.state.watermarks import BlockedKeys, SQLiteWatermarks
from tidesync.wire.ranges import OffsetRanges

RECEIPTS_CURSOR = "receipts"
SHORE_RESULTS = frozenset({"APPLIED", "CONFLICT_RECORDED", "REJECTED", "EXPIRED_APPROVED"})
"""The results only the shore gives; a later receipt may replace one (never a ship's own)."""
REJECTED = "REJECTED"


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
    reverdicted: set[uuid.UUID] = field(default_factory=set)


class _EventRow(NamedTuple):
    """What an answer needs of an event's row (a tuple: one is read for every answer)."""

    rowid: int
    key: PartitionKey
    state: str
    size: int
    key_digest: bytes | None
    result: str | None = None
    reason: str | None = None


# An answer's row was found by its event id in the same transaction: written by rowid, the
# table's own order, instead of a second search of the event id index.
_TERMINAL = ("UPDATE event_state SET state = 'TERMINAL', result = ?, reason = ?, updated_at = ?"
             " WHERE rowid = ?")
_RECEIVED = ("UPDATE event_state SET state = 'RECEIVED', updated_at = ? WHERE rowid = ?"
             " AND state != 'RECEIVED'")
_RETRY_WAIT = ("UPDATE event_state SET state = 'RETRY_WAIT', reason = ?, attempts = attempts + 1,"
               " updated_at = ? WHERE rowid = ?")
_BLOCKED = ("UPDATE event_state SET state = 'BLOCKED', reason = ?, detail = ?, updated_at = ?"
            " WHERE rowid = ?")
_REVERDICT = ("UPDATE event_state SET result = ?, reason = ?, detail = NULL, updated_at = ?"
              " WHERE rowid = ?")
# The same write as _TERMINAL, for events not yet final, found by their ids.
_TERMINAL_BY_ID = ("UPDATE event_state SET state = 'TERMINAL', result = ?, reason = ?,"
                   " updated_at = ? WHERE direction = ? AND state NOT IN ('TERMINAL',"
                   " 'EXPIRED_APPROVED') AND event_id IN")
_TERMINAL_RETURNING = " RETURNING event_id, topic, kafka_partition, bytes"
# The same write as _RECEIVED, for events not yet final, found by their ids.
_RECEIVED_BY_ID = ("UPDATE event_state SET state = 'RECEIVED', updated_at = ? WHERE direction = ?"
                   " AND state NOT IN ('RECEIVED', 'TERMINAL', 'EXPIRED_APPROVED')"
                   " AND event_id IN")
_RECEIVED_RETURNING = " RETURNING event_id, topic, kafka_partition"
# Receipts naming events APPLIED by queue coordinates: one statement per range, along the
# position index, instead of a look-up and a write per event.
_APPLIED_IN_RANGE = (
    "UPDATE event_state SET state = 'TERMINAL', result = 'APPLIED', reason = NULL, updated_at = ?"
    " WHERE topic = ? AND kafka_partition = ? AND replay_epoch = ? AND direction = ?"
    " AND kafka_offset BETWEEN ? AND ? AND state NOT IN ('TERMINAL', 'EXPIRED_APPROVED')"
    " RETURNING event_id, bytes")
_OTHER_VERDICTS_IN_RANGE = (  # the shore's own results (SHORE_RESULTS) other than APPLIED
    "SELECT rowid, event_id, result FROM event_state"
    " WHERE topic = ? AND kafka_partition = ? AND replay_epoch = ? AND direction = ?"
    " AND kafka_offset BETWEEN ? AND ? AND state = 'TERMINAL'"
    " AND result IN ('APPLIED', 'CONFLICT_RECORDED', 'EXPIRED_APPROVED', 'REJECTED')"
    " AND (result != 'APPLIED' OR reason IS NOT NULL)")
_MARK = ("UPDATE event_state SET state = ?, updated_at = ? WHERE event_id = ?"
         " AND state IN ('CONSUMED', 'READY', 'IN_FLIGHT', 'RETRY_WAIT')")
_ROWS_BY_ID = ("SELECT event_id, topic, kafka_partition, state, bytes, key_digest, result, reason,"
               " rowid FROM event_state WHERE direction = ? AND event_id IN")


class SQLiteReceipts:
    """Event states moved by sending and by the shore's answers.

    IN_FLIGHT is kept in memory only (`in_flight`): on disk an event on its way stays READY
    (or RETRY_WAIT), which a restart treats the same way — send it again, under its event id,
    which the shore deduplicates. Not writing it saves one write per event."""

    def __init__(self, database: ShipStateDatabase, watermarks: SQLiteWatermarks,
                 blocked_keys: BlockedKeys) -> None:
        self.database = database
        self.watermarks = watermarks
        self.blocked_keys = blocked_keys
        self.in_flight: set[uuid.UUID] = set()
        self._rejected: int | None = None  # events the shore holds REJECTED, counted once

    def shore_rejections(self) -> int:
        """How many events the shore's latest verdict holds REJECTED (counted from the file
        once, then kept by the answers and receipts this store records)."""
        if self._rejected is None:
            self._rejected = int(self.database.conn.execute(
                "SELECT count(*) FROM event_state WHERE direction = ? AND state = 'TERMINAL'"
                " AND result = ?", (self.database.direction.value, REJECTED)).fetchone()[0])
        return self._rejected

    def _count_verdict(self, before: str | None, after: str) -> None:
        if self._rejected is not None:
            self._rejected += (after == REJECTED) - (before == REJECTED)

    def mark(self, event_ids: Iterable[uuid.UUID], state: EventState) -> None:
        """Move sendable events to IN_FLIGHT (in memory), READY or RETRY_WAIT (never out of a
        final one)."""
        if state is EventState.IN_FLIGHT:
            self.in_flight.update(event_ids)
            return
        ids = list(event_ids)
        self.in_flight.difference_update(ids)
        now = self.database.now_text()
        with self.database.transaction() as conn:
            conn.executemany(_MARK, [(state.value, now, event_id.bytes) for event_id in ids])

    def with_in_flight(self, counts: dict[str, int]) -> dict[str, int]:
        """`counts` (events per stored state) with the events in flight counted as
        IN_FLIGHT instead of the sendable state they are stored in."""
        if not self.in_flight:
            return counts
        rows = look_up(self.database.conn, "SELECT state FROM event_state WHERE direction = ?"
                       " AND event_id IN", (event_id.bytes for event_id in self.in_flight),
                       (self.database.direction.value,))
        moved = dict(counts)
        for (state,) in rows:
            if state in SENDABLE and state != EventState.IN_FLIGHT:
                moved[state] -= 1
                moved[EventState.IN_FLIGHT.value] = moved.get(EventState.IN_FLIGHT.value, 0) + 1
        return {state: count for state, count in moved.items() if count}

    def apply_answers(self, answers: Sequence[ReceiveAnswer]) -> Progress:
        """Record the shore's per-event receive answers and advance the watermarks."""
        progress = Progress()
        now = self.database.now_text()
        writes = OrderedWrites()
        self.in_flight.difference_update(answer.event_id for answer in answers)
        with self.database.transaction() as conn:
            moved, answers = self._terminal_in_place(conn, answers, progress, now)
            received, answers = self._received_in_place(conn, answers, progress, now)
            moved |= received
            rows = self._rows_by_id(conn, [a.event_id for a in answers])
            for answer in answers:
                row = rows.get(answer.event_id.bytes)
                if row is None or row.state in DONE:
                    progress.unknown += row is None
                    continue
                self._apply_answer(writes, answer, row, progress, now)
            writes.run(conn)
            self.watermarks.recompute_all(conn, [*moved, *(row.key for row in rows.values())])
        return progress

    def _terminal_in_place(self, conn: sqlite3.Connection, answers: Sequence[ReceiveAnswer],
                           progress: Progress, now: str
                           ) -> tuple[set[PartitionKey], Sequence[ReceiveAnswer]]:
        """Make the answers that are already terminal (the usual answer to an upload) terminal
        with one UPDATE per verdict and chunk of ids instead of a read and a write per event;
        returns the partitions moved and the other answers. Only where each event is answered
        once: a second answer of one event would see the first one's write."""
        verdicts: dict[tuple[str, str | None], list[bytes]] = {}
        rest: list[ReceiveAnswer] = []
        event_ids: dict[bytes, uuid.UUID] = {}
        for answer in answers:
            event_ids[answer.event_id.bytes] = answer.event_id
            if answer.outcome is ReceiveOutcome.RECEIVED and answer.result:
                verdicts.setdefault((answer.result, answer.reason or None), []).append(
                    answer.event_id.bytes)
            else:
                rest.append(answer)
        if not verdicts or len(event_ids) != len(answers):
            return set(), answers
        places: set[tuple[str, int]] = set()
        for (result, reason), ids in verdicts.items():
            rows = look_up(conn, _TERMINAL_BY_ID, ids, (result, reason, now,
                                                        self.database.direction.value),
                           _TERMINAL_RETURNING)
            for event_id, topic, partition, size in rows:
                places.add((topic, partition))
                progress.terminal.add(event_ids[event_id])
                progress.terminal_bytes += size
                self._count_verdict(None, result)
            if len(rows) < len(ids):
                progress.unknown += self._unknown(conn, set(ids) - {row[0] for row in rows})
        return {PartitionKey(*place) for place in places}, rest

    def _received_in_place(self, conn: sqlite3.Connection, answers: Sequence[ReceiveAnswer],
                           progress: Progress, now: str
                           ) -> tuple[set[PartitionKey], Sequence[ReceiveAnswer]]:
        """Make the plain RECEIVED answers (an upload's usual answer, named by offset ranges)
        RECEIVED with one UPDATE per chunk of ids, as `_terminal_in_place` does for terminal
        ones; returns the partitions moved and the other answers."""
        plain: list[ReceiveAnswer] = []
        rest: list[ReceiveAnswer] = []
        for answer in answers:
            is_plain = answer.outcome is ReceiveOutcome.RECEIVED and not answer.result
            (plain if is_plain else rest).append(answer)
        if not plain or len({answer.event_id for answer in answers}) != len(answers):
            return set(), answers
        event_ids = {answer.event_id.bytes: answer.event_id for answer in plain}
        rows = look_up(conn, _RECEIVED_BY_ID, event_ids, (now, self.database.direction.value),
                       _RECEIVED_RETURNING)
        moved = {PartitionKey(*place) for place in {(row[1], row[2]) for row in rows}}
        progress.received.update(event_ids[row[0]] for row in rows)
        if len(rows) < len(event_ids):  # received or final already, or not ours
            found = look_up(conn, "SELECT event_id, state FROM event_state WHERE direction = ?"
                            " AND event_id IN", set(event_ids) - {row[0] for row in rows},
                            (self.database.direction.value,))
            progress.received.update(event_ids[event_id] for event_id, state in found
                                     if state == EventState.RECEIVED)
            progress.unknown += len(event_ids) - len(rows) - len(found)
        return moved, rest

    def _unknown(self, conn: sqlite3.Connection, event_ids: set[bytes]) -> int:
        """How many of these events this direction holds no row of."""
        found = look_up(conn, "SELECT event_id FROM event_state WHERE direction = ?"
                        " AND event_id IN", event_ids, (self.database.direction.value,))
        return len(event_ids) - len(found)

    def _apply_answer(self, writes: OrderedWrites, answer: ReceiveAnswer, row: _EventRow,
                      progress: Progress, now: str) -> None:
        event_id = answer.event_id
        if answer.outcome is ReceiveOutcome.RECEIVED and answer.result:
            writes.add(_TERMINAL, (answer.result, answer.reason or None, now, row.rowid))
            progress.terminal.add(event_id)
            progress.terminal_bytes += row.size
            self._count_verdict(None, answer.result)
        elif answer.outcome is ReceiveOutcome.RECEIVED:
            writes.add(_RECEIVED, (now, row.rowid))
            progress.received.add(event_id)
        elif answer.outcome is ReceiveOutcome.RETRYABLE_FAILURE:
            writes.add(_RETRY_WAIT, (answer.reason or None, now, row.rowid))
            progress.retry.add(event_id)
        else:
            writes.add(_BLOCKED, (answer.reason or "PERMANENT_REJECTED", answer.detail[:500],
                                  now, row.rowid))
            if row.key_digest is not None:
                self.blocked_keys.add(row.key, row.key_digest)
            progress.blocked.add(event_id)

    def apply_receipts(self, results: Sequence[TerminalResult], cursor: str,
                       applied: OffsetRanges | None = None) -> Progress:
        """Record terminal results from a receipts page and its cursor in one transaction;
        `applied` names further events APPLIED by their queue coordinates.

        Pages come in the shore's order, so of two receipts of one event the later one is its
        current verdict: a terminal event takes its result and reason and stays terminal (a
        page with ranges never holds two receipts of one event; the ranges count as after the
        page's other results)."""
        progress = Progress()
        now = self.database.now_text()
        writes = OrderedWrites()
        with self.database.transaction() as conn:
            rows = self._rows_by_id(conn, [r.event_id for r in results])
            for result in results:
                row = rows.get(result.event_id.bytes)
                if row is None:
                    progress.unknown += 1
                elif row.state == EventState.TERMINAL:
                    rows[result.event_id.bytes] = self._reverdict(writes, result, row, progress,
                                                                  now)
                elif row.state not in DONE:
                    rows[result.event_id.bytes] = self._terminal(writes, result, row, progress,
                                                                 now)
            writes.run(conn)
            moved = {row.key for row in rows.values()}
            if applied is not None:
                moved |= self._applied_in_ranges(conn, applied, progress, now)
            self.watermarks.recompute_all(conn, moved)
            self.database.set_cursor(conn, RECEIPTS_CURSOR, cursor)
        self.in_flight.difference_update(progress.terminal)
        return progress

    def _applied_in_ranges(self, conn: sqlite3.Connection, ranges: OffsetRanges,
                           progress: Progress, now: str) -> set[PartitionKey]:
        """Make this direction's events at the coordinates `ranges` names APPLIED: terminal
        when they were not final, the shore's new verdict when it had given another one; returns
        the partitions where events became terminal."""
        direction = self.database.direction.value
        moved: set[PartitionKey] = set()
        for stream, spans in ranges.streams.items():
            where = (stream.topic, stream.partition, stream.replay_epoch, direction)
            for first, last in spans:
                made = conn.execute(_APPLIED_IN_RANGE, (now, *where, first, last)).fetchall()
                # Not REJECTED before or after: the count of rejections stays as it is.
                progress.terminal.update(uuid_of_bytes(row[0]) for row in made)
                progress.terminal_bytes += sum(row[1] for row in made)
                if made:
                    moved.add(PartitionKey(stream.topic, stream.partition))
                if len(made) < last - first + 1:  # some were final already: new verdicts?
                    self._reverdict_applied(conn, where, first, last, progress, now)
        return moved

    def _reverdict_applied(self, conn: sqlite3.Connection, where: tuple[object, ...],
                           first: int, last: int, progress: Progress, now: str) -> None:
        rows = conn.execute(_OTHER_VERDICTS_IN_RANGE, (*where, first, last)).fetchall()
        conn.executemany(_REVERDICT, [("APPLIED", None, now, row[0]) for row in rows])
        for _, event_id, before in rows:
            progress.reverdicted.add(uuid.UUID(bytes=event_id))
            self._count_verdict(before, "APPLIED")

    def _terminal(self, writes: OrderedWrites, result: TerminalResult, row: _EventRow,
                  progress: Progress, now: str) -> _EventRow:
        writes.add(_TERMINAL, (result.result, result.reason or None, now, row.rowid))
        progress.terminal.add(result.event_id)
        progress.terminal_bytes += row.size
        self._count_verdict(None, result.result)
        return row._replace(state=EventState.TERMINAL.value, result=result.result,
                            reason=result.reason or None)

    def _reverdict(self, writes: OrderedWrites, result: TerminalResult, row: _EventRow,
                   progress: Progress, now: str) -> _EventRow:
        """The shore's newer verdict of an event already terminal here (replayed, skipped)."""
        reason = result.reason or None
        if (row.result not in SHORE_RESULTS or result.result not in SHORE_RESULTS
                or (row.result, row.reason) == (result.result, reason)):
            return row
        writes.add(_REVERDICT, (result.result, reason, now, row.rowid))
        progress.reverdicted.add(result.event_id)
        self._count_verdict(row.result, result.result)
        return row._replace(result=result.result, reason=reason)

    def _rows_by_id(self, conn: sqlite3.Connection,
                    event_ids: Sequence[uuid.UUID]) -> dict[bytes, _EventRow]:
        rows = look_up(conn, _ROWS_BY_ID, (event_id.bytes for event_id in event_ids),
                       (self.database.direction.value,))
        keys: dict[tuple[str, int], PartitionKey] = {}  # one per partition, not per row
        found: dict[bytes, _EventRow] = {}
        for row in rows:
            key = keys.get(row[1:3])
            if key is None:
                key = keys[row[1:3]] = PartitionKey(row[1], row[2])
            found[row[0]] = _EventRow(row[8], key, *row[3:8])
        return found
