"""Conflict types: the conflict center row, and one case with its evidence side by side.

Evidence values are type-tagged and exact; they are shown as display text to roles that may
see them, and as digests (same digest, same value within one case and column) to all.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Callable
from typing import Annotated

import strawberry

from tidesync.domain.conflict_case import (
    CANCELLABLE_STATES,
    DECIDABLE_STATES,
    ConflictCase,
    ConflictState,
    DecisionSide,
    is_sync_column,
)
from tidesync.domain.evidence import display_text, value_tag
from tidesync.graphql.common import JSON, Long, WritePosition, field
from tidesync.graphql.conflicts.loaders import ConflictRow
from tidesync.graphql.conflicts.permissions import CanSeeEvidenceValue, value_visible
from tidesync.graphql.context import Info
from tidesync.graphql.digests import Digests
from tidesync.graphql.permissions import allow

strawberry.enum(ConflictState, name="ConflictState")
strawberry.enum(DecisionSide, name="DecisionSide")

READ_EVIDENCE = "read_conflict_evidence"

Sensitivity = Callable[[str, str, str], bool]
"""(database, table, column) → whether the column's values are sensitive."""


@strawberry.type(description="One value of a row image: its type, whether it is NULL, a "
                             "digest, and (for roles that may see it) its display text.")
class EvidenceValue:
    column: str
    type: str
    is_null: bool
    digest: str
    tagged: strawberry.Private[list[object]]
    sensitive: strawberry.Private[bool]
    scope: strawberry.Private[str]

    @field(extensions=allow(CanSeeEvidenceValue, hide=True),
           description="The value as text (decimals exact, datetimes ISO-8601 UTC, bytes "
                       "base64); null when NULL or not shown to your role. Showing values is "
                       "recorded as an operator action.")
    async def value(self, info: Info) -> str | None:
        await info.context.audit_read(READ_EVIDENCE, self.scope)
        return display_text(self.tagged)

    @field(description="Whether `value` is withheld from your role.")
    def masked(self, info: Info) -> bool:
        return not value_visible(info.context.principal, self.sensitive)

    @classmethod
    def of(cls, scope: str, column: str, tagged: list[object], sensitive: bool,
           digests: Digests) -> EvidenceValue:
        return cls(column=column, type=value_tag(tagged), is_null=value_tag(tagged) == "null",
                   digest=digests.evidence(scope, column, tagged), tagged=tagged,
                   sensitive=sensitive, scope=scope)


@strawberry.type(description="One column side by side: the shore's row and the ship's images.")
class ColumnComparison:
    column: str
    shore: EvidenceValue | None
    ship: EvidenceValue | None
    ship_before: EvidenceValue | None
    differs: bool | None = strawberry.field(
        description="Whether the ship's change sets another value than the shore row has "
                    "(null when the change does not carry the column).")


@strawberry.type(description="One conflicting change and the shore row it met.")
class Evidence:
    index: int
    event_id: strawberry.ID
    origin_node_id: str
    operation: str
    incoming_base_revision: str | None
    incoming_result_revision: str | None
    current_revision: str | None
    rule_version: int | None
    captured_at: str
    shore_row_exists: bool
    columns: list[ColumnComparison]


@strawberry.type(description="A column a replacement value must name, with its value type.")
class ReplacementColumn:
    column: str
    type: str


@strawberry.type(description="The recorded decision (immutable).")
class ConflictDecision:
    decision_id: strawberry.ID
    side: str
    tombstone: bool
    decided_revision: str | None
    expected_revision: str | None
    evidence_count: int
    actor: str
    reason: str
    decided_value: list[EvidenceValue] | None


@strawberry.type
class ConflictCancellation:
    actor: str
    reason: str


@strawberry.type(description="An automatic decision in progress: the worker holding the "
                             "lease, the policy it applies, and until when.")
class ConflictLease:
    owner: str
    policy: str
    until: str
    taken_over_from: str | None


@strawberry.type(description="Why the case waits for a person and when waiting longer "
                             "breaches its SLA.")
