"""The record_head view (§10.1): the shore's current revision, origin and tombstone of each
record, from APPLIED results in the ApplyJob streams.

Informational: conflict detection relies on the compare-and-set on the target row, not on this.
"""

from __future__ import annotations

import json
from typing import Any

from tidesync.domain.apply_job import ApplyJob, EventResult
from tidesync.domain.conflict_case import key_digest
from tidesync.projections.engine import Cursor, Events, event_topic

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

    def __init__(self, table: str = "record_head") -> None:
        self.table = table
        self._locations: dict[str, tuple[str, str]] = {}

    def process(self, cursor: Cursor, events: Events) -> None:
        rows = self.head_rows(events)
        if rows:
            self._upsert(cursor, rows)

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
            " updated_at = EXCLUDED.updated_at, log_position = EXCLUDED.log_position"
            " WHERE h.log_position <= EXCLUDED.log_position",
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
