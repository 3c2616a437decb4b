"""Projection queries: the status of every read model (or one)."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import field
from tidesync.graphql.console import Console
from tidesync.graphql.context import Info
from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.projections.types import ProjectionView
from tidesync.projections.registry import RegistryError
from tidesync.projections.views import ViewStatus, list_views, view_status


def _statuses(console: Console, name: str | None) -> list[ViewStatus]:
    return view_status(console.apps().every, console.pool, name, console.catalogue)


@strawberry.type
class ProjectionQueries:
    @field(extensions=allow(CanView), description="Read models and how far behind they are.")
    async def projections(self, info: Info, name: str | None = None) -> list[ProjectionView]:
        console = info.context.console
        try:
            statuses = await info.context.read(_statuses, console, name)
        except RegistryError as error:
            raise BadUserInput(error.message) from None
        infos = {view.name: view for view in list_views(console.catalogue)}
        return [ProjectionView.of(infos.get(status.name), status) for status in statuses]