class ConflictManual:
    reason_code: str
    sla_due: dt.datetime | None = strawberry.field(
        description="null when the recorded due time is not a time.")


@strawberry.type(description="One downlink command a decision went out as.")
class DispatchedCommand:
    node_id: str
    command_id: strawberry.ID


@strawberry.type(description="Where the decision went: the commands queued for each node and "
                             "whether it was applied on the shore.")
class ConflictDispatch:
    commands: list[DispatchedCommand]
    shore_applied: bool


@strawberry.type(description="A node's answer to the decision's command.")
class ConflictNodeAck:
    node_id: str
    command_id: strawberry.ID
    result: str
    reason_code: str


@strawberry.type(description="Why the case expired, and who recorded it.")
class ConflictExpiry:
    reason_code: str
    actor: str
    reason: str


@strawberry.type(name="Conflict", description="A conflict case as its stream records it.")
class ConflictDetail:
    id: strawberry.ID
    state: str
    version: int
    rule_id: str
    rule_version: int | None
    key_digest: str
    database: str
    table: str
    decidable: bool
    cancellable: bool
    evidence: list[Evidence]
    comparison: list[ColumnComparison]
    replacement_columns: list[ReplacementColumn]
    decision: ConflictDecision | None
    cancellation: ConflictCancellation | None
    lease: ConflictLease | None
    manual: ConflictManual | None
    dispatch: ConflictDispatch | None
    acks: list[ConflictNodeAck] = strawberry.field(
        description="Each node's answer to the dispatched decision, by node id.")
    expiry: ConflictExpiry | None

    @classmethod
    def from_case(cls, case: ConflictCase, sensitive: Sensitivity,
                  digests: Digests) -> ConflictDetail:
        def is_sensitive(column: str) -> bool:
            return sensitive(case.database, case.table, column)

        scope = str(case.id)
        evidence = [_evidence(scope, i, raw, is_sensitive, digests)
                    for i, raw in enumerate(case.evidence)]
        return cls(
            id=strawberry.ID(scope), state=case.state.value, version=case.version,
            rule_id=case.rule_id, rule_version=case.rule_version,
            key_digest=digests.record_key(case.key_digest),
            database=case.database, table=case.table,
            decidable=case.state in DECIDABLE_STATES,
            cancellable=case.state in CANCELLABLE_STATES,
            evidence=evidence, comparison=evidence[-1].columns if evidence else [],
            replacement_columns=[ReplacementColumn(column=name, type=value_tag(sample))
                                 for name, sample in case.evidence_columns().items()],
            decision=_decision(scope, case.decision, is_sensitive, digests),
            cancellation=None if case.cancellation is None else ConflictCancellation(
                actor=str(case.cancellation["actor"]), reason=str(case.cancellation["reason"])),
            lease=_lease(case), manual=_manual(case), dispatch=_dispatch(case),
            acks=_acks(case), expiry=_expiry(case),
        )


# The arbitration facts (§11.3): cases recorded before these existed have none of them.


def _lease(case: ConflictCase) -> ConflictLease | None:
    lease = getattr(case, "lease", None)
    if not lease:
        return None
    return ConflictLease(owner=str(lease.get("owner")), policy=str(lease.get("policy")),
                         until=str(lease.get("until")),
                         taken_over_from=_text(lease.get("taken_over_from")))


def _manual(case: ConflictCase) -> ConflictManual | None:
    manual = getattr(case, "manual", None)
    if not manual:
        return None
    return ConflictManual(reason_code=str(manual.get("reason_code")),
                          sla_due=_moment(manual.get("sla_due")))


def _dispatch(case: ConflictCase) -> ConflictDispatch | None:
    dispatch = getattr(case, "dispatch_info", None)
    if not dispatch:
        return None
    return ConflictDispatch(
        commands=[DispatchedCommand(node_id=str(command.get("node_id")),
                                    command_id=strawberry.ID(str(command.get("command_id"))))
                  for command in dispatch.get("commands", [])],
        shore_applied=bool(dispatch.get("shore_applied")))


