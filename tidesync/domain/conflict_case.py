"""The ConflictCase aggregate: one active conflict per rule + record key, with its evidence.

Capture records what was seen (§11.2–11.3 DETECTED); a manual decision (§11.5) or an
authorised cancellation moves it on, each an immutable event with actor and reason.
"""

from __future__ import annotations

import enum
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from eventsourcing.domain import Aggregate, event

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    table_rule,
    tombstone_revision,
)
from tidesync.domain.conflict_images import SYNC_COLUMN_PREFIX as SYNC_COLUMN_PREFIX
from tidesync.domain.conflict_images import Image, business, columns_of, ship_row
from tidesync.domain.conflict_images import is_sync_column as is_sync_column
from tidesync.domain.errors import ErrorCode, TidesyncError
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

DECIDABLE_STATES = frozenset({
    ConflictState.DETECTED, ConflictState.AUTO_DECIDING, ConflictState.PENDING_MANUAL,
})
"""Active states without a decision yet: a decision is appended once, never overwritten."""

CANCELLABLE_STATES = DECIDABLE_STATES | {ConflictState.DECIDED}
"""Active states without business effect: once dispatched, a ship may have applied it."""

EXPIRABLE_STATES = ACTIVE_STATES
"""A case whose evidence no longer describes the record expires from any active state."""

SUCCESSFUL_ACKS = frozenset({"COMMAND_APPLIED", "COMMAND_ALREADY_APPLIED"})
"""Command results that mean a node holds the decided row."""

RETARGET_LIMIT = 3
"""How often a decision is sent again to one node whose row the case had weighed (its answer
named a revision of the evidence): each time the node's row moves to the decided one, so more
is a node whose row keeps moving, and the case expires instead."""

class DecisionSide(enum.StrEnum):
    """What a manual decision keeps (§11.5): the shore's row, the ship's, or a full new value."""

    SHORE = "SHORE"
    SHIP = "SHIP"
    REPLACEMENT = "REPLACEMENT"


class ConflictRefusal(enum.StrEnum):
    """Why a decision or cancellation was refused (stable codes for people and APIs)."""

    NOT_DECIDABLE = "NOT_DECIDABLE"
    NOT_CANCELLABLE = "NOT_CANCELLABLE"
    NOT_AUTO_DECIDABLE = "NOT_AUTO_DECIDABLE"
    LEASE_HELD = "LEASE_HELD"
    NOT_DISPATCHABLE = "NOT_DISPATCHABLE"
    NOT_REDISPATCHABLE = "NOT_REDISPATCHABLE"
    REASON_REQUIRED = "REASON_REQUIRED"
    EVIDENCE_STALE = "EVIDENCE_STALE"
    REPLACEMENT_REQUIRED = "REPLACEMENT_REQUIRED"
    REPLACEMENT_UNEXPECTED = "REPLACEMENT_UNEXPECTED"
    REPLACEMENT_COLUMNS = "REPLACEMENT_COLUMNS"
    REPLACEMENT_TYPE = "REPLACEMENT_TYPE"
    SHIP_ROW_INCOMPLETE = "SHIP_ROW_INCOMPLETE"
    NOT_REFRESHABLE = "NOT_REFRESHABLE"
    NOT_RETARGETABLE = "NOT_RETARGETABLE"


