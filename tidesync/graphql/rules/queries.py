"""Rule queries: every rule, and one version with its history and where it runs."""

from __future__ import annotations

import strawberry

from tidesync.apps.rules import ReleaseNotFound
from tidesync.domain.rules.release import RuleRelease as RuleReleaseAggregate
from tidesync.graphql.common import field
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.rules.types import RuleRelease, RuleSummary


@strawberry.type
class RuleQueries:
    @field(extensions=allow(CanView),
           description="Every rule with its newest version and the version ships are offered.")
    async def rules(self, info: Info, wait_for: str | None = None) -> list[RuleSummary]:
        console = info.context.console
        rows = await info.context.read(lambda: console.rule_releases().list(),
                                       wait_for=wait_for)
        return [RuleSummary.from_row(row) for row in rows]

    @field(extensions=allow(CanView),
           description="One version of a rule (the newest without `version`), if it exists.")
    async def rule(self, info: Info, id: str, version: int | None = None,
                   wait_for: str | None = None) -> RuleRelease | None:
        console = info.context.console

        def read() -> RuleReleaseAggregate | None:
            app = console.rule_releases()
            try:
                return app.release(id, app.versions(id).latest if version is None else version)
            except ReleaseNotFound:
                return None

        release = await info.context.read(read, wait_for=wait_for)
        return None if release is None else RuleRelease.from_release(release)