def _acks(case: ConflictCase) -> list[ConflictNodeAck]:
    acks = getattr(case, "acks", None) or {}
    return [ConflictNodeAck(node_id=str(node_id),
                            command_id=strawberry.ID(str(ack.get("command_id"))),
                            result=str(ack.get("result")),
                            reason_code=str(ack.get("reason_code") or ""))
            for node_id, ack in sorted(acks.items())]


def _expiry(case: ConflictCase) -> ConflictExpiry | None:
    expiry = getattr(case, "expiry", None)
    if not expiry:
        return None
    return ConflictExpiry(reason_code=str(expiry.get("reason_code")),
                          actor=str(expiry.get("actor")), reason=str(expiry.get("reason")))


def _moment(raw: object) -> dt.datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        return None
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment


def _image(raw: object) -> dict[str, list[object]] | None:
    if not isinstance(raw, list):
        return None
    return {str(pair[0]): list(pair[1]) for pair in raw}


def _evidence(scope: str, index: int, raw: dict[str, object],
              sensitive: Callable[[str], bool], digests: Digests) -> Evidence:
    shore, ship, before = (_image(raw.get(name))
                           for name in ("current_row", "incoming_after", "incoming_before"))
    names = [name for name in dict.fromkeys([*(shore or {}), *(ship or {}), *(before or {})])
             if not is_sync_column(name)]

    def value(image: dict[str, list[object]] | None, name: str) -> EvidenceValue | None:
        if image is None or name not in image:
            return None
        return EvidenceValue.of(scope, name, image[name], sensitive(name), digests)

    columns = [ColumnComparison(
        column=name, shore=value(shore, name), ship=value(ship, name),
        ship_before=value(before, name), differs=_differs(shore, ship, name))
        for name in names]
    return Evidence(
        index=index, event_id=strawberry.ID(str(raw.get("event_id"))),
        origin_node_id=str(raw.get("origin_node_id")), operation=str(raw.get("operation")),
        incoming_base_revision=_text(raw.get("incoming_base_revision")),
        incoming_result_revision=_text(raw.get("incoming_result_revision")),
        current_revision=_text(raw.get("current_revision")),
        rule_version=_int(raw.get("rule_version")), captured_at=str(raw.get("captured_at")),
        shore_row_exists=shore is not None, columns=columns,
    )


def _differs(shore: dict[str, list[object]] | None, ship: dict[str, list[object]] | None,
             name: str) -> bool | None:
    """Whether the ship's change sets the column to another value than the shore's row has;
    None when the change does not carry the column."""
    if ship is None or name not in ship:
        return None if ship is not None else shore is not None
    return shore is None or shore.get(name) != ship[name]


def _decision(scope: str, raw: dict[str, object] | None,
              sensitive: Callable[[str], bool], digests: Digests) -> ConflictDecision | None:
    if raw is None:
        return None
    image = _image(raw.get("decided_value"))
    return ConflictDecision(
        decision_id=strawberry.ID(str(raw["decision_id"])), side=str(raw["side"]),
        tombstone=bool(raw["tombstone"]), decided_revision=_text(raw.get("decided_revision")),
        expected_revision=_text(raw.get("expected_revision")),
        evidence_count=int(str(raw["evidence_count"])), actor=str(raw["actor"]),
        reason=str(raw["reason"]),
        decided_value=None if image is None else [
            EvidenceValue.of(scope, name, tagged, sensitive(name), digests)
            for name, tagged in image.items()],
    )


def _text(raw: object) -> str | None:
    return None if raw is None else str(raw)


def _int(raw: object) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


