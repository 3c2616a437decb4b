"""Apply job queries: what is waiting, dead or rejected."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import field
from tidesync.graphql.context import Info
from tidesync.graphql.jobs.types import JobSummary
from tidesync.graphql.permissions import CanView, allow
from tidesync.shore.jobs import summarize
from tidesync.shore.work_queue import PostgresWorkQueue


@strawberry.type
class JobQueries:
    @field(extensions=allow(CanView),
           description="Events not applied, by node, state, result, class and reason.")
    async def job_summary(self, info: Info, node_id: str | None = None) -> list[JobSummary]:
        queue = PostgresWorkQueue(info.context.console.pool)
        rows = await info.context.read(summarize, queue, node_id)
        return [JobSummary.from_row(row) for row in rows]
