"""Projection types: each view with the feeds that keep it (one per application it follows),
and the results of a rebuild."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated

import strawberry

from tidesync.graphql.common import Long, WritePosition
from tidesync.projections.engine import ProjectionStatus
from tidesync.projections.views import ViewInfo, ViewStatus


@strawberry.type(description="One projection following one application's notification log.")
class ProjectionFeed:
    name: str
    application: str
    position: Long
    head: Long
    behind: Long
    rate_per_second: float
    eta_seconds: float | None
    processed: Long
    updated_at: dt.datetime | None

    @classmethod
    def from_status(cls, status: ProjectionStatus) -> ProjectionFeed:
        return cls(name=status.name, application=status.application, position=Long(status.position),
                   head=Long(status.head), behind=Long(status.behind),
                   rate_per_second=status.rate_per_second, eta_seconds=status.eta_seconds,
                   processed=Long(status.processed), updated_at=status.updated_at)


@strawberry.type(description="A read model: how far behind its feeds are, and any rebuild "
                             "in progress (its shadow feeds).")
class ProjectionView:
    name: str
    description: str
    tables: list[str]
    behind: Long
    feeds: list[ProjectionFeed]
    rebuilding: list[ProjectionFeed]
    state: str = strawberry.field(description="RUNNING, or FAILED once the view stopped on an "
                                              "error (until a rebuild replaces it).")
    failed_reason: str | None = strawberry.field(description="Why it stopped (a reason code).")

    @classmethod
    def of(cls, info: ViewInfo | None, status: ViewStatus) -> ProjectionView:
        return cls(name=status.name, description=info.description if info else "",
                   state=status.state,
                   failed_reason=status.failure.reason if status.failure else None,
                   tables=list(info.tables) if info else [], behind=Long(status.behind),
                   feeds=[ProjectionFeed.from_status(feed) for feed in status.feeds],
                   rebuilding=[ProjectionFeed.from_status(feed) for feed in status.rebuilding])


@strawberry.enum
class RebuildState(enum.Enum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"


@strawberry.type(description="A rebuild was started (and, if it finished quickly, switched in). "
                             "It is recorded as an operator action with actor and reason.")
class ProjectionRebuild:
    view: str
    action_id: strawberry.ID
    state: RebuildState
    processed: Long | None
    position: WritePosition


@strawberry.enum
class ProjectionErrorCode(enum.Enum):
    UNKNOWN_VIEW = "UNKNOWN_VIEW"
    REASON_REQUIRED = "REASON_REQUIRED"
    REBUILD_RUNNING = "REBUILD_RUNNING"
    REBUILD_FAILED = "REBUILD_FAILED"


@strawberry.type(description="A rebuild that was refused or failed, and why (the live view is "
                             "unchanged).")
class ProjectionError:
    code: ProjectionErrorCode
    message: str


RebuildProjectionResult = Annotated[ProjectionRebuild | ProjectionError,
                                    strawberry.union("RebuildProjectionResult")]
