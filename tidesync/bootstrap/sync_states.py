"""The snapshot and catch-up state a ship reports on its heartbeat (§16.2), so the shore shows
it (`ruleSyncStates` in the console): per active rule, the snapshot its version asked for (or
NONE), and per table, the last snapshot no rule asked for (`tidesync snapshot start`, a
reconciliation's repair). Phase and lag are computed as `tidesync snapshot status` computes
them (`snapshot_phase`): from the capture's position file and the ship state's watermarks.

Only names, counts, offsets and times are reported, never a key or a value; at most
MAX_SYNC_STATES entries, rules first.
"""

from __future__ import annotations

import datetime as dt
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidesync.capture.errors import CaptureError
from tidesync.capture.snapshot_store import (
    SnapshotPhase,
    SnapshotRequest,
    SnapshotState,
    SnapshotStore,
    snapshot_phase,
)
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.ship.state.watermarks import Watermark
from tidesync.wire import sync_pb2 as pb

log = logging.getLogger(__name__)

MAX_SYNC_STATES = 1000
"""Entries one heartbeat carries (the shore refuses more: `MAX_SYNC_STATE_REPORTS`)."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PHASES = {
    SnapshotPhase.QUEUED: pb.SYNC_QUEUED,
    SnapshotPhase.SNAPSHOTTING: pb.SYNC_SNAPSHOTTING,
    SnapshotPhase.CATCHING_UP: pb.SYNC_CATCHING_UP,
    SnapshotPhase.IN_SYNC: pb.SYNC_IN_SYNC,
    SnapshotPhase.FAILED: pb.SYNC_FAILED,
}


@dataclass(frozen=True, slots=True)
class ActiveRule:
    """A rule version the ship applies, and the table it reads."""

    rule_id: str
    version: int
    table: str

    @classmethod
    def of(cls, rule: SyncRule) -> ActiveRule:
        return cls(rule.rule_id, rule.version, f"{rule.source_database}.{rule.source_table}")


def terminal_offsets(watermarks: Iterable[Watermark]) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the offset up to which the ship holds a shore answer for every
    record."""
    return {(wm.topic, wm.partition): wm.terminal_offset for wm in watermarks}


def sync_states(requests: Sequence[SnapshotRequest], active: Iterable[ActiveRule],
                terminal: Mapping[tuple[str, int], int] | None) -> list[pb.SyncState]:
    """One state per active rule (the last snapshot its running version asked for, else
    NONE) and per table with a snapshot no rule asked for (its last one); `requests` in id
    order. Rules of a snapshot that no longer run are left out."""
    by_rule: dict[tuple[str, int], SnapshotRequest] = {}
    by_table: dict[str, SnapshotRequest] = {}
    for request in requests:
        if request.rule_id:
            by_rule[(request.rule_id, request.rule_version)] = request
        else:
            by_table[f"{request.database}.{request.table}"] = request
    states = []
    for rule in sorted(active, key=lambda item: item.rule_id):
        found = by_rule.get((rule.rule_id, rule.version))
        states.append(pb.SyncState(rule_id=rule.rule_id, rule_version=rule.version,
                                   table=rule.table, phase=pb.SYNC_NONE)
                      if found is None else _state(found, terminal))
    states += [_state(by_table[table], terminal) for table in sorted(by_table)]
    return states[:MAX_SYNC_STATES]


def _state(request: SnapshotRequest,
           terminal: Mapping[tuple[str, int], int] | None) -> pb.SyncState:
    phase, lag = snapshot_phase(request, terminal)
    state = pb.SyncState(
        rule_id=request.rule_id, rule_version=request.rule_version,
        table=f"{request.database}.{request.table}", phase=_PHASES[phase],
        snapshot_id=request.id, rows_sent=request.rows_emitted, lag_records=lag,
        started_at_micros=_micros(request.started_at),
        finished_at_micros=_micros(request.finished_at))
    if request.started_at or request.state in (SnapshotState.SNAPSHOTTING,
                                               SnapshotState.EMITTED):
        state.rows_total = request.rows_total  # counted when reading began
    return state


def _micros(text: str) -> int:
    if not text:
        return 0
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)


class SnapshotSyncStates:
    """The ship's states, read for each heartbeat from the position file of the capture
    `capture` (its topic prefix) at `position_path` (None without a built-in binlog capture:
    active rules show NONE).

    `active` gives the rules the ship applies, `watermarks` the ship state's watermarks. When
    the position file cannot be read, the states of the last read are sent again, so a
    passing error does not make the shore forget them."""

    def __init__(self, position_path: str | Path | None, capture: str,
                 active: Callable[[], Iterable[SyncRule]],
                 watermarks: Callable[[], Iterable[Watermark]]) -> None:
        self.position_path = None if position_path is None else Path(position_path)
        self.capture = capture
        self.active, self.watermarks = active, watermarks
        self._last: list[pb.SyncState] = []

    def __call__(self) -> list[pb.SyncState]:
        try:
            requests = self._requests()
        except (sqlite3.Error, OSError, CaptureError, ValueError) as error:
            log.warning("the capture's snapshot requests cannot be read (%s); the heartbeat"
                        " repeats the last sync states", type(error).__name__)
            return self._last
        terminal = terminal_offsets(self.watermarks()) if requests else {}
        self._last = sync_states(requests, [ActiveRule.of(rule) for rule in self.active()],
                                 terminal)
        return self._last

    def _requests(self) -> list[SnapshotRequest]:
        if self.position_path is None or not self.position_path.exists():
            return []
        store = SnapshotStore(self.position_path)
        try:
            return store.requests(self.capture, with_keys=False)
        finally:
            store.close()
