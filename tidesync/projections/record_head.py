"""The record_head view (§10.1): the shore's current revision, origin and tombstone of each
record, from APPLIED results in the ApplyJob streams and from conflict decisions applied on the
shore (which write the decided revision to the target row without an apply job).

Informational: conflict detection relies on the compare-and-set on the target row, not on this.
"""

from __future__ import annotations

import json
from typing import Any

from eventsourcing.application import Application

from tidesync.domain.apply_job import ApplyJob, EventResult
from tidesync.domain.conflict_case import ConflictCase, key_digest
from tidesync.projections.engine import Cursor, Events, event_topic
from tidesync.projections.states import StreamStates

_DECODER = json.JSONDecoder()
_APPLIED = EventResult.APPLIED.value

# Rows of FinalResult.as_row(): event_id, result, reason, conflict_id, result_revision,
# position, rule_id, record_key, operation.
_EVENT_ID, _RESULT, _REVISION, _RULE, _KEY, _OPERATION = 0, 1, 4, 6, 7, 8


def record_location(record_key: str) -> tuple[str, str]:
    """Database and table named by a canonical record key text."""
    where, _ = _DECODER.raw_decode(record_key)
    names = {str(name): tagged for name, tagged in where}
    return _text(names.get("database")), _text(names.get("table"))


def _text(tagged: Any) -> str:
    return str(tagged[1]) if isinstance(tagged, list) and len(tagged) > 1 else ""


class RecordHeadProjection:
    name = "record_head"
    topics: tuple[str, ...] = (event_topic(ApplyJob.Finalized),)  # type: ignore[attr-defined]

    def __init__(self, table: str = "record_head",
                 decisions: str = "record_head_decision") -> None:
        self.table, self.decisions = table, decisions
        self._locations: dict[str, tuple[str, str]] = {}

    def process(self, cursor: Cursor, events: Events) -> None:
        rows = self.head_rows(events)
        if rows:
            self._upsert(cursor, rows)
            apply_decisions(cursor, self.table, self.decisions,
                            [(row[0], row[1]) for row in rows])

    def head_rows(self, events: Events) -> list[tuple[Any, ...]]:
        """The newest APPLIED result of each record in these events (later in the batch is
        newer): rule id, key digest, record key, revision, origin, event id, tombstone,
        finalized at, notification id."""
        newest: dict[tuple[str, str], tuple[Any, ...]] = {}
        for notification_id, event in events:
            origin = event.origin_node_id  # type: ignore[attr-defined]
            finalized_at = event.timestamp  # type: ignore[attr-defined]
            for row in event.results:  # type: ignore[attr-defined]
                if row[_RESULT] != _APPLIED or len(row) <= _OPERATION or not row[_KEY]:
                    continue
                rule_id, record_key = str(row[_RULE]), str(row[_KEY])
                digest = key_digest(rule_id, record_key)
                newest[(rule_id, digest)] = (
                    rule_id, digest, record_key, row[_REVISION], origin, row[_EVENT_ID],
                    row[_OPERATION] == "DELETE", finalized_at, notification_id)
        return list(newest.values())

    def _upsert(self, cursor: Cursor, rows: list[tuple[Any, ...]]) -> None:
        locations = [self.location(row[2]) for row in rows]
        columns = list(zip(*rows, strict=True))
        cursor.execute(
            f"INSERT INTO {self.table} AS h (rule_id, key_digest, record_key, database,"  # noqa: S608
            " table_name, revision, origin_node_id, last_event_id, tombstone, updated_at,"
            " log_position)"
            " SELECT u.rule_id, u.key_digest, u.record_key, u.db, u.tbl, u.revision::uuid,"
            " u.origin, u.event_id::uuid, u.tombstone, u.at, u.pos"
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::text[], %b::text[], %b::bool[], %b::timestamptz[], %b::int8[])"
            " AS u(rule_id, key_digest, record_key, db, tbl, revision, origin, event_id,"
            " tombstone, at, pos)"
            " ON CONFLICT (rule_id, key_digest) DO UPDATE SET"
            " record_key = EXCLUDED.record_key, database = EXCLUDED.database,"
            " table_name = EXCLUDED.table_name, revision = EXCLUDED.revision,"
            " origin_node_id = EXCLUDED.origin_node_id,"
            " last_event_id = EXCLUDED.last_event_id, tombstone = EXCLUDED.tombstone,"
            " updated_at = EXCLUDED.updated_at, log_position = EXCLUDED.log_position,"
            " decided_at = NULL"
            " WHERE h.log_position <= EXCLUDED.log_position"
            # A decision applied on the shore after this result was finalized stays.
            " AND (h.decided_at IS NULL OR h.decided_at < EXCLUDED.updated_at)",
            (list(columns[0]), list(columns[1]), list(columns[2]),
             [location[0] for location in locations], [location[1] for location in locations],
             list(columns[3]), list(columns[4]), list(columns[5]), list(columns[6]),
             list(columns[7]), list(columns[8])),
        )

    def location(self, record_key: str) -> tuple[str, str]:
        """Database and table of a record key (record_location, cached per location)."""
        # The key text starts with its location; many records share one, so parse each once.
        # A prefix is cached only when it is exactly the location array, which makes any key
        # starting with the same text name the same location.
        prefix = record_key[:record_key.find("]]][[") + 3]
        location = self._locations.get(prefix)
        if location is None:
            where, end = _DECODER.raw_decode(record_key)
            names = {str(name): tagged for name, tagged in where}
            location = _text(names.get("database")), _text(names.get("table"))
            if end == len(prefix):
                if len(self._locations) > 10_000:
                    self._locations.clear()
                self._locations[prefix] = location
        return location


