"""User queries: who am I, and (for user managers) every console user."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import field
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanManageUsers, allow
from tidesync.graphql.users.types import ConsoleUser, Viewer


@strawberry.type
class UserQueries:
    @field(description="The signed-in user.")
    def me(self, info: Info) -> Viewer:
        principal = info.context.principal
        return Viewer(name=principal.name, role=principal.role,
                      permissions=sorted(p.value for p in principal.permissions))

    @field(extensions=allow(CanManageUsers), description="Every console user.")
    async def users(self, info: Info) -> list[ConsoleUser]:
        summaries = await info.context.read(lambda: info.context.console.user_service().list())
        return [ConsoleUser.from_summary(summary) for summary in summaries]
