"""Apply job queries: what is waiting, dead or rejected."""

from __future__ import annotations

import strawberry

from tidesync.apps.jobs import summarize
from tidesync.graphql.common import field
from tidesync.graphql.context import Info
from tidesync.graphql.jobs.types import JobSummary
from tidesync.graphql.permissions import CanView, allow


@strawberry.type
class JobQueries:
    @field(extensions=allow(CanView),
           description="Events not applied, by node, state, result, class and reason.")
    async def job_summary(self, info: Info, node_id: str | None = None) -> list[JobSummary]:
        queue = info.context.console.work_queue()
        rows = await info.context.read(summarize, queue, node_id)
        return [JobSummary.from_row(row) for row in rows]