@strawberry.type(description="A conflict as the conflict center lists it (no values).")
class ConflictSummary:
    conflict_id: strawberry.ID
    rule_id: str
    key_digest: str
    database: str
    table: str
    state: str
    opened_at: dt.datetime
    updated_at: dt.datetime
    evidence_count: int
    node_ids: list[str]
    sla_due_at: dt.datetime
    summary: JSON
    version: Long
    rule_version: int | None

    @field(description="The case with its evidence, from its stream.")
    async def detail(self, info: Info) -> ConflictDetail | None:
        case = await info.context.loaders.conflict_case.load(uuid.UUID(str(self.conflict_id)))
        if case is None:
            return None
        console = info.context.console
        return ConflictDetail.from_case(case, console.sensitive_column, console.digests())

    @classmethod
    def from_row(cls, row: ConflictRow, digests: Digests) -> ConflictSummary:
        return cls(
            conflict_id=strawberry.ID(str(row.conflict_id)), rule_id=row.rule_id,
            key_digest=digests.record_key(row.key_digest), database=row.database,
            table=row.table_name,
            state=row.state, opened_at=row.opened_at, updated_at=row.updated_at,
            evidence_count=row.evidence_count, node_ids=list(row.node_ids),
            sla_due_at=row.sla_due_at, summary=JSON(row.summary), version=Long(row.version),
            rule_version=row.rule_version,
        )


@strawberry.enum
class ConflictErrorCode(enum.Enum):
    NOT_FOUND = "NOT_FOUND"
    CASE_CHANGED = "CASE_CHANGED"
    REVISION_UNAVAILABLE = "REVISION_UNAVAILABLE"
    NOT_DECIDABLE = "NOT_DECIDABLE"
    NOT_CANCELLABLE = "NOT_CANCELLABLE"
    REASON_REQUIRED = "REASON_REQUIRED"
    EVIDENCE_STALE = "EVIDENCE_STALE"
    REPLACEMENT_REQUIRED = "REPLACEMENT_REQUIRED"
    REPLACEMENT_UNEXPECTED = "REPLACEMENT_UNEXPECTED"
    REPLACEMENT_COLUMNS = "REPLACEMENT_COLUMNS"
    REPLACEMENT_TYPE = "REPLACEMENT_TYPE"
    INVALID_VALUE = "INVALID_VALUE"
    NOT_REDISPATCHABLE = "NOT_REDISPATCHABLE"
    NOT_REFRESHABLE = "NOT_REFRESHABLE"
    SHIP_ROW_INCOMPLETE = "SHIP_ROW_INCOMPLETE"
    NOT_AUTO_DECIDABLE = "NOT_AUTO_DECIDABLE"
    LEASE_HELD = "LEASE_HELD"


@strawberry.type(description="A conflict command that was refused, and why.")
class ConflictError:
    code: ConflictErrorCode
    message: str
    conflict_id: strawberry.ID


@strawberry.type(description="The decision is recorded.")
class ConflictDecided:
    conflict_id: strawberry.ID
    decision_id: strawberry.ID
    state: str
    version: int
    position: WritePosition


@strawberry.type(description="The conflict is cancelled; its record key may open a new one.")
class ConflictCancelled:
    conflict_id: strawberry.ID
    state: str
    version: int
    position: WritePosition


@strawberry.type(description="The decision went to the node again as a new command; the "
                              "node's answer is awaited again.")
class ConflictRedispatched:
    conflict_id: strawberry.ID
    node_id: str
    state: str
    version: int
    position: WritePosition


@strawberry.type(description="The shore's row as it is now is the conflict's newest evidence "
                              "(`refreshed` false: the evidence already showed it).")
class ConflictEvidenceRefreshed:
    conflict_id: strawberry.ID
    refreshed: bool
    state: str
    version: int
    position: WritePosition


DecideConflictResult = Annotated[ConflictDecided | ConflictError,
                                 strawberry.union("DecideConflictResult")]
CancelConflictResult = Annotated[ConflictCancelled | ConflictError,
                                 strawberry.union("CancelConflictResult")]
RedispatchConflictResult = Annotated[ConflictRedispatched | ConflictError,
                                     strawberry.union("RedispatchConflictResult")]
RefreshConflictEvidenceResult = Annotated[ConflictEvidenceRefreshed | ConflictError,
                                          strawberry.union("RefreshConflictEvidenceResult")]