class ConflictRefused(TidesyncError):
    """A command the case's state or evidence does not allow; `code` is stable."""

    code = ErrorCode.REFUSED

    def __init__(self, refusal: ConflictRefusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.code = ErrorCode(refusal.value)
        self.message = message


def rule_for_record(record: RecordKey, rule_id: str | None = None) -> str:
    """The rule a record belongs to: `rule_id` when the shore knows it (a released rule that
    authorized the change, or a case's own rule), else its table's implicit rule."""
    return rule_id or table_rule(record.database, record.table)


def rule_for(event: ChangeEvent) -> str:
    """The rule of an event as the shore admitted it: the shore's apply scope sets `rule_id`
    to the released rule it looked up, or clears it (no rules: the table's implicit rule), so
    the id a ship sent is never taken on trust. On a received event not yet admitted this is
    only the ship's claim (as the backlog counts it)."""
    return rule_for_record(event.record, event.rule_id)


def key_digest(rule_id: str, canonical_key: str) -> str:
    """sha256 hex of rule + canonical record key (`RecordKey.canonical()`): safe to log and
    index (no key values); conflict cases and record_head carry it."""
    return hashlib.sha256(f"{rule_id}\x1f{canonical_key}".encode()).hexdigest()


def record_key_digest(rule_id: str, event: ChangeEvent) -> str:
    return key_digest(rule_id, event.record.canonical())


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
        self.decision: dict[str, object] | None = None
        self.cancellation: dict[str, object] | None = None
        self.lease: dict[str, object] | None = None
        self.manual: dict[str, object] | None = None
        self.dispatch_info: dict[str, Any] = {}
        self.acks: dict[str, dict[str, str]] = {}
        self.expiry: dict[str, object] | None = None

    @event("EvidenceAdded")
    def add_evidence(self, evidence: dict[str, object], actor: str, reason: str) -> None:
        self.evidence.append(evidence)
        self.event_ids.add(str(evidence["event_id"]))

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def latest_evidence(self) -> dict[str, object]:
        return self.evidence[-1]

    def decide(self, decision_id: str, side: DecisionSide,
               replacement: list[list[object]] | None, current_revision: str | None,
               replacement_revision: str, actor: str, reason: str, trace_id: str = "",
               *, current_row: Image | None = None) -> None:
        """Record a manual decision (§11.5) against the latest evidence.

        `current_revision` is the record's revision read just before (None: no row) and
        `current_row` the shore's row read with it (None: the evidence's); when the revision
        is no longer the one the evidence shows, the decision is refused as stale. SHORE
        keeps the shore's whole row and revision. SHIP keeps the ship's row and revision; a
        ship row known only by the columns its UPDATE changed is laid over the shore's row
        and, no longer the ship's own row, given `replacement_revision` (refused when the
        shore has no row to complete it). A REPLACEMENT needs every column of the evidence
        with values of the same types and is given `replacement_revision`.
        """
        if self.state not in DECIDABLE_STATES:
            raise ConflictRefused(ConflictRefusal.NOT_DECIDABLE,
                                  f"a {self.state} conflict cannot be decided")
        _require_reason(reason)
        latest = self.latest_evidence
        if current_revision != latest.get("current_revision"):
            raise ConflictRefused(ConflictRefusal.EVIDENCE_STALE,
                                  "the record changed since the evidence was captured;"
                                  " refresh the evidence and decide again")
        shore = business(current_row) if current_row is not None else business(
            latest.get("current_row"))
        value, revision = self._decided_image(side, replacement, replacement_revision, shore)
        if value is None:  # A deletion: its revision is derived from the decision (§12).
            revision = tombstone_revision(uuid.UUID(decision_id)).text
        self._decided(decision_id, side.value, value, value is None, revision, current_revision,
                      len(self.evidence), actor, reason, trace_id)

    def _decided_image(self, side: DecisionSide, replacement: list[list[object]] | None,
                       replacement_revision: str, shore: Image | None
                       ) -> tuple[list[list[object]] | None, str | None]:
        latest = self.latest_evidence
        if side is not DecisionSide.REPLACEMENT:
            if replacement is not None:
                raise ConflictRefused(ConflictRefusal.REPLACEMENT_UNEXPECTED,
                                      f"a {side} decision takes no replacement value")
            if side is DecisionSide.SHORE:
                return shore, _text(latest.get("current_revision"))
            image, own, whole = ship_row(self.evidence, shore)
            if not whole:
                raise ConflictRefused(
                    ConflictRefusal.SHIP_ROW_INCOMPLETE,
                    "the ship's change carries only the columns it changed and the shore has"
                    " no row to complete it: decide SHORE, or REPLACEMENT with every column,"
                    " or wait for the ship's report of its whole row")
            return image, (_text(latest.get("incoming_result_revision")) if own
                           else replacement_revision)
        if replacement is None:
            raise ConflictRefused(ConflictRefusal.REPLACEMENT_REQUIRED,
                                  "a REPLACEMENT decision needs the complete new value")
        check_replacement(self.evidence_columns(), replacement)
        return [list(pair) for pair in replacement], replacement_revision

    @event("Decided")
    def _decided(self, decision_id: str, side: str, decided_value: list[list[object]] | None,
                 tombstone: bool, decided_revision: str | None, expected_revision: str | None,
                 evidence_count: int, actor: str, reason: str, trace_id: str) -> None:
        self.state = ConflictState.DECIDED
        self.decision = {
            "decision_id": decision_id, "side": side, "decided_value": decided_value,
            "tombstone": tombstone, "decided_revision": decided_revision,
            "expected_revision": expected_revision, "evidence_count": evidence_count,
            "actor": actor, "reason": reason,
        }

    # -- arbitration lifecycle (§11.3) ---------------------------------------------------

    def start_auto_decide(self, owner: str, policy: str, now_iso: str, lease_until_iso: str,
                          actor: str, reason: str) -> None:
        """Take the auto-decide lease (DETECTED, or AUTO_DECIDING whose lease ran out: a
        worker that died mid-decision is taken over). Times are ISO-8601 UTC text."""
        if self.state is ConflictState.AUTO_DECIDING:
            if str((self.lease or {}).get("until", "")) > now_iso:
                raise ConflictRefused(ConflictRefusal.LEASE_HELD,
                                      "another worker holds the auto-decide lease")
        elif self.state is not ConflictState.DETECTED:
            raise ConflictRefused(ConflictRefusal.NOT_AUTO_DECIDABLE,
                                  f"a {self.state} conflict is not decided automatically")
        previous = (self.lease or {}).get("owner")
        self._auto_deciding(owner, policy, lease_until_iso, previous, actor, reason)

    @event("AutoDecideStarted")
    def _auto_deciding(self, owner: str, policy: str, lease_until: str, taken_over_from: object,
                       actor: str, reason: str) -> None:
        self.state = ConflictState.AUTO_DECIDING
        self.lease = {"owner": owner, "policy": policy, "until": lease_until,
                      "taken_over_from": taken_over_from}

    def require_manual(self, reason_code: str, sla_due_iso: str, actor: str,
                       reason: str) -> None:
        """Hand the case to a person (policy MANUAL, or an automatic policy that could not
        decide); `sla_due_iso` is when waiting longer breaches the SLA."""
        if self.state not in (ConflictState.DETECTED, ConflictState.AUTO_DECIDING):
            raise ConflictRefused(ConflictRefusal.NOT_AUTO_DECIDABLE,
                                  f"a {self.state} conflict cannot be handed over")
        self._manual_required(reason_code, sla_due_iso, actor, reason)

    @event("ManualRequired")
    def _manual_required(self, reason_code: str, sla_due: str, actor: str, reason: str) -> None:
        self.state = ConflictState.PENDING_MANUAL
        self.manual = {"reason_code": reason_code, "sla_due": sla_due}
        self.lease = None

    def dispatch(self, commands: list[dict[str, str]], shore_applied: bool, actor: str,
                 reason: str) -> None:
        """The decision is in the downlink queue of every node it concerns (and applied on
        the shore): `commands` lists {"node_id", "command_id"}."""
        if self.state is not ConflictState.DECIDED:
            raise ConflictRefused(ConflictRefusal.NOT_DISPATCHABLE,
                                  f"a {self.state} conflict cannot be dispatched")
        self._dispatched(commands, shore_applied, actor, reason)
        if not commands:  # No node holds the record: the shore apply settled it.
            self._acknowledged(actor, "no node to send the decision to")

    @event("Dispatched")
    def _dispatched(self, commands: list[dict[str, str]], shore_applied: bool, actor: str,
                    reason: str) -> None:
        self.state = ConflictState.DISPATCHED
        self.dispatch_info = {"commands": [dict(c) for c in commands],
                              "shore_applied": shore_applied}
        self.acks = {}

    def redispatch(self, node_id: str, command_id: str, actor: str, reason: str,
                   trace_id: str = "") -> None:
        """Send the decision again to a node that refused it (COMMAND_REJECTED: its table
        was not enabled for sync, say), once the cause is fixed: `command_id` replaces the
        node's command and the node's answer is awaited again."""
        self.check_redispatch(node_id, reason)
        self._redispatched(node_id, command_id, actor, reason, trace_id)

    def check_redispatch(self, node_id: str, reason: str) -> None:
        """Raise ConflictRefused unless `redispatch` to this node would be accepted."""
        _require_reason(reason)
        ack = self.acks.get(node_id)
        if (self.state is not ConflictState.DISPATCHED or ack is None
                or ack["result"] != "COMMAND_REJECTED"):
            raise ConflictRefused(ConflictRefusal.NOT_REDISPATCHABLE,
                                  "only a dispatched decision a node rejected can be sent to"
                                  " that node again")

    @event("Redispatched")
    def _redispatched(self, node_id: str, command_id: str, actor: str, reason: str,
                      trace_id: str) -> None:
        commands = [dict(c) for c in self.dispatch_info["commands"] if c["node_id"] != node_id]
        counts = dict(self.dispatch_info.get("redispatches", {}))
        counts[node_id] = int(counts.get(node_id, 0)) + 1
        self.dispatch_info = {**self.dispatch_info, "redispatches": counts,
                              "commands": [*commands, {"node_id": node_id,
                                                       "command_id": command_id}]}
        self.acks = {node: ack for node, ack in self.acks.items() if node != node_id}

    def redispatches_to(self, node_id: str) -> int:
        """How often the decision was sent to this node again."""
        return int(self.dispatch_info.get("redispatches", {}).get(node_id, 0))

    def command_of(self, node_id: str) -> str | None:
        """The id of the decision command a node is to answer (None: none went to it)."""
        for command in self.dispatch_info.get("commands", ()):
            if command["node_id"] == node_id:
                return str(command["command_id"])
        return None

    def record_ack(self, node_id: str, command_id: str, result: str, reason_code: str,
                   actor: str, reason: str) -> bool:
        """A node's answer to the decision; True once every node holds the decided row
        (the case is then ACKNOWLEDGED). An answer to a command the node no longer has to
        answer (one sent before a redispatch) changes nothing."""
        if (self.state is not ConflictState.DISPATCHED or node_id in self.acks
                or self.command_of(node_id) != command_id):
            return False
        self._node_acknowledged(node_id, command_id, result, reason_code, actor, reason)
        expected = {str(c["node_id"]) for c in self.dispatch_info["commands"]}
        done = {node for node, ack in self.acks.items() if ack["result"] in SUCCESSFUL_ACKS}
        if expected <= done:
            self._acknowledged(actor, "every node holds the decided row")
            return True
        return False

    @event("NodeAcknowledged")
    def _node_acknowledged(self, node_id: str, command_id: str, result: str, reason_code: str,
                           actor: str, reason: str) -> None:
        self.acks[node_id] = {"command_id": command_id, "result": result,
                              "reason_code": reason_code}

    @event("Acknowledged")
    def _acknowledged(self, actor: str, reason: str) -> None:
        self.state = ConflictState.ACKNOWLEDGED

    def expire(self, reason_code: str, actor: str, reason: str, trace_id: str = "") -> None:
        """The record's revision is no longer one of the evidence (§11.3 EXPIRED): a newer
        change or a stale decision; a new case takes the new evidence."""
        if self.state not in EXPIRABLE_STATES:
            raise ConflictRefused(ConflictRefusal.NOT_CANCELLABLE,
                                  f"a {self.state} conflict cannot expire")
        self._expired(reason_code, actor, reason, trace_id)

    @event("Expired")
    def _expired(self, reason_code: str, actor: str, reason: str, trace_id: str) -> None:
        self.state = ConflictState.EXPIRED
        self.expiry = {"reason_code": reason_code, "actor": actor, "reason": reason}
        self.lease = None

    def cancel(self, actor: str, reason: str, trace_id: str = "") -> None:
        """Withdraw the case; only while nothing of it can have reached a ship (§11.3)."""
        if self.state not in CANCELLABLE_STATES:
            raise ConflictRefused(ConflictRefusal.NOT_CANCELLABLE,
                                  f"a {self.state} conflict cannot be cancelled")
        _require_reason(reason)
        self._cancelled(actor, reason, trace_id)

    @event("Cancelled")
    def _cancelled(self, actor: str, reason: str, trace_id: str) -> None:
        self.state = ConflictState.CANCELLED
        self.cancellation = {"actor": actor, "reason": reason}

    def evidence_columns(self) -> dict[str, list[object]]:
        """Column name → a typed sample value: every business column any image of the
        evidence names, with the first non-null value seen (["null"] when every image has it
        null). The shore's rows are whole, and so is a ship's report of its row."""
        return columns_of(self.evidence)

    # -- keeping a case decidable --------------------------------------------------------

    def refresh_evidence(self, event_id: str, current_row: Image | None,
                         current_revision: str | None, actor: str, reason: str,
                         trace_id: str = "") -> bool:
        """Take the shore's row as it is now (read from its target) into new evidence, the
        ship's side as the latest evidence shows it, so a decision is no longer stale.
        False (nothing recorded) when the evidence already shows that revision and row."""
        if self.state not in DECIDABLE_STATES:
            raise ConflictRefused(ConflictRefusal.NOT_REFRESHABLE,
                                  f"the evidence of a {self.state} conflict is not refreshed")
        _require_reason(reason)
        latest = self.latest_evidence
        if (latest.get("current_revision") == current_revision
                and business(latest.get("current_row")) == business(current_row)):
            return False
        evidence = {**latest, "event_id": event_id, "source": "REFRESH",
                    "current_row": current_row, "current_revision": current_revision,
                    "captured_at": None}
        self._evidence_refreshed(evidence, actor, reason, trace_id)
        return True

    @event("EvidenceRefreshed")
    def _evidence_refreshed(self, evidence: dict[str, object], actor: str, reason: str,
                            trace_id: str) -> None:
        self.evidence.append(evidence)
        self.event_ids.add(str(evidence["event_id"]))

    def weighed(self, revision: str | None) -> bool:
        """Whether the case's evidence (or its decision) shows the record at this revision
        (None: without a row) on either side. Once decided, only the evidence the decision
        was made on counts: a change recorded after it is one the decision never weighed."""
        decision = self.decision or {}
        decided = decision.get("decided_revision")
        count = decision.get("evidence_count")
        evidence = self.evidence if count is None else self.evidence[:int(str(count))]
        if revision is None:
            return bool(decision.get("tombstone")) or any(
                item.get("current_row") is None or item.get("incoming_after") is None
                for item in evidence)
        return revision == decided or any(
            revision in (item.get("current_revision"), item.get("incoming_result_revision"),
                         item.get("incoming_base_revision"))
            for item in evidence)

    def check_retarget(self, node_id: str, local_revision: str | None) -> None:
        """Raise ConflictRefused unless `retarget` to this node would be accepted: the node
        reported another row than the decision expected, but one the case weighed."""
        ack = self.acks.get(node_id)
        if (self.state is not ConflictState.DISPATCHED or ack is None
                or ack["result"] != "COMMAND_CONFLICT_REPORTED"):
            raise ConflictRefused(ConflictRefusal.NOT_RETARGETABLE,
                                  "only a decision a node answered with its own row is sent"
                                  " again with that row expected")
        if int(self.dispatch_info.get("retargets", {}).get(node_id, 0)) >= RETARGET_LIMIT:
            raise ConflictRefused(ConflictRefusal.NOT_RETARGETABLE,
                                  "the node's row kept moving while the decision was sent")
        if not self.weighed(local_revision):
            raise ConflictRefused(ConflictRefusal.NOT_RETARGETABLE,
                                  "the node's row changed after the evidence")

    def retarget(self, node_id: str, command_id: str, local_revision: str | None, actor: str,
                 reason: str) -> None:
        """Send the decision again to a node whose row is one the case weighed, expecting
        that row (`local_revision`, None: no row) instead of the one the evidence showed for
        it: the node reached it meanwhile (a shore change it applied, say)."""
        self.check_retarget(node_id, local_revision)
        self._retargeted(node_id, command_id, local_revision, actor, reason)

    @event("Retargeted")
    def _retargeted(self, node_id: str, command_id: str, local_revision: str | None, actor: str,
                    reason: str) -> None:
        commands = [dict(c) for c in self.dispatch_info["commands"] if c["node_id"] != node_id]
        counts = dict(self.dispatch_info.get("retargets", {}))
        counts[node_id] = int(counts.get(node_id, 0)) + 1
        self.dispatch_info = {**self.dispatch_info, "retargets": counts,
                              "commands": [*commands, {"node_id": node_id,
                                                       "command_id": command_id}]}
        self.acks = {node: ack for node, ack in self.acks.items() if node != node_id}

    def retargets_to(self, node_id: str) -> int:
        return int(self.dispatch_info.get("retargets", {}).get(node_id, 0))


def check_replacement(columns: Mapping[str, list[object]],
                      replacement: list[list[object]]) -> None:
    """A replacement value names every evidence column once, each with that column's type
    (BIT with its length) or null. A column null everywhere in the evidence can only stay
    null: its type is unknown and is never guessed."""
    names = [str(pair[0]) for pair in replacement]
    if len(set(names)) != len(names) or set(names) != set(columns):
        missing = sorted(set(columns) - set(names))
        unknown = sorted(set(names) - set(columns))
        raise ConflictRefused(
            ConflictRefusal.REPLACEMENT_COLUMNS,
            f"a replacement names each column once (missing {len(missing)}, unknown"
            f" {len(unknown)}, repeated {len(names) - len(set(names))})")
    for name, value in replacement:
        sample = columns[str(name)]
        tag = _tag(value)
        if tag == "null":
            continue
        if tag != _tag(sample) or (tag == "bits" and _bits_length(value) != _bits_length(sample)):
            raise ConflictRefused(ConflictRefusal.REPLACEMENT_TYPE,
                                  f"column {name} takes {_tag(sample)} values, not {tag}")


def _bits_length(tagged: object) -> object:
    return tagged[1] if isinstance(tagged, list | tuple) and len(tagged) > 1 else None


def _require_reason(reason: str) -> None:
    if not reason.strip():
        raise ConflictRefused(ConflictRefusal.REASON_REQUIRED, "a reason is required")


def _text(raw: object) -> str | None:
    return None if raw is None else str(raw)


def _tag(tagged: object) -> str:
    return str(tagged[0]) if isinstance(tagged, list | tuple) and tagged else "?"


def conflict_evidence(event: ChangeEvent, current_row: Mapping[str, Value] | None,
                      current_revision: Revision | None) -> dict[str, object]:
    """What an arbiter needs to decide: both sides' images, revisions, rule version."""
    return {
        "event_id": str(event.event_id),
        "origin_node_id": event.origin_node_id,
        "operation": event.operation.value,
        "incoming_before": image_evidence(event.before),
        "incoming_after": image_evidence(event.after),
        # An UPDATE crosses the link as its key and the columns it changed.
        "incoming_complete": event.operation is not Operation.UPDATE,
        "incoming_base_revision": event.base_revision.text if event.base_revision else None,
        "incoming_result_revision": (
            event.result_revision.text if event.result_revision else None),
        "current_row": image_evidence(current_row),
        "current_revision": current_revision.text if current_revision else None,
        "rule_version": event.rule_version,
        "captured_at": event.captured_at.isoformat(),
    }
