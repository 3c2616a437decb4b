"""Conflict commands (§11.5, §11.3): decide (shore, ship or a full replacement value, with
reason; refused when the record changed since the evidence), refresh the evidence from the
shore's row, cancel, and send a decision a ship rejected to it again."""

from __future__ import annotations

import strawberry

from tidesync.apps.conflicts import (
    ConflictCommandError,
    ConflictOutcome,
    Decision,
    replacement_from_text,
)
from tidesync.domain.conflict_case import ConflictRefused, DecisionSide
from tidesync.graphql.common import WritePosition, mutation
from tidesync.graphql.conflicts.queries import parse_conflict_id
from tidesync.graphql.conflicts.types import (
    CancelConflictResult,
    ConflictCancelled,
    ConflictDecided,
    ConflictError,
    ConflictErrorCode,
    ConflictEvidenceRefreshed,
    ConflictRedispatched,
    DecideConflictResult,
    RedispatchConflictResult,
    RefreshConflictEvidenceResult,
)
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import (
    CanCancelConflicts,
    CanDecideConflicts,
    CanRedispatchConflicts,
    allow,
)
from tidesync.graphql.positions import Position
from tidesync.graphql.threads import blocking


@strawberry.input(description="One column of a replacement value: its text in the column's "
                              "type (as the evidence shows it), or null for NULL.")
class ColumnValueInput:
    column: str
    value: str | None = None


@strawberry.input
class DecideConflictInput:
    conflict_id: strawberry.ID
    side: DecisionSide
    reason: str
    replacement: list[ColumnValueInput] | None = strawberry.field(
        default=None, description="Every column of `replacementColumns`, for REPLACEMENT.")
    expected_version: int | None = strawberry.field(
        default=None, description="The case version you looked at; refused if it moved on.")
    decision_key: str | None = strawberry.field(
        default=None, description="Idempotency key: a retry with the same key answers with "
                                  "the decision already recorded.")


@strawberry.input
class RefreshConflictEvidenceInput:
    conflict_id: strawberry.ID
    reason: str
    expected_version: int | None = None


@strawberry.input
class CancelConflictInput:
    conflict_id: strawberry.ID
    reason: str
    expected_version: int | None = None


@strawberry.input
class RedispatchConflictInput:
    conflict_id: strawberry.ID
    node_id: str = strawberry.field(description="The node that rejected the decision.")
    reason: str
    expected_version: int | None = None


@strawberry.type
class ConflictMutations:
    @mutation(extensions=allow(CanDecideConflicts),
              description="Decide a conflict; the current revision is checked against the "
                          "evidence first.")
    async def decide_conflict(self, info: Info, input: DecideConflictInput) -> DecideConflictResult:
        context = info.context
        conflict_id = parse_conflict_id(str(input.conflict_id))
        if conflict_id is None:
            return _error(input.conflict_id, ConflictErrorCode.NOT_FOUND, "no such conflict")
        if input.decision_key is not None and not 1 <= len(input.decision_key) <= 200:
            return _error(input.conflict_id, ConflictErrorCode.INVALID_VALUE,
                          "decisionKey must be 1..200 characters")

        def run() -> ConflictOutcome:
            service = context.console.conflict_service()
            replacement = None
            if input.replacement is not None:
                replacement = replacement_from_text(
                    service.case(conflict_id),
                    [(item.column, item.value) for item in input.replacement])
            return service.decide(Decision(
                conflict_id=conflict_id, side=input.side, reason=input.reason,
                actor=context.actor, replacement=replacement,
                expected_version=input.expected_version, decision_key=input.decision_key,
                trace_id=context.trace_id))

        try:
            outcome = await blocking(run)
        except (ConflictRefused, ConflictCommandError) as error:
            return _refusal(input.conflict_id, error)
        return ConflictDecided(
            conflict_id=strawberry.ID(str(outcome.conflict_id)),
            decision_id=strawberry.ID(str(outcome.decision_id)), state=outcome.state,
            version=outcome.version, position=_position(outcome))

    @mutation(extensions=allow(CanDecideConflicts),
              description="Read the shore's row again and make it the conflict's newest "
                          "evidence, so a decision refused as EVIDENCE_STALE can be made.")
    async def refresh_conflict_evidence(self, info: Info, input: RefreshConflictEvidenceInput
                                        ) -> RefreshConflictEvidenceResult:
        context = info.context
        conflict_id = parse_conflict_id(str(input.conflict_id))
        if conflict_id is None:
            return _error(input.conflict_id, ConflictErrorCode.NOT_FOUND, "no such conflict")

        def run() -> ConflictOutcome:
            return context.console.conflict_service().refresh(
                conflict_id, context.actor, input.reason, input.expected_version,
                context.trace_id)

        try:
            outcome = await blocking(run)
        except (ConflictRefused, ConflictCommandError) as error:
            return _refusal(input.conflict_id, error)
        return ConflictEvidenceRefreshed(
            conflict_id=strawberry.ID(str(outcome.conflict_id)), refreshed=outcome.recorded,
            state=outcome.state, version=outcome.version, position=_position(outcome))

    @mutation(extensions=allow(CanCancelConflicts),
              description="Cancel a conflict that has had no business effect yet.")
    async def cancel_conflict(self, info: Info, input: CancelConflictInput) -> CancelConflictResult:
        context = info.context
        conflict_id = parse_conflict_id(str(input.conflict_id))
        if conflict_id is None:
            return _error(input.conflict_id, ConflictErrorCode.NOT_FOUND, "no such conflict")

        def run() -> ConflictOutcome:
            return context.console.conflict_service().cancel(
                conflict_id, context.actor, input.reason, input.expected_version,
                context.trace_id)

        try:
            outcome = await blocking(run)
        except (ConflictRefused, ConflictCommandError) as error:
            return _refusal(input.conflict_id, error)
        return ConflictCancelled(conflict_id=strawberry.ID(str(outcome.conflict_id)),
                                 state=outcome.state, version=outcome.version,
                                 position=_position(outcome))


    @mutation(extensions=allow(CanRedispatchConflicts),
              description="Send a dispatched decision again to a node that rejected it (once "
                          "the cause is fixed there): the same decision, as a new command.")
    async def redispatch_conflict(self, info: Info, input: RedispatchConflictInput
                                  ) -> RedispatchConflictResult:
        context = info.context
        conflict_id = parse_conflict_id(str(input.conflict_id))
        if conflict_id is None:
            return _error(input.conflict_id, ConflictErrorCode.NOT_FOUND, "no such conflict")

        def run() -> ConflictOutcome:
            console = context.console
            return console.conflict_service().redispatch(
                conflict_id, input.node_id[:200], context.actor, input.reason,
                console.downlink_service(), input.expected_version, context.trace_id)

        try:
            outcome = await blocking(run)
        except (ConflictRefused, ConflictCommandError) as error:
            return _refusal(input.conflict_id, error)
        return ConflictRedispatched(conflict_id=strawberry.ID(str(outcome.conflict_id)),
                                    node_id=input.node_id, state=outcome.state,
                                    version=outcome.version, position=_position(outcome))


def _refusal(conflict_id: strawberry.ID,
             error: ConflictRefused | ConflictCommandError) -> ConflictError:
    code = ConflictErrorCode(str(getattr(error.code, "value", error.code)))
    return _error(conflict_id, code, error.message)


def _error(conflict_id: strawberry.ID, code: ConflictErrorCode, message: str) -> ConflictError:
    return ConflictError(code=code, message=message, conflict_id=conflict_id)


def _position(outcome: ConflictOutcome) -> WritePosition:
    return WritePosition.of(Position("conflict_cases", outcome.position))
