"""Apply job types: counts of events not applied, and the results of a replay."""

from __future__ import annotations

import enum
from typing import Annotated

import strawberry

from tidesync.apps.jobs import JobSummaryRow
from tidesync.domain.apply_job import ErrorClass
from tidesync.graphql.common import Long, WritePosition

strawberry.enum(ErrorClass, name="ErrorClass")


@strawberry.type(description="Events not applied, counted by node, state, result, error class "
                             "and reason.")
class JobSummary:
    origin_node_id: str
    state: str
    result: str | None
    error_class: str | None
    reason_code: str | None
    events: Long

    @classmethod
    def from_row(cls, row: JobSummaryRow) -> JobSummary:
        return cls(origin_node_id=row.origin_node_id, state=row.state, result=row.result,
                   error_class=row.error_class, reason_code=row.reason_code,
                   events=Long(row.events))


@strawberry.enum
class JobErrorCode(enum.Enum):
    REASON_REQUIRED = "REASON_REQUIRED"
    NOT_REPLAYABLE = "NOT_REPLAYABLE"


@strawberry.type(description="A replay that was refused, and why.")
class JobError:
    code: JobErrorCode
    message: str


@strawberry.type(description="Events sent back to apply; each affected job records who and why.")
class JobsReplayed:
    events: Long
    position: WritePosition


ReplayJobsResult = Annotated[JobsReplayed | JobError, strawberry.union("ReplayJobsResult")]
