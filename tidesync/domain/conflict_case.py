"""The ConflictCase aggregate: one active conflict per rule + record key, with its evidence.

Capture only records what was seen (§11.2–11.3 DETECTED); arbitration extends the lifecycle.
"""

from __future__ import annotations

import enum
import hashlib
import uuid
from collections.abc import Mapping

from eventsourcing.domain import Aggregate, event

from tidesync.domain.change_event import ChangeEvent, Revision
from tidesync.domain.values import Value, canonical_value

CONFLICT_NAMESPACE = uuid.UUID("7e4f2a18-93c5-5b61-a0d2-4c8e6f1b3a97")


class ConflictState(enum.StrEnum):
    DETECTED = "DETECTED"
    AUTO_DECIDING = "AUTO_DECIDING"
    PENDING_MANUAL = "PENDING_MANUAL"
    DECIDED = "DECIDED"
    DISPATCHED = "DISPATCHED"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


ACTIVE_STATES = frozenset({
    ConflictState.DETECTED, ConflictState.AUTO_DECIDING, ConflictState.PENDING_MANUAL,
    ConflictState.DECIDED, ConflictState.DISPATCHED,
})


def rule_for(event: ChangeEvent) -> str:
    """The rule an event belongs to; without a rule runtime, one implicit rule per table."""
    return event.rule_id or f"table:{event.database}.{event.table}"


def record_key_digest(rule_id: str, event: ChangeEvent) -> str:
    """A stable digest of rule + record key: safe to log and index (no key values)."""
    return hashlib.sha256(f"{rule_id}\x1f{event.record.canonical()}".encode()).hexdigest()


def active_conflict_key(rule_id: str, key_digest: str, current: Revision | None,
                        incoming: Revision | None) -> str:
    """rule + record key + the two revisions, ordered so both sides' reports meet (§11.2)."""
    tokens = sorted(r.text if r else "-" for r in (current, incoming))
    return f"{rule_id}\x1f{key_digest}\x1f{tokens[0]}\x1f{tokens[1]}"


def conflict_id_for(active_key: str) -> uuid.UUID:
    return uuid.uuid5(CONFLICT_NAMESPACE, active_key)


def image_evidence(image: Mapping[str, Value] | None) -> list[list[object]] | None:
    """A row image in type-tagged canonical form, storable and exact."""
    if image is None:
        return None
    return [[name, canonical_value(value)] for name, value in image.items()]


class ConflictCase(Aggregate):
    """Concurrent updates of one record, captured with evidence from both sides."""

    @staticmethod
    def create_id(active_key: str, **_: object) -> uuid.UUID:
        return conflict_id_for(active_key)

    @event("Detected")
    def __init__(self, active_key: str, rule_id: str, rule_version: int | None,
                 key_digest: str, database: str, table: str, evidence: dict[str, object],
                 actor: str, reason: str) -> None:
        self.active_key = active_key
        self.rule_id = rule_id
        self.rule_version = rule_version
        self.key_digest = key_digest
        self.database = database
        self.table = table
        self.state = ConflictState.DETECTED
        self.evidence: list[dict[str, object]] = [evidence]
        self.event_ids = {str(evidence["event_id"])}

    @event("EvidenceAdded")
    def add_evidence(self, evidence: dict[str, object], actor: str, reason: str) -> None:
        self.evidence.append(evidence)
        self.event_ids.add(str(evidence["event_id"]))

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES


def conflict_evidence(event: ChangeEvent, current_row: Mapping[str, Value] | None,
                      current_revision: Revision | None) -> dict[str, object]:
    """What an arbiter needs to decide: both sides' images, revisions, rule version."""
    return {
        "event_id": str(event.event_id),
        "origin_node_id": event.origin_node_id,
        "operation": event.operation.value,
        "incoming_before": image_evidence(event.before),
        "incoming_after": image_evidence(event.after),
        "incoming_base_revision": event.base_revision.text if event.base_revision else None,
        "incoming_result_revision": (
            event.result_revision.text if event.result_revision else None),
        "current_row": image_evidence(current_row),
        "current_revision": current_revision.text if current_revision else None,
        "rule_version": event.rule_version,
        "captured_at": event.captured_at.isoformat(),
    }
