"""Opening or joining the one active ConflictCase of a rule + record key (§11.2).

Both the apply processor (a ship's change meets another shore revision) and the downlink
follow-up (a ship reports that a shore change met another local revision) land here, so both
reports of one concurrent update meet in the same case.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping
from typing import Protocol

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.recorder import Statement
from tidesync.domain.change_event import Revision
from tidesync.domain.conflict_case import ConflictCase, active_conflict_key, conflict_id_for

log = logging.getLogger(__name__)

DUE_AT_ONCE = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
"""`active_conflict.due_at` of a case the arbiter advances at its next round, whatever its clock
says (the column's default, so a newly opened case is due at once too)."""


class ActiveConflicts(Protocol):
    def active_conflict_id(self, rule_id: str, key_digest: str) -> uuid.UUID | None: ...

    def open_conflict_statements(self, rule_id: str, key_digest: str,
                                 conflict_id: uuid.UUID) -> list[Statement]: ...

    def decided_conflict_id(self, rule_id: str, key_digest: str,
                            revision: Revision) -> uuid.UUID | None: ...


def weighed_revisions(case: ConflictCase) -> set[str]:
    """Every revision of the record the case's evidence shows, both sides."""
    found = set()
    for evidence in case.evidence:
        for name in ("incoming_result_revision", "current_revision"):
            if evidence.get(name):
                found.add(str(evidence[name]))
    return found


def decided_revision_statements(case: ConflictCase) -> list[Statement]:
    """Remember, with the decision, the revisions it weighed (PostgreSQL)."""
    return [("INSERT INTO decided_revision (rule_id, key_digest, revision, conflict_id)"
             " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
             (case.rule_id, case.key_digest, uuid.UUID(revision), case.id))
            for revision in sorted(weighed_revisions(case))]


def capture_conflict(conflicts: ConflictCasesApplication, active: ActiveConflicts, *, rule_id: str,
                     digest: str, database: str, table: str, rule_version: int | None,
                     current: Revision | None, incoming: Revision | None,
                     evidence: Mapping[str, object], actor: str, reason: str,
                     ) -> tuple[uuid.UUID, bool]:
    """The case that holds this evidence, and whether the evidence is recorded in it.

    An active case of the key takes the evidence (once per event id). A change whose revision
    a decision already weighed belongs to that decided case. Otherwise a case is opened under
    the active conflict key of the two revisions; when that very case exists and is already
    closed, the report is about a conflict settled since, and nothing is added.
    """
    if incoming is not None:
        decided = active.decided_conflict_id(rule_id, digest, incoming)
        if decided is not None:
            return decided, False
    for _ in range(3):
        existing = active.active_conflict_id(rule_id, digest)
        if existing is not None:
            case = conflicts.get_case(existing)
            if str(evidence["event_id"]) not in case.event_ids:
                case.add_evidence(dict(evidence), actor, "further conflicting change")
                conflicts.save(case)
            return existing, True
        key = active_conflict_key(rule_id, digest, current, incoming)
        try:
            closed = conflicts.get_case(conflict_id_for(key))
        except AggregateNotFoundError:
            pass
        else:
            if not closed.is_active:
                return closed.id, False
            continue  # Active but not yet indexed: look again.
        case = ConflictCase(active_key=key, rule_id=rule_id, rule_version=rule_version,
                            key_digest=digest, database=database, table=table,
                            evidence=dict(evidence), actor=actor, reason=reason)
        try:
            conflicts.save(case, extra_statements=active.open_conflict_statements(
                rule_id, digest, case.id))
        except IntegrityError:
            continue  # Another worker opened a case for this key first: join it.
        log.info("conflict %s opened on %s.%s", case.id, database, table)
        return case.id, True
    raise RuntimeError("could not settle the active conflict for a record key")
