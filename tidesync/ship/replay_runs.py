"""Replay runs in the ship state store: who asked to read which closed range of a queue
partition again, under which replay epoch, and how far the client got (§7.4, replay epochs).

A run is QUEUED by `tidesync replay`, READING while the client reads its range, READ once every
record of the range was read (its events are then delivered like any others), FAILED when the
queue no longer holds the range. How many of its events the shore has answered, and with what,
is counted from `event_state` rows of its epoch, so the progress shown is the one stored.
"""

from __future__ import annotations

import datetime as dt
import enum
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.actor import user_actor
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.replay import ReplayRange, ReplayRangeError, check_times
from tidesync.ship.state.database import ShipStateDatabase

RANGE_REPLAY_EPOCHS = 1 << 32
"""Replay epochs of range replays count from here, far above any epoch an operator sets in
`[ship] replay_epoch`: a later change of that setting can never reuse a range replay's epoch
(and with it its event ids and state rows)."""
MAX_REASON = 1000
_SELECT_RUNS = (
    "SELECT replay_epoch, original_epoch, topic, kafka_partition, first_offset, last_offset,"
    " since_ms, until_ms, actor, reason, state, detail, read_offset, records_read,"
    " requested_at, started_at, read_at FROM replay_run")
_INSERT_RUN = (
    "INSERT INTO replay_run (replay_epoch, original_epoch, topic, kafka_partition, first_offset,"
    " last_offset, since_ms, until_ms, actor, reason, state, requested_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'QUEUED', ?, ?)")
_RUN_EVENTS = ("FROM event_state WHERE topic = ? AND kafka_partition = ? AND replay_epoch = ?"
               " AND direction = ?")
_UPDATES = {
    "started": "UPDATE replay_run SET state = 'READING', started_at = coalesce(started_at, ?),"
               " updated_at = ? WHERE replay_epoch = ?",
    "read": "UPDATE replay_run SET read_offset = max(read_offset, ?),"
            " records_read = records_read + ?, updated_at = ? WHERE replay_epoch = ?",
    "finished": "UPDATE replay_run SET state = 'READ', read_at = ?, updated_at = ?"
                " WHERE replay_epoch = ?",
    "failed": "UPDATE replay_run SET state = 'FAILED', detail = ?, updated_at = ?"
              " WHERE replay_epoch = ?",
}


class RunState(enum.StrEnum):
    QUEUED = "QUEUED"
    READING = "READING"
    READ = "READ"
    FAILED = "FAILED"


class ReplayRefused(TidesyncError):
    """A replay request this ship cannot carry out (unknown partition, open range, no reason)."""

    code = ErrorCode.INVALID_INPUT


@dataclass(frozen=True, slots=True)
class ReplayRun:
    """One stored replay request and where its reading stands."""

    replay_epoch: int
    original_epoch: int
    topic: str
    partition: int
    first: int
    last: int
    since_ms: int | None
    until_ms: int | None
    actor: str
    reason: str
    state: RunState
    detail: str | None = None
    read_offset: int = -1
    records_read: int = 0
    requested_at: str = ""
    started_at: str | None = None
    read_at: str | None = None

    @property
    def key(self) -> PartitionKey:
        return PartitionKey(self.topic, self.partition)

    @property
    def range(self) -> ReplayRange:
        return ReplayRange(self.topic, self.partition, self.first, self.last)

    def wanted(self, offset: int, timestamp_ms: int | None) -> bool:
        """Whether a record at `offset`, written at `timestamp_ms`, belongs to the replay."""
        if not self.first <= offset <= self.last:
            return False
        if timestamp_ms is None:
            return self.since_ms is None and self.until_ms is None
        return ((self.since_ms is None or timestamp_ms >= self.since_ms)
                and (self.until_ms is None or timestamp_ms < self.until_ms))

    @property
    def read_fraction(self) -> float:
        if self.state is RunState.READ:
            return 1.0
        done = max(0, self.read_offset - self.first + 1)
        return min(1.0, done / (self.last - self.first + 1))


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """A run with the state of its events on this ship and the shore's results."""

    run: ReplayRun
    states: dict[str, int] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(self.states.values())

    @property
    def answered(self) -> int:
        return self.states.get("TERMINAL", 0)

    @property
    def done(self) -> bool:
        """Every record read and every event answered by the shore (or stopped here)."""
        open_states = {"CONSUMED", "READY", "IN_FLIGHT", "RECEIVED", "RETRY_WAIT"}
        return self.run.state is RunState.READ and not any(
            self.states.get(state, 0) for state in open_states)

    def as_json(self) -> dict[str, Any]:
        run = self.run
        return {
            "replay_epoch": run.replay_epoch, "replays_epoch": run.original_epoch,
            "topic": run.topic, "partition": run.partition,
            "from_offset": run.first, "to_offset": run.last,
            "since": _time_text(run.since_ms), "until": _time_text(run.until_ms),
            "actor": run.actor, "reason": run.reason, "state": run.state.value,
            "detail": run.detail, "read_offset": run.read_offset,
            "records_read": run.records_read, "read_percent": round(run.read_fraction * 100, 1),
            "events": self.events, "answered": self.answered, "done": self.done,
            "states": dict(sorted(self.states.items())),
            "results": dict(sorted(self.results.items())),
            "requested_at": run.requested_at, "started_at": run.started_at,
            "read_at": run.read_at,
        }


def _time_text(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def _millis(moment: dt.datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


class SQLiteReplayRuns:
    """The replay_run rows of a ship state store."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database

    def request(self, replay_range: ReplayRange, *, actor: str, reason: str,
                since: dt.datetime | None = None, until: dt.datetime | None = None) -> ReplayRun:
        """Queue a replay of `replay_range` under a new epoch, checked against what this ship
        has read and the shore has finished. Raises ReplayRefused or ReplayRangeError."""
        if not reason.strip():
            raise ReplayRefused("a replay needs a reason (it is recorded)")
        actor = user_actor(actor)
        if since is not None or until is not None:
            check_times(since or dt.datetime.min.replace(tzinfo=dt.UTC),
                        until or dt.datetime.max.replace(tzinfo=dt.UTC))
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT replay_epoch, terminal_offset FROM partition_watermark"
                " WHERE direction = ? AND consumer_group = ? AND topic = ?"
                " AND kafka_partition = ?",
                (self.database.direction.value, self.database.consumer_group,
                 replay_range.topic, replay_range.partition)).fetchone()
            if row is None:
                raise ReplayRefused(f"this ship has not read {replay_range.topic}/"
                                    f"{replay_range.partition}: nothing to replay")
            original_epoch, terminal = int(row[0]), int(row[1])
            # The queue's own low offset is checked when the client starts the run.
            replay_range.check_closed(0, terminal)
            epoch = self._next_epoch(conn)
            now = self.database.now_text()
            conn.execute(_INSERT_RUN, (
                epoch, original_epoch, replay_range.topic, replay_range.partition,
                replay_range.first, replay_range.last, _millis(since), _millis(until), actor,
                reason[:MAX_REASON], now, now))
        found = self.run(epoch)
        assert found is not None
        return found

    def _next_epoch(self, conn: sqlite3.Connection) -> int:
        runs = conn.execute("SELECT max(replay_epoch) FROM replay_run").fetchone()[0]
        events = conn.execute("SELECT max(replay_epoch) FROM event_state").fetchone()[0]
        return max(RANGE_REPLAY_EPOCHS, *(int(v) + 1 for v in (runs, events) if v is not None))

    def run(self, replay_epoch: int) -> ReplayRun | None:
        row = self.database.conn.execute(
            _SELECT_RUNS + " WHERE replay_epoch = ?",
            (replay_epoch,)).fetchone()
        return None if row is None else _run(row)

    def runs(self, limit: int = 100) -> list[ReplayRun]:
        rows = self.database.conn.execute(
            _SELECT_RUNS + " ORDER BY replay_epoch DESC LIMIT ?",
            (limit,)).fetchall()
        return [_run(row) for row in rows]

    def next_open(self) -> ReplayRun | None:
        """The oldest run not yet read to its end (runs are read one at a time, in order)."""
        row = self.database.conn.execute(
            _SELECT_RUNS + " WHERE state IN ('QUEUED', 'READING') ORDER BY replay_epoch"
            " LIMIT 1").fetchone()
        return None if row is None else _run(row)

    def started(self, replay_epoch: int) -> None:
        self._update("started", replay_epoch, self.database.now_text())

    def read_up_to(self, replay_epoch: int, offset: int, records: int) -> None:
        self._update("read", replay_epoch, offset, records)

    def finished_reading(self, replay_epoch: int) -> None:
        self._update("finished", replay_epoch, self.database.now_text())

    def failed(self, replay_epoch: int, detail: str) -> None:
        self._update("failed", replay_epoch, detail[:500])

    def reopen_unsent(self) -> int:
        """Read again the runs read to their end whose events are not all sent (the client
        stopped before): their unsent events live only in the queue. Returns how many."""
        with self.database.transaction() as conn:
            return conn.execute(
                "UPDATE replay_run SET state = 'READING', updated_at = ? WHERE state = 'READ'"
                " AND EXISTS (SELECT 1 FROM event_state e WHERE e.direction = ?"
                " AND e.topic = replay_run.topic"
                " AND e.kafka_partition = replay_run.kafka_partition"
                " AND e.replay_epoch = replay_run.replay_epoch"
                " AND e.state IN ('CONSUMED', 'READY', 'IN_FLIGHT', 'RETRY_WAIT'))",
                (self.database.now_text(), self.database.direction.value)).rowcount

    def _update(self, which: str, replay_epoch: int, *values: object) -> None:
        with self.database.transaction() as conn:
            conn.execute(_UPDATES[which], (*values, self.database.now_text(), replay_epoch))

    def progress(self, run: ReplayRun) -> ReplayProgress:
        conn = self.database.conn
        params = (run.topic, run.partition, run.replay_epoch, self.database.direction.value)
        states = {str(state): int(count) for state, count in conn.execute(
            "SELECT state, count(*) " + _RUN_EVENTS + " GROUP BY state", params)}
        results = {str(result): int(count) for result, count in conn.execute(
            "SELECT result, count(*) " + _RUN_EVENTS + " AND state = 'TERMINAL'"
            " GROUP BY result", params)}
        return ReplayProgress(run, states, results)


def _run(row: Sequence[Any]) -> ReplayRun:
    return ReplayRun(int(row[0]), int(row[1]), str(row[2]), int(row[3]), int(row[4]),
                     int(row[5]), row[6], row[7], str(row[8]), str(row[9]), RunState(row[10]),
                     row[11], int(row[12]), int(row[13]), str(row[14]), row[15], row[16])


__all__ = ["RANGE_REPLAY_EPOCHS", "ReplayProgress", "ReplayRangeError", "ReplayRefused",
           "ReplayRun", "RunState", "SQLiteReplayRuns"]
