"""Apply job commands: replay dead or rejected events of one error class (never MALFORMED), and
replay or skip one such event."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import strawberry

from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.jobs import JobQueue, ReplayRefused, replay, replay_event, skip_event
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


@strawberry.input
class JobEventInput:
    node_id: str
    event_id: strawberry.ID
    reason: str


OneEventCommand = Callable[[JobQueue, ApplyJobsApplication, str, uuid.UUID, str, str], None]


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

    @mutation(extensions=allow(CanReplayJobs),
              description="Send one dead or rejected event back to apply (never MALFORMED).")
    async def replay_job_event(self, info: Info, input: JobEventInput) -> ReplayJobsResult:
        return await _one_event(info, input, replay_event)

    @mutation(extensions=allow(CanReplayJobs),
              description="Give up on one dead or rejected event: it ends REJECTED "
                          "(SKIPPED_BY_OPERATOR) and its partition moves on.")
    async def skip_job_event(self, info: Info, input: JobEventInput) -> ReplayJobsResult:
        return await _one_event(info, input, skip_event)


async def _one_event(info: Info, input: JobEventInput,
                     command: OneEventCommand) -> ReplayJobsResult:
    """Replay or skip one event, recorded on its job stream with the user and the reason."""
    context = info.context
    if not input.reason.strip():
        return JobError(code=JobErrorCode.REASON_REQUIRED, message="a reason is required")
    try:
        event_id = uuid.UUID(str(input.event_id))
    except ValueError:
        return JobError(code=JobErrorCode.NOT_REPLAYABLE, message="not an event id")

    def run() -> int:
        apply_jobs = context.console.apps().apply_jobs
        command(context.console.work_queue(), apply_jobs, input.node_id, event_id,
                context.actor, input.reason)
        return apply_jobs.recorder.max_notification_id() or 0

    try:
        position = await blocking(run)
    except ReplayRefused as refused:
        return JobError(code=JobErrorCode.NOT_REPLAYABLE, message=str(refused))
    return JobsReplayed(events=Long(1),
                        position=WritePosition.of(Position("apply_jobs", position)))
