"""Rule release types: rules with their newest and offered versions, one version with its
history and where it runs, and the results of release commands."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated

import strawberry

from tidesync.apps.rules import RuleSummary as RuleSummaryRow
from tidesync.domain.rules.release import NodeActivation, ReleaseStatus
from tidesync.domain.rules.release import RuleRelease as RuleReleaseAggregate
from tidesync.graphql.common import JSON, WritePosition, field
from tidesync.graphql.context import Info

strawberry.enum(ReleaseStatus, name="ReleaseStatus")


@strawberry.type(description="A rule: its newest version, and the version ships are offered.")
class RuleSummary:
    rule_id: str
    latest_version: int
    latest_status: ReleaseStatus
    offered_version: int | None
    offered_status: ReleaseStatus | None
    changed_at: dt.datetime

    @classmethod
    def from_row(cls, row: RuleSummaryRow) -> RuleSummary:
        return cls(rule_id=row.rule_id, latest_version=row.latest_version,
                   latest_status=row.latest_status, offered_version=row.offered_version,
                   offered_status=row.offered_status, changed_at=row.changed_at)


@strawberry.type(description="One step of a release: who moved it to which status, why, when.")
class RuleTransition:
    status: ReleaseStatus
    actor: str
    reason: str
    at: dt.datetime


@strawberry.type(description="What one node last reported about a rule.")
class RuleNodeActivation:
    node_id: str
    active_version: int
    candidate_version: int
    validation: str
    problems: list[str]
    reported_at: dt.datetime

    @classmethod
    def from_report(cls, report: NodeActivation) -> RuleNodeActivation:
        return cls(node_id=report.node_id, active_version=report.active_version,
                   candidate_version=report.candidate_version, validation=report.validation,
                   problems=list(report.problems), reported_at=report.reported_at)


@strawberry.type(description="One version of a rule: its content, status and history.")
class RuleRelease:
    rule_id: str
    version: int
    status: ReleaseStatus
    author: str
    checksum: str
    problems: list[str]
    content: JSON
    history: list[RuleTransition]

    @field(description="What each node last reported about this rule (any version).")
    async def activations(self, info: Info) -> list[RuleNodeActivation]:
        reports = info.context.console.rule_activations()
        if reports is None:
            return []
        found = await info.context.read(reports.activations, self.rule_id)
        return [RuleNodeActivation.from_report(report)
                for report in sorted(found, key=lambda report: report.node_id)]

    @classmethod
    def from_release(cls, release: RuleReleaseAggregate) -> RuleRelease:
        return cls(rule_id=release.rule_id, version=release.rule_version, status=release.status,
                   author=release.author, checksum=release.checksum,
                   problems=list(release.problems), content=JSON(release.rule.document()),
                   history=[RuleTransition(status=t.status, actor=t.actor, reason=t.reason,
                                           at=t.at) for t in release.transitions])


@strawberry.enum
class RuleErrorCode(enum.Enum):
    INVALID_RULE = "INVALID_RULE"
    NOT_FOUND = "NOT_FOUND"
    REASON_REQUIRED = "REASON_REQUIRED"
    RELEASE_STATE = "RELEASE_STATE"
    FOUR_EYES = "FOUR_EYES"
    ROLLOUT_IN_PROGRESS = "ROLLOUT_IN_PROGRESS"
    RELEASE_OUTDATED = "RELEASE_OUTDATED"
    NOTHING_TO_ROLL_BACK = "NOTHING_TO_ROLL_BACK"
    CHANGED_MEANWHILE = "CHANGED_MEANWHILE"
    UNAVAILABLE = "UNAVAILABLE"
    REFUSED = "REFUSED"


@strawberry.type(description="A release command that was refused, and why.")
class RuleError:
    code: RuleErrorCode
    message: str
    rule_id: str


@strawberry.type(description="A release command was recorded. A validation that found "
                             "problems leaves the version DRAFT and lists them.")
class RuleReleaseChanged:
    rule_id: str
    version: int
    status: ReleaseStatus
    problems: list[str]
    position: WritePosition


@strawberry.type(description="The offered version was withdrawn; the version active before it "
                             "(if any) is offered again until every node runs it.")
class RuleRolledBack:
    rule_id: str
    from_version: int
    to_version: int | None
    position: WritePosition


RuleCommandResult = Annotated[RuleReleaseChanged | RuleError,
                              strawberry.union("RuleCommandResult")]
RollbackRuleResult = Annotated[RuleRolledBack | RuleError, strawberry.union("RollbackRuleResult")]
