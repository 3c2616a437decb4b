"""Apply job commands: replay dead or rejected events of one error class (never MALFORMED)."""

from __future__ import annotations

import strawberry

from tidesync.apps.jobs import ReplayRefused, replay
from tidesync.domain.apply_job import ErrorClass
from tidesync.graphql.common import Long, WritePosition, mutation
from tidesync.graphql.context import Info
from tidesync.graphql.jobs.types import JobError, JobErrorCode, JobsReplayed, ReplayJobsResult
from tidesync.graphql.permissions import CanReplayJobs, allow
from tidesync.graphql.positions import Position
from tidesync.graphql.threads import blocking


@strawberry.input
class ReplayJobsInput:
    error_class: ErrorClass
    reason: str
    node_id: str | None = None


@strawberry.type
class JobMutations:
    @mutation(extensions=allow(CanReplayJobs),
              description="Send dead or rejected events of one error class back to apply.")
    async def replay_jobs(self, info: Info, input: ReplayJobsInput) -> ReplayJobsResult:
        context = info.context
        if not input.reason.strip():
            return JobError(code=JobErrorCode.REASON_REQUIRED, message="a reason is required")

        def run() -> tuple[int, int]:
            apply_jobs = context.console.apps().apply_jobs
            queue = context.console.work_queue()
            count = replay(queue, apply_jobs, input.error_class, context.actor, input.reason,
                           input.node_id)
            return count, apply_jobs.recorder.max_notification_id() or 0

        try:
            count, position = await blocking(run)
        except ReplayRefused as refused:
            return JobError(code=JobErrorCode.NOT_REPLAYABLE, message=str(refused))
        return JobsReplayed(events=Long(count),
                            position=WritePosition.of(Position("apply_jobs", position)))
