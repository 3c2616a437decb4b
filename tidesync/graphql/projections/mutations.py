"""Projection commands: rebuild a read model from position 0 side by side, then switch it in.

The rebuild runs in the background; the answer says whether it already finished. Either way
it is recorded as an operator action (actor, reason) whose id the answer carries.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import strawberry
from starlette.concurrency import run_in_threadpool

from tidesync.graphql.common import WritePosition, long_or_none, mutation
from tidesync.graphql.console import Console
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanRebuildProjections, allow
from tidesync.graphql.positions import Position
from tidesync.graphql.projections.types import (
    ProjectionError,
    ProjectionErrorCode,
    ProjectionRebuild,
    RebuildProjectionResult,
    RebuildState,
)
from tidesync.graphql.threads import blocking
from tidesync.projections.rebuild import RebuildError, RebuildResult, rebuild_view
from tidesync.projections.registry import RegistryError

log = logging.getLogger(__name__)

QUICK_SECONDS = 2.0
"""How long the answer waits for a rebuild to finish before saying it is RUNNING."""


@strawberry.input
class RebuildProjectionInput:
    name: str
    reason: str


@strawberry.type
class ProjectionMutations:
    @mutation(extensions=allow(CanRebuildProjections),
              description="Rebuild a read model from position 0, then switch it in atomically.")
    async def rebuild_projection(self, info: Info,
                                 input: RebuildProjectionInput) -> RebuildProjectionResult:
        context = info.context
        console = context.console
        if not input.reason.strip():
            return ProjectionError(code=ProjectionErrorCode.REASON_REQUIRED,
                                   message="a reason is required")
        try:
            console.catalogue.view(input.name)
        except RegistryError as error:
            return ProjectionError(code=ProjectionErrorCode.UNKNOWN_VIEW, message=error.message)
        action_id = uuid.uuid4()
        apps = await blocking(console.apps)
        running = asyncio.ensure_future(run_in_threadpool(
            rebuild_view, input.name, apps=apps.every, pool=console.pool, actor=context.actor,
            reason=input.reason, catalogue=console.catalogue, clock=console.clock,
            action_id=action_id, trace_id=context.trace_id))
        done, _ = await asyncio.wait({running}, timeout=QUICK_SECONDS)
        if not done:
            running.add_done_callback(_log_outcome)
            return await _answer(console, input.name, action_id, RebuildState.RUNNING, None)
        try:
            result: RebuildResult = running.result()
        except RebuildError as error:
            code = (ProjectionErrorCode.REBUILD_RUNNING if error.code == "REBUILD_RUNNING"
                    else ProjectionErrorCode.REBUILD_FAILED)
            return ProjectionError(code=code, message=error.message)
        except Exception as error:  # noqa: BLE001 - recorded as Failed; the view is untouched
            log.warning("rebuild of %s failed: %s", input.name, type(error).__name__)
            return ProjectionError(code=ProjectionErrorCode.REBUILD_FAILED,
                                   message=f"the rebuild failed ({type(error).__name__})")
        return await _answer(console, input.name, action_id, RebuildState.COMPLETED,
                             result.processed)


async def _answer(console: Console, view: str, action_id: uuid.UUID, state: RebuildState,
                  processed: int | None) -> ProjectionRebuild:
    def position() -> int:
        operations = console.apps().every["operations"]
        return operations.recorder.max_notification_id() or 0

    return ProjectionRebuild(
        view=view, action_id=strawberry.ID(str(action_id)), state=state,
        processed=long_or_none(processed),
        position=WritePosition.of(Position("operations", await blocking(position))))


def _log_outcome(rebuild: asyncio.Future[RebuildResult]) -> None:
    if rebuild.cancelled():
        return
    error = rebuild.exception()
    if error is not None:
        log.warning("background rebuild failed: %s", type(error).__name__)
