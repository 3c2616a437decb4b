"""The conflict arbiter in `tidesync shore work` (§11.3–11.6).

It moves each active case along: DETECTED → AUTO_DECIDING (a lease other workers take over
when it runs out) → DECIDED by the rule's policy, or PENDING_MANUAL for a person; a DECIDED
case (automatic or manual) is applied on the shore with a compare-and-set on the revision the
decision saw, and sent as a ConflictDecision command to every node it concerns (DISPATCHED);
the ships' answers make it ACKNOWLEDGED, or EXPIRED when a ship's row moved on (DECISION_STALE),
in which case a new case opens from the ship's new evidence.

It also turns ships' reports that a shore change met another local revision
(COMMAND_CONFLICT_REPORTED) into evidence of the same case the uplink would open.

Which cases are due is kept in `active_conflict.due_at`, written in the same transaction as
each case event and compared with the arbiter's injected clock: it holds that clock's time plus
a delay, or `DUE_AT_ONCE` (the earliest time), never the database's now(). A crash between
steps only repeats the step (every step is idempotent: decision ids and command ids are
deterministic, the shore apply is guarded by the ledger).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import psycopg
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.conflict_capture import (
    ActiveConflicts,
    capture_conflict,
    decided_revision_statements,
)
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.conflicts import RevisionReader, RevisionUnavailable
from tidesync.apps.recorder import Statement
from tidesync.domain.actor import system_actor
from tidesync.domain.arbitration import Policy, PolicyName, arbitrate
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.clock import Clock
from tidesync.domain.conflict_case import (
    SUCCESSFUL_ACKS,
    ConflictCase,
    ConflictRefusal,
    ConflictRefused,
    ConflictState,
    DecisionSide,
    image_evidence,
    key_digest,
    rule_for_record,
)
from tidesync.domain.downlink_command import (
    CommandKind,
    DecisionPayload,
    NewCommand,
    RowChangePayload,
)
from tidesync.domain.evidence import decode_value
from tidesync.domain.rules.authorization import IMPLICIT_RULE_PREFIX
from tidesync.domain.rules.release import ReleasedRules
from tidesync.domain.values import Value
from tidesync.shore.conflicts import PostgresRecordKeys
from tidesync.shore.downlink import AckedCommand, DownlinkService
from tidesync.target.contract import TargetApplier, TargetOutcomeKind

log = logging.getLogger(__name__)

_UNKNOWN_CASE_RETRY_SECONDS = 300.0
"""A followed-up command naming a case that does not exist is looked at again this much later."""
_FAILED_RETRY_SECONDS = 30.0
"""A follow-up that failed unexpectedly is tried again this much later."""

ACTOR = system_actor("arbiter")
DECISION_NAMESPACE = uuid.UUID("0c6f3e51-8a2d-5b47-9e13-7d4a2b6c8f05")
RETARGET_NAMESPACE = uuid.UUID("5a8e2c71-0f3d-5b96-8c14-e2d7a9b3f460")
RETRY_LATER = dt.timedelta(minutes=1)

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass
class ArbiterSettings:
    shore_node_id: str
    policy_for: Callable[[str, str], Policy] = field(
        default=lambda database, table: Policy(PolicyName.MANUAL))
    """The policy of a table while no rule is released (`[conflicts].policies`)."""
    max_clock_skew: dt.timedelta = dt.timedelta(minutes=5)
    """LAST_WRITER_WINS of a released rule: capture and business times further apart than
    this go to a person (`conflicts.max_clock_skew_seconds`)."""
    lower_node_id_wins: bool = True
    """LAST_WRITER_WINS of a released rule with equal times (`conflicts.tie_break`)."""
    lease: dt.timedelta = dt.timedelta(seconds=60)
    manual_sla: dt.timedelta = dt.timedelta(hours=24)
    worker_id: str = field(default_factory=lambda: f"arbiter-{uuid.uuid4().hex[:8]}")
    batch: int = 50


class Arbiter:
    def __init__(self, conflicts: ConflictCasesApplication, downlink: DownlinkService, pool: Pool,
                 active: ActiveConflicts, revisions: RevisionReader, keys: PostgresRecordKeys,
                 decision_applier: Callable[[], TargetApplier],
                 target_nodes: Callable[[], Sequence[str]], settings: ArbiterSettings,
                 clock: Clock, rules: ReleasedRules | None = None) -> None:
        self.conflicts = conflicts
        self.downlink = downlink
        self.pool = pool
        self.active = active
        self.revisions = revisions
        self.keys = keys
        self._open_applier = decision_applier
        self._applier: TargetApplier | None = None
        self.target_nodes = target_nodes
        self.settings = settings
        self.clock = clock
        self.rules = rules
        """The released rule versions whose conflict policies decide their cases."""
        self._unknown_cases: set[uuid.UUID] = set()
        """Answered commands already reported as naming a case that does not exist."""
        self.follow_up_batch = 200
        self._held_back: dict[uuid.UUID, float] = {}
        """Commands whose follow-up failed, and when (monotonic) they are tried again: the
        ones answered after them are not held up behind them."""

    def close(self) -> None:
        if self._applier is not None:
            self._applier.close()
            self._applier = None

    def run_once(self) -> int:
        """Follow up the ships' answers, then advance the due cases; returns the work done."""
        return self.follow_up_acks() + self.advance_due_cases()

    # ------------------------------------------------------------------ due cases

    def advance_due_cases(self) -> int:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT conflict_id FROM active_conflict WHERE due_at <= %s"
                " ORDER BY due_at LIMIT %s", (self.clock(), self.settings.batch)).fetchall()
        done = 0
        for (conflict_id,) in rows:
            try:
                self.advance(uuid.UUID(str(conflict_id)))
            except IntegrityError:
                continue  # Another worker moved the case meanwhile; it is no longer due here.
            except Exception:
                log.exception("advancing conflict %s failed; retrying later", conflict_id)
                self._run([_due(uuid.UUID(str(conflict_id)), self.clock() + RETRY_LATER)])
                continue
            done += 1
        return done

    def advance(self, conflict_id: uuid.UUID) -> None:
        case = self.conflicts.get_case(conflict_id)
        if not case.is_active:
            self._run([_release(case.id)])
        elif case.state in (ConflictState.DETECTED, ConflictState.AUTO_DECIDING):
            self._decide_automatically(case)
        elif case.state is ConflictState.DECIDED:
            self.dispatch(case)
        else:
            self._run([_due(case.id, None)])

    def _decide_automatically(self, case: ConflictCase) -> None:
        now = self.clock()
        policy = self.policy_of(case)
        if policy.name is PolicyName.MANUAL:
            self._to_person(case, "POLICY_MANUAL", "the rule's policy is MANUAL", now)
            return
        until = now + self.settings.lease
        try:
            case.start_auto_decide(self.settings.worker_id, policy.name.value, now.isoformat(),
                                   until.isoformat(), ACTOR, f"policy {policy.name}")
        except ConflictRefused as refused:
            if refused.refusal is ConflictRefusal.LEASE_HELD:
                self._run([_due(case.id, _lease_end(case))])
                return
            raise
        self._save(case, [_due(case.id, until)])
        outcome = arbitrate(policy, case.latest_evidence, self.settings.shore_node_id, now)
        if outcome.side is None:
            self._to_person(case, outcome.reason_code, outcome.reason, now)
            return
        try:
            row, current = self.revisions.current_row(case)
        except RevisionUnavailable:
            log.warning("conflict %s: current revision unavailable; the lease will expire and "
                        "the decision is tried again", case.id)
            return
        decision_id = str(uuid.uuid5(DECISION_NAMESPACE, f"{case.id}\x1f{case.version}"))
        try:
            case.decide(decision_id, outcome.side, None, current, str(uuid.uuid4()),
                        f"policy:{policy.name}", outcome.reason, current_row=row)
        except ConflictRefused as refused:
            if refused.refusal is ConflictRefusal.SHIP_ROW_INCOMPLETE:
                self._to_person(case, refused.refusal.value, refused.message, now)
                return
            if refused.refusal is not ConflictRefusal.EVIDENCE_STALE:
                raise
            case.expire("EVIDENCE_STALE", ACTOR,
                        "the shore row changed after the evidence; the newer change decides")
            self._save(case, [_release(case.id)])
            return
        self._save(case, [_due(case.id, now), *decided_revision_statements(case)])
        log.info("conflict %s decided by policy %s (%s)", case.id, policy.name,
                 outcome.reason_code)
        self.dispatch(case)

    def policy_of(self, case: ConflictCase) -> Policy:
        """The policy of the case's rule version when the case names a released rule (its
        time column under the name the shore's row has); `[conflicts].policies` for a table's
        implicit rule. A named rule the shore cannot find leaves the case to a person."""
        if not case.rule_id.startswith(IMPLICIT_RULE_PREFIX):
            rule = (self.rules.released(case.rule_id, case.rule_version)
                    if self.rules is not None and case.rule_version is not None else None)
            if rule is None:
                return Policy(PolicyName.MANUAL)
            time_column = (rule.target_column(rule.conflict_time_column)
                           if rule.conflict_time_column else "")
            return Policy(rule.conflict_policy, time_column, self.settings.max_clock_skew,
                          self.settings.lower_node_id_wins)
        return self.settings.policy_for(case.database, case.table)

    def _to_person(self, case: ConflictCase, reason_code: str, reason: str,
                   now: dt.datetime) -> None:
        case.require_manual(reason_code, (now + self.settings.manual_sla).isoformat(), ACTOR,
                            reason)
        self._save(case, [_due(case.id, None)])

    def dispatch(self, case: ConflictCase) -> None:
        """Apply the decision on the shore, then queue it for every node it concerns."""
        decision = case.decision
        assert decision is not None
        record = self.keys.record_key(case)
        decided = Revision.parse(str(decision["decided_revision"]))
        expected_shore = _revision(decision.get("expected_revision"))
        values = _decoded(decision.get("decided_value"), record)
        shore_applied = False
        if decided != expected_shore:
            kind = self._apply_on_shore(case, record, values, expected_shore, decided)
            if kind is TargetOutcomeKind.CONFLICT:
                case.expire("DECISION_STALE", ACTOR,
                            "the shore row changed before the decision was applied")
                self._save(case, [_release(case.id)])
                return
            if kind is TargetOutcomeKind.REJECTED:
                self._run([_due(case.id, self.clock() + RETRY_LATER)])
                return
            shore_applied = kind is TargetOutcomeKind.APPLIED
        expectations = self._node_expectations(case, expected_shore, decided)
        payloads = {node: DecisionPayload(
            decision_id=uuid.UUID(str(decision["decision_id"])), conflict_id=case.id,
            rule_id=case.rule_id, rule_version=case.rule_version, record=record,
            expected_local_revision=expected, decided_value=values, decided_revision=decided,
            reason=str(decision.get("reason", ""))) for node, expected in expectations.items()}
        issued = self.downlink.issue([
            NewCommand(node_id=node, kind=CommandKind.CONFLICT_DECISION,
                       source_id=payload.decision_id, payload=payload, conflict_id=case.id,
                       actor=ACTOR, reason="conflict decision")
            for node, payload in sorted(payloads.items())])
        case.dispatch([{"node_id": c.node_id, "command_id": str(c.command_id)} for c in issued],
                      shore_applied, ACTOR, f"queued for {len(issued)} node(s)")
        self._save(case, [_release(case.id)] if not case.is_active else [_due(case.id, None)])

    def _apply_on_shore(self, case: ConflictCase, record: RecordKey,
                        values: Mapping[str, Value] | None, expected: Revision | None,
                        decided: Revision) -> TargetOutcomeKind:
        decision = case.decision
        assert decision is not None
        key = record.as_dict()
        if values is None:
            if expected is None:
                return TargetOutcomeKind.ALREADY_APPLIED  # Decided deleted, and it is absent.
            operation = Operation.DELETE
        else:
            operation = Operation.INSERT if expected is None else Operation.UPDATE
        origin = (str(case.latest_evidence.get("origin_node_id"))
                  if decision.get("side") == DecisionSide.SHIP.value
                  else self.settings.shore_node_id)
        event = ChangeEvent(
            event_id=uuid.UUID(str(decision["decision_id"])), origin_node_id=origin,
            source_connector_id="tidesync-arbiter", source_topic="conflict-decisions",
            source_partition=0, source_position=0, record=record, operation=operation,
            captured_at=self.clock(),
            before=key if operation is not Operation.INSERT else None,
            after=None if values is None else {**values, **key},
            base_revision=expected, result_revision=decided, rule_version=case.rule_version)
        if self._applier is None:
            self._applier = self._open_applier()
        outcome = self._applier.apply_chunk([event])[0]
        if outcome.kind is TargetOutcomeKind.REJECTED:
            log.error("conflict %s: the decision cannot be applied on the shore (%s)", case.id,
                      outcome.reason_code)
        return outcome.kind

    def _node_expectations(self, case: ConflictCase, expected_shore: Revision | None,
                           decided: Revision) -> dict[str, Revision | None]:
        """Each concerned node and the revision its row should have now: a reporting node's
        own revision from its latest evidence (none when that shows the row deleted there);
        every other target node the shore's revision before the decision (they are sent
        nothing when the shore's version won)."""
        expectations: dict[str, Revision | None] = {}
        for evidence in case.evidence:
            node = str(evidence.get("origin_node_id") or "")
            if node and node != self.settings.shore_node_id:
                expectations[node] = (None if evidence.get("incoming_after") is None
                                      else _revision(evidence.get("incoming_result_revision")))
        if decided != expected_shore:
            for node in self.target_nodes():
                expectations.setdefault(node, expected_shore)
        return expectations

    # ------------------------------------------------------------------ answers

    def follow_up_acks(self) -> int:
        now = time.monotonic()
        self._held_back = {command: at for command, at in self._held_back.items() if at > now}
        acked = self.downlink.pending_follow_ups(self.follow_up_batch, list(self._held_back))
        done = []
        for command in acked:
            try:
                if command.kind is CommandKind.CONFLICT_DECISION:
                    self._decision_answered(command)
                elif command.result == "COMMAND_CONFLICT_REPORTED":
                    self._row_change_conflicted(command)
            except IntegrityError:
                continue  # The case moved meanwhile: the next round reads it again.
            except AggregateNotFoundError as error:
                # Stays pending (followed up once what it names exists), reported once.
                if command.command_id not in self._unknown_cases:
                    self._unknown_cases.add(command.command_id)
                    log.error("following up command %s: %s does not exist; it stays pending",
                              command.command_id, error)
                self._held_back[command.command_id] = now + _UNKNOWN_CASE_RETRY_SECONDS
                continue
            except Exception:
                log.exception("following up command %s failed; trying again later",
                              command.command_id)
                self._held_back[command.command_id] = now + _FAILED_RETRY_SECONDS
                continue
            done.append(command.command_id)
        if done:
            self.downlink.mark_followed_up(done)
        return len(done)

    def _row_change_conflicted(self, command: AckedCommand) -> None:
        payload = command.payload
        assert isinstance(payload, RowChangePayload)
        record = payload.record
        key = record.as_dict()
        deleted = payload.operation is Operation.DELETE
        shore_image = None if deleted else {**dict(payload.values or {}), **key}
        shore_revision = None if deleted else payload.result_revision
        self._capture_report(command, record, shore_image, shore_revision,
                             "a shore change met another revision on the ship")

    def _decision_answered(self, command: AckedCommand) -> None:
        payload = command.payload
        assert isinstance(payload, DecisionPayload)
        case = self.conflicts.get_case(payload.conflict_id)
        actor = f"node:{command.node_id}"
        if command.result in SUCCESSFUL_ACKS:
            done = case.record_ack(command.node_id, str(command.command_id), command.result,
                                   command.reason_code, actor, "decision applied")
            self._save(case, [_release(case.id)] if done else [])
            return
        case.record_ack(command.node_id, str(command.command_id), command.result,
                        command.reason_code, actor, "decision not applied")
        if command.result == "COMMAND_CONFLICT_REPORTED" and self._retarget(case, command,
                                                                           payload):
            return
        if command.result != "COMMAND_CONFLICT_REPORTED":
            log.error("conflict %s: node %s refused the decision (%s); once its cause is fixed,"
                      " `tidesync conflicts redispatch` sends it again", case.id,
                      command.node_id, command.reason_code)
            self._save(case, [])
            return
        if case.state is ConflictState.DISPATCHED:
            case.expire("DECISION_STALE", actor,
                        "the ship's row changed before the decision reached it")
        self._save(case, [_release(case.id)])
        decided = payload.decided_value
        shore_image = None if decided is None else {**dict(decided), **payload.record.as_dict()}
        # A deleting decision leaves the shore without a row, and so without a revision.
        self._capture_report(command, payload.record, shore_image,
                             None if decided is None else payload.decided_revision,
                             "a decision met a newer revision on the ship",
                             rule=(case.rule_id, case.rule_version))

    def _retarget(self, case: ConflictCase, command: AckedCommand,
                  payload: DecisionPayload) -> bool:
        """A node that answered a decision with a row the case weighed (a revision of the
        evidence, or no row where the evidence shows none) gets the same decision again,
        expecting that row; True when it was sent. Any other row is a newer change."""
        local = (command.local_revision if command.row_exists else None)
        local_text = None if local is None else local.text
        try:
            case.check_retarget(command.node_id, local_text)
        except ConflictRefused:
            return False
        source_id = uuid.uuid5(RETARGET_NAMESPACE, f"{case.id}\x1f{command.node_id}\x1f"
                                                   f"{case.retargets_to(command.node_id)}")
        new = NewCommand(node_id=command.node_id, kind=CommandKind.CONFLICT_DECISION,
                         source_id=source_id,
                         payload=dataclasses.replace(payload, expected_local_revision=local),
                         conflict_id=case.id, actor=ACTOR,
                         reason="conflict decision, expecting the node's reported row")
        (issued,) = self.downlink.issue([new])
        case.retarget(command.node_id, str(issued.command_id), local_text, ACTOR,
                      "the node holds a row the decision weighed: sent again expecting it")
        self._save(case, [])
        log.info("conflict %s: decision sent to %s again, expecting its reported row",
                 case.id, command.node_id)
        return True

    def _capture_report(self, command: AckedCommand, record: RecordKey,
                        shore_image: Mapping[str, Value] | None,
                        shore_revision: Revision | None, reason: str,
                        rule: tuple[str, int | None] | None = None) -> None:
        """Open or join the case of a ship's report; `rule`: the rule (id, version) of the
        case the report answers, else the table's implicit rule."""
        rule_id = rule_for_record(record, rule[0] if rule else None)
        rule_version = rule[1] if rule else None
        ship_image = ({**dict(command.current_row or {}), **record.as_dict()}
                      if command.row_exists else None)
        evidence: dict[str, object] = {
            "event_id": str(command.command_id),
            "source": "COMMAND_ACK",
            "origin_node_id": command.node_id,
            "operation": "REPORTED",
            "incoming_before": None,
            "incoming_after": image_evidence(ship_image),
            "incoming_complete": True,  # a ship reports its whole row
            "incoming_base_revision": None,
            "incoming_result_revision": (
                command.local_revision.text if command.local_revision else None),
            "current_row": image_evidence(shore_image),
            "current_revision": shore_revision.text if shore_revision else None,
            "rule_version": rule_version,
            "captured_at": None,
        }
        conflict_id, recorded = capture_conflict(
            self.conflicts, self.active, rule_id=rule_id,
            digest=key_digest(rule_id, record.canonical()), database=record.database,
            table=record.table, rule_version=rule_version,
            current=shore_revision, incoming=command.local_revision, evidence=evidence,
            actor=f"node:{command.node_id}", reason=reason)
        if not recorded:
            log.info("report of command %s concerns conflict %s, settled since",
                     command.command_id, conflict_id)

    # ------------------------------------------------------------------ storage

    def _save(self, case: ConflictCase, statements: list[Statement]) -> None:
        self.conflicts.save(case, extra_statements=statements)

    def _run(self, statements: Sequence[Statement]) -> None:
        with self.pool.connection() as conn:
            for sql, params in statements:
                conn.execute(sql.encode(), params)


def _due(conflict_id: uuid.UUID, when: dt.datetime | None) -> Statement:
    return ("UPDATE active_conflict SET due_at = %s WHERE conflict_id = %s", (when, conflict_id))


def _release(conflict_id: uuid.UUID) -> Statement:
    return ("DELETE FROM active_conflict WHERE conflict_id = %s", (conflict_id,))


def _lease_end(case: ConflictCase) -> dt.datetime:
    return dt.datetime.fromisoformat(str((case.lease or {}).get("until")))


def _revision(text: object) -> Revision | None:
    return None if text is None else Revision.parse(str(text))


def _decoded(tagged_row: object, record: RecordKey) -> dict[str, Value] | None:
    """A decided value's non-key business columns, decoded (None: the decision deletes)."""
    if tagged_row is None:
        return None
    assert isinstance(tagged_row, list | tuple)
    key = record.as_dict()
    return {str(name): decode_value(tagged) for name, tagged in tagged_row if str(name) not in key}
