"""Sync state reports (§16.2): the snapshot phase, progress and catch-up lag a node's heartbeat
reports per rule (or per table snapshot no rule asked for), checked against the input limits
and kept per node and subject (`rule_sync_state`), as the rule reports are.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tidesync.ingress.database import Connection
from tidesync.ingress.rule_reports import BadRuleReport, TooManyRuleReports, reported_moment
from tidesync.wire import sync_pb2 as pb

MAX_SYNC_STATE_REPORTS = 1000
"""Sync states one heartbeat may carry."""
MAX_NAME_CHARS = 64
"""Characters of a database or a table name (MySQL's limit)."""
_RULE_ID = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_INT64 = 1 << 63
_PHASES = {pb.SYNC_NONE: "NONE", pb.SYNC_QUEUED: "QUEUED", pb.SYNC_SNAPSHOTTING: "SNAPSHOTTING",
           pb.SYNC_CATCHING_UP: "CATCHING_UP", pb.SYNC_IN_SYNC: "IN_SYNC",
           pb.SYNC_FAILED: "FAILED"}

_UPSERT = (
    "INSERT INTO rule_sync_state (node_id, subject, rule_id, rule_version, table_name, phase,"
    " snapshot_id, rows_sent, rows_total, started_at, finished_at, lag_records, sent_at,"
    " reported_at, in_sync_since) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
    " %s, %s)"
    " ON CONFLICT (node_id, subject) DO UPDATE SET rule_id = EXCLUDED.rule_id,"
    " rule_version = EXCLUDED.rule_version, table_name = EXCLUDED.table_name,"
    " phase = EXCLUDED.phase, snapshot_id = EXCLUDED.snapshot_id,"
    " rows_sent = EXCLUDED.rows_sent, rows_total = EXCLUDED.rows_total,"
    " started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,"
    " lag_records = EXCLUDED.lag_records, sent_at = EXCLUDED.sent_at,"
    " reported_at = EXCLUDED.reported_at,"
    # Still IN_SYNC on the same rule version and snapshot: it got there when it first said so.
    " in_sync_since = CASE WHEN rule_sync_state.phase = 'IN_SYNC'"
    " AND EXCLUDED.phase = 'IN_SYNC' AND rule_sync_state.rule_version = EXCLUDED.rule_version"
    " AND rule_sync_state.snapshot_id IS NOT DISTINCT FROM EXCLUDED.snapshot_id"
    " THEN COALESCE(rule_sync_state.in_sync_since, EXCLUDED.in_sync_since)"
    " ELSE EXCLUDED.in_sync_since END"
)
_FORGET_UNREPORTED = (
    "DELETE FROM rule_sync_state WHERE node_id = %s AND NOT (subject = ANY(%s))"
)


class BadSyncState(BadRuleReport):
    """A heartbeat's sync states that break a limit or cannot be stored."""

    reason = "BAD_SYNC_STATE"


class TooManySyncStates(TooManyRuleReports):
    reason = "TOO_MANY_SYNC_STATES"


@dataclass(frozen=True, slots=True)
class SyncStateRow:
    """One checked state, ready to store. `subject` is `rule:ID` or `table:DB.TABLE`."""

    subject: str
    rule_id: str | None
    rule_version: int
    table: str
    phase: str
    snapshot_id: int | None
    rows_sent: int
    rows_total: int | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    lag_records: int


def checked_sync_states(states: Sequence[pb.SyncState]) -> list[SyncStateRow]:
    """The heartbeat's sync states, each checked; raises BadSyncState naming the first one
    that breaks a limit (the whole heartbeat is refused: nothing of it is stored)."""
    if len(states) > MAX_SYNC_STATE_REPORTS:
        raise TooManySyncStates(
            f"a heartbeat carries at most {MAX_SYNC_STATE_REPORTS} sync states")
    rows = [_checked(f"sync_states[{index}]", state) for index, state in enumerate(states)]
    if len({row.subject for row in rows}) != len(rows):
        raise BadSyncState("a heartbeat reports each rule and table once")
    return rows


def _checked(where: str, state: pb.SyncState) -> SyncStateRow:
    if state.rule_id and _RULE_ID.fullmatch(state.rule_id) is None:
        raise BadSyncState(f"{where}.rule_id is not a rule id")
    if not _is_table(state.table):
        raise BadSyncState(f"{where}.table is not DB.TABLE")
    if not state.rule_id and state.rule_version != 0:
        raise BadSyncState(f"{where}: a table's state has no rule version")
    phase = _PHASES.get(state.phase)
    if phase is None:
        raise BadSyncState(f"{where}.phase is not a known value")
    for name in ("rule_version", "snapshot_id", "rows_sent", "rows_total", "lag_records"):
        if not 0 <= getattr(state, name) < _INT64:
            raise BadSyncState(f"{where}.{name} is out of range")
    if (phase == "NONE") != (state.snapshot_id == 0):
        raise BadSyncState(f"{where}: a snapshot id goes with every phase but NONE")
    return SyncStateRow(
        subject=f"rule:{state.rule_id}" if state.rule_id else f"table:{state.table}",
        rule_id=state.rule_id or None, rule_version=state.rule_version, table=state.table,
        phase=phase, snapshot_id=state.snapshot_id or None, rows_sent=state.rows_sent,
        rows_total=state.rows_total if state.HasField("rows_total") else None,
        started_at=reported_moment(f"{where}.started_at_micros", state.started_at_micros,
                                   BadSyncState),
        finished_at=reported_moment(f"{where}.finished_at_micros", state.finished_at_micros,
                                    BadSyncState),
        lag_records=state.lag_records)


def _is_table(name: str) -> bool:
    database, dot, table = name.partition(".")
    return bool(dot) and all(
        0 < len(part) <= MAX_NAME_CHARS and part.isprintable() and "." not in part
        for part in (database, table))


def store_sync_states(conn: Connection, node_id: str, rows: Sequence[SyncStateRow],
                      sent_at: dt.datetime, now: dt.datetime) -> None:
    """Make `rows` the node's sync states: upsert each, forget the subjects it no longer
    reports. Call only for the node's newest heartbeat."""
    if rows:
        with conn.cursor() as cursor:
            cursor.executemany(_UPSERT, [
                (node_id, row.subject, row.rule_id, row.rule_version, row.table, row.phase,
                 row.snapshot_id, row.rows_sent, row.rows_total, row.started_at,
                 row.finished_at, row.lag_records, sent_at, now,
                 sent_at if row.phase == "IN_SYNC" else None)
                for row in rows
            ])
    conn.execute(_FORGET_UNREPORTED, (node_id, [row.subject for row in rows]))