class RecordHeadDecisionsProjection:
    """Dispatched decisions: the shore row carries the decided revision by then (written by
    the arbiter, or already there when the shore's side won), so the record's head takes it
    and the tombstone. Each record's newest decision is kept apart (`decisions`), so a head
    made later from a result finalized before the decision still follows it, whichever feed
    runs first."""

    name = "record_head"
    topics: tuple[str, ...] = (event_topic(ConflictCase.Dispatched),)  # type: ignore[attr-defined]

    def __init__(self, app: Application[Any], table: str = "record_head",
                 decisions: str = "record_head_decision") -> None:
        self.table, self.decisions = table, decisions
        self._states = StreamStates(app.repository, capacity=64)

    def process(self, cursor: Cursor, events: Events) -> None:
        newest: dict[tuple[str, str], tuple[Any, ...]] = {}
        for _, event in events:
            case = self._states.advance(event)
            decision = case.decision
            if not decision:
                continue
            # Event times of both feeds come from the event store's clock (the library's).
            newest[(case.rule_id, case.key_digest)] = (
                case.rule_id, case.key_digest, decision.get("decided_revision"),
                bool(decision.get("tombstone")), event.timestamp)  # type: ignore[attr-defined]
        if not newest:
            return
        cursor.executemany(
            f"INSERT INTO {self.decisions} AS d (rule_id, key_digest, revision, tombstone,"  # noqa: S608
            " decided_at) VALUES (%s, %s, %s::uuid, %s, %s)"
            " ON CONFLICT (rule_id, key_digest) DO UPDATE SET revision = EXCLUDED.revision,"
            " tombstone = EXCLUDED.tombstone, decided_at = EXCLUDED.decided_at"
            " WHERE d.decided_at <= EXCLUDED.decided_at", list(newest.values()))
        apply_decisions(cursor, self.table, self.decisions, list(newest))


def apply_decisions(cursor: Cursor, table: str, decisions: str,
                    keys: list[tuple[str, str]]) -> None:
    """Let the heads of `keys` take their record's decision where it is newer than the
    result they show (and not taken yet)."""
    cursor.execute(
        f"UPDATE {table} AS h SET revision = d.revision, tombstone = d.tombstone,"  # noqa: S608
        " updated_at = d.decided_at, decided_at = d.decided_at"
        f" FROM {decisions} AS d, unnest(%s::text[], %s::text[]) AS k(rule_id, key_digest)"
        " WHERE h.rule_id = k.rule_id AND h.key_digest = k.key_digest"
        " AND d.rule_id = k.rule_id AND d.key_digest = k.key_digest"
        " AND h.updated_at <= d.decided_at AND h.decided_at IS DISTINCT FROM d.decided_at",
        ([key[0] for key in keys], [key[1] for key in keys]))
