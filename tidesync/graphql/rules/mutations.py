"""Rule release commands (§8.2): draft a version from a rule file's TOML text, validate,
approve, publish and roll back, each recorded with the user and the reason."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import strawberry
from eventsourcing.persistence import PersistenceError

from tidesync.apps.rules import RuleReleasesApplication, rule_from_toml
from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.domain.rules.release import ReleaseRefused, ReleaseStatus
from tidesync.domain.rules.sync_rule import RuleError as InvalidRule
from tidesync.graphql.common import WritePosition, mutation
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import allow
from tidesync.graphql.positions import Position
from tidesync.graphql.rules.permissions import CanApproveRules, CanAuthorRules, CanPublishRules
from tidesync.graphql.rules.types import (
    RollbackRuleResult,
    RuleCommandResult,
    RuleError,
    RuleErrorCode,
    RuleReleaseChanged,
    RuleRolledBack,
)
from tidesync.graphql.threads import blocking


@strawberry.input
class DraftRuleInput:
    document: str = strawberry.field(description="The rule file's TOML text (at most 64 KiB).")
    reason: str


@strawberry.input
class ValidateRuleInput:
    rule_id: str
    version: int
    reason: str
    static: bool = strawberry.field(
        default=False, description="Check only the rule itself, not the shore's table.")


@strawberry.input
class RuleVersionInput:
    rule_id: str
    version: int
    reason: str


@strawberry.input
class RollbackRuleInput:
    rule_id: str
    reason: str


Command = Callable[[RuleReleasesApplication], tuple[int, list[str]]]


@strawberry.type
class RuleMutations:
    @mutation(extensions=allow(CanAuthorRules),
              description="Store a rule file as the next version of its rule (DRAFT).")
    async def draft_rule(self, info: Info, input: DraftRuleInput) -> RuleCommandResult:
        context = info.context

        def run(app: RuleReleasesApplication) -> tuple[int, list[str]]:
            rule = app.draft(rule_from_toml(input.document), context.actor, input.reason,
                             context.trace_id)
            return rule.version, []

        rule_id = _rule_id_of(input.document)
        return await _command(info, rule_id, input.reason, run)

    @mutation(extensions=allow(CanAuthorRules),
              description="Check a DRAFT version against itself and the shore's table: "
                          "VALIDATED without problems, else it stays DRAFT with them.")
    async def validate_rule(self, info: Info, input: ValidateRuleInput) -> RuleCommandResult:
        context = info.context
        opener = None if input.static else context.console.stores.rule_schemas

        def run(app: RuleReleasesApplication) -> tuple[int, list[str]]:
            with contextlib.ExitStack() as stack:
                schema = None if opener is None else stack.enter_context(opener())
                problems = app.validate(input.rule_id, input.version, context.actor,
                                        input.reason, schema, context.trace_id)
            return input.version, problems

        return await _command(info, input.rule_id, input.reason, run)

    @mutation(extensions=allow(CanApproveRules),
              description="Approve a VALIDATED version (with four-eyes approval, only someone "
                          "other than its author may).")
    async def approve_rule(self, info: Info, input: RuleVersionInput) -> RuleCommandResult:
        context = info.context

        def run(app: RuleReleasesApplication) -> tuple[int, list[str]]:
            app.approve(input.rule_id, input.version, context.actor, input.reason,
                        context.trace_id)
            return input.version, []

        return await _command(info, input.rule_id, input.reason, run)

    @mutation(extensions=allow(CanPublishRules),
              description="Offer an APPROVED version to the ships it selects (DISTRIBUTING).")
    async def publish_rule(self, info: Info, input: RuleVersionInput) -> RuleCommandResult:
        context = info.context

        def run(app: RuleReleasesApplication) -> tuple[int, list[str]]:
            app.publish(input.rule_id, input.version, context.actor, input.reason,
                        context.trace_id)
            return input.version, []

        return await _command(info, input.rule_id, input.reason, run)

    @mutation(extensions=allow(CanPublishRules),
              description="Withdraw the offered version; the version active before it is "
                          "offered again (ROLLBACK_TARGET).")
    async def rollback_rule(self, info: Info, input: RollbackRuleInput) -> RollbackRuleResult:
        context = info.context
        if not input.reason.strip():
            return _error(input.rule_id, RuleErrorCode.REASON_REQUIRED, "a reason is required")

        def run() -> tuple[tuple[int, int | None], int]:
            app = context.console.rule_releases()
            moved = app.rollback(input.rule_id, context.actor, input.reason, context.trace_id)
            return moved, app.recorder.max_notification_id() or 0

        try:
            (left, target), position = await blocking(run)
        except (TidesyncError, PersistenceError) as error:
            return _error_of(input.rule_id, error)
        return RuleRolledBack(rule_id=input.rule_id, from_version=left, to_version=target,
                              position=WritePosition.of(Position("rule_releases", position)))


async def _command(info: Info, rule_id: str, reason: str, command: Command) -> RuleCommandResult:
    if not reason.strip():
        return _error(rule_id, RuleErrorCode.REASON_REQUIRED, "a reason is required")
    console = info.context.console

    def run() -> tuple[int, list[str], ReleaseStatus, int]:
        app = console.rule_releases()
        version, problems = command(app)
        status = app.release(rule_id, version).status
        return version, problems, status, app.recorder.max_notification_id() or 0

    try:
        version, problems, status, position = await blocking(run)
    except (TidesyncError, PersistenceError) as error:
        return _error_of(rule_id, error)
    return RuleReleaseChanged(rule_id=rule_id, version=version, status=status,
                              problems=problems,
                              position=WritePosition.of(Position("rule_releases", position)))


def _rule_id_of(document: str) -> str:
    """The id a rule document names, for the answer (empty if it cannot be read)."""
    try:
        return rule_from_toml(document).rule_id
    except InvalidRule:
        return ""


_CODES = {
    ErrorCode.RULE_INVALID: RuleErrorCode.INVALID_RULE,
    ErrorCode.RULE_FILTER_INVALID: RuleErrorCode.INVALID_RULE,
    ErrorCode.RULE_TRANSFORM_INVALID: RuleErrorCode.INVALID_RULE,
    ErrorCode.NOT_FOUND: RuleErrorCode.NOT_FOUND,
    ErrorCode.REASON_REQUIRED: RuleErrorCode.REASON_REQUIRED,
    ErrorCode.RELEASE_STATE: RuleErrorCode.RELEASE_STATE,
    ErrorCode.FOUR_EYES: RuleErrorCode.FOUR_EYES,
    ErrorCode.ROLLOUT_IN_PROGRESS: RuleErrorCode.ROLLOUT_IN_PROGRESS,
    ErrorCode.RELEASE_OUTDATED: RuleErrorCode.RELEASE_OUTDATED,
    ErrorCode.NOTHING_TO_ROLL_BACK: RuleErrorCode.NOTHING_TO_ROLL_BACK,
    ErrorCode.CHANGED_MEANWHILE: RuleErrorCode.CHANGED_MEANWHILE,
}


def _error_of(rule_id: str, error: Exception) -> RuleError:
    if isinstance(error, PersistenceError | Unavailable):
        return _error(rule_id, RuleErrorCode.UNAVAILABLE,
                      "the rule store or the shore target is unavailable; retry shortly")
    code = _CODES.get(error.code, RuleErrorCode.REFUSED) if isinstance(
        error, TidesyncError) else RuleErrorCode.REFUSED
    message = error.message if isinstance(error, ReleaseRefused) else str(error)
    return _error(rule_id, code, message)


def _error(rule_id: str, code: RuleErrorCode, message: str) -> RuleError:
    return RuleError(code=code, message=message, rule_id=rule_id)
