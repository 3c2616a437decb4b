"""The conflict center view (§11, §21.2): each ConflictCase as of its newest event, with an
evidence summary that names events, operations, revisions and columns but holds no values.

Rows are derived from the case's state, so events added to the lifecycle later need no change.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.application import Application
from psycopg.types.json import Jsonb

from tidesync.projections.engine import Cursor, Events
from tidesync.projections.states import StreamStates, digest, plain
from tidesync.projections.text import storable


def _columns(image: object) -> dict[str, object] | None:
    if not isinstance(image, list | tuple):
        return None
    return {str(pair[0]): pair[1] for pair in image if isinstance(pair, list | tuple)}


def evidence_item_summary(evidence: Mapping[str, object]) -> dict[str, object]:
    """One piece of evidence without values: which columns the incoming change touched and
    which differ from the shore's current row."""
    before = _columns(evidence.get("incoming_before"))
    after = _columns(evidence.get("incoming_after"))
    current = _columns(evidence.get("current_row"))
    changed = None if before is None or after is None else sorted(
        name for name in after if before.get(name) != after[name])
    differing = None if after is None or current is None else sorted(
        name for name in after if current.get(name) != after[name])
    return {
        "event_id": evidence.get("event_id"),
        "origin_node_id": evidence.get("origin_node_id"),
        "operation": evidence.get("operation"),
        "incoming_base_revision": evidence.get("incoming_base_revision"),
        "incoming_result_revision": evidence.get("incoming_result_revision"),
        "current_revision": evidence.get("current_revision"),
        "current_row_exists": current is not None,
        "rule_version": evidence.get("rule_version"),
        "captured_at": evidence.get("captured_at"),
        "changed_columns": changed,
        "differing_columns": differing,
    }


def evidence_summary(evidence: object) -> list[dict[str, object]]:
    items = evidence if isinstance(evidence, list | tuple) else []
    return [evidence_item_summary(item) for item in items if isinstance(item, Mapping)]


def decision_summary(decision: object) -> object:
    """A decision without the decided value (only whether there is one and its digest)."""
    if not isinstance(decision, Mapping):
        return decision
    shown = {key: value for key, value in decision.items() if key != "decided_value"}
    value = decision.get("decided_value")
    shown["decided_value_sha256"] = None if value is None else digest(value)
    return shown


class ConflictCenterProjection:
    name = "conflict_center"
    topics: tuple[str, ...] = ()

    def __init__(self, app: Application[Any], table: str = "conflict_center",
                 sla: dt.timedelta = dt.timedelta(hours=24)) -> None:
        self.table = table
        self.sla = sla
        self._states = StreamStates(app.repository)

    def process(self, cursor: Cursor, events: Events) -> None:
        cases: dict[object, Any] = {}
        for _, event in events:
            cases[event.originator_id] = self._states.advance(event)
        rows = [self._row(case) for case in cases.values()]
        cursor.executemany(
            f"INSERT INTO {self.table} (conflict_id, rule_id, key_digest, database,"  # noqa: S608
            " table_name, state, opened_at, updated_at, evidence_count, node_ids, sla_due_at,"
            " summary, version, rule_version)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (conflict_id) DO UPDATE SET state = EXCLUDED.state,"
            " updated_at = EXCLUDED.updated_at, evidence_count = EXCLUDED.evidence_count,"
            " sla_due_at = EXCLUDED.sla_due_at,"
            " node_ids = EXCLUDED.node_ids, summary = EXCLUDED.summary,"
            " version = EXCLUDED.version, rule_version = EXCLUDED.rule_version"
            f" WHERE {self.table}.version < EXCLUDED.version",
            rows,
        )

    def _row(self, case: Any) -> Sequence[object]:
        evidence = list(case.evidence)
        nodes = sorted({str(item.get("origin_node_id")) for item in evidence
                        if item.get("origin_node_id")})
        summary = {
            "evidence": evidence_summary(evidence),
            "decision": _shown_decision(getattr(case, "decision", None)),
            "cancellation": plain(getattr(case, "cancellation", None)),
            **lifecycle_summary(case),
        }
        return (case.id, case.rule_id, case.key_digest, case.database, case.table,
                plain(case.state), case.created_on, case.modified_on, len(evidence), nodes,
                self.sla_due_at(case), Jsonb(storable(summary)), case.version, case.rule_version)

    def sla_due_at(self, case: Any) -> dt.datetime:
        """When waiting longer breaches the SLA: the due time a case waiting for a person
        carries (set when it was handed over), else its opening plus the configured SLA."""
        manual = getattr(case, "manual", None)
        if plain(case.state) == "PENDING_MANUAL" and isinstance(manual, Mapping):
            due = _moment(manual.get("sla_due"))
            if due is not None:
                return due
        opened: dt.datetime = case.created_on
        return opened + self.sla


def _shown_decision(decision: object) -> object:
    """The decision as every role may see it: an unkeyed digest of the decided value would
    let a viewer test guesses of it, so only whether there is one is shown."""
    shown = plain(decision_summary(decision))
    if isinstance(shown, dict):
        shown["has_decided_value"] = shown.pop("decided_value_sha256", None) is not None
    return shown


def lifecycle_summary(case: Any) -> dict[str, object]:
    """The arbitration facts of a case (§11.3), none of them business values: why it waits for
    a person and until when, the commands its decision went out as, each node's answer, and
    why it expired."""
    dispatch = getattr(case, "dispatch_info", None) or None
    return {
        "manual": plain(getattr(case, "manual", None)),
        "dispatch": plain(dispatch),
        "acks": plain(getattr(case, "acks", None) or {}),
        "expiry": plain(getattr(case, "expiry", None)),
    }


def _moment(raw: object) -> dt.datetime | None:
    """An ISO 8601 time as an aware UTC datetime (a time without offset is UTC); None when
    it is missing or not a time."""
    if not isinstance(raw, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        return None
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment
