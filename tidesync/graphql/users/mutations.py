"""User commands: add a user (its token is shown once) and revoke one."""

from __future__ import annotations

import strawberry

from tidesync.apps.users import IssuedToken, UserAlreadyExists, UserNotFound
from tidesync.domain.user import InvalidUserName, Role, UserError
from tidesync.graphql.common import WritePosition, mutation
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanManageUsers, allow
from tidesync.graphql.positions import Position
from tidesync.graphql.threads import blocking
from tidesync.graphql.users.types import (
    AddUserResult,
    RevokeUserResult,
    UserAdded,
    UserErrorCode,
    UserRevoked,
)
from tidesync.graphql.users.types import (
    UserError as UserErrorResult,
)


@strawberry.input
class AddUserInput:
    name: str
    role: Role
    reason: str


@strawberry.input
class RevokeUserInput:
    name: str
    reason: str


@strawberry.type
class UserMutations:
    @mutation(extensions=allow(CanManageUsers),
              description="Add a console user; the answer holds its token, once.")
    async def add_user(self, info: Info, input: AddUserInput) -> AddUserResult:
        context = info.context
        if not input.reason.strip():
            return UserErrorResult(code=UserErrorCode.REASON_REQUIRED,
                                   message="a reason is required")

        def run() -> IssuedToken:
            return context.console.user_service().add(input.name, input.role, context.actor,
                                                      input.reason, context.trace_id)

        try:
            issued = await blocking(run)
        except UserError as error:
            return _error_of(error)
        return UserAdded(name=issued.name, role=issued.role, token_value=issued.token,
                         position=WritePosition.of(Position("users", issued.position)))

    @mutation(extensions=allow(CanManageUsers),
              description="Refuse the user's token from now on.")
    async def revoke_user(self, info: Info, input: RevokeUserInput) -> RevokeUserResult:
        context = info.context
        if not input.reason.strip():
            return UserErrorResult(code=UserErrorCode.REASON_REQUIRED,
                                   message="a reason is required")

        def run() -> int:
            position = context.console.user_service().revoke(input.name, context.actor,
                                                             input.reason, context.trace_id)
            context.console.authenticator.forget()
            return position

        try:
            position = await blocking(run)
        except UserError as error:
            return _error_of(error)
        return UserRevoked(name=input.name,
                           position=WritePosition.of(Position("users", position)))


def _error_of(error: UserError) -> UserErrorResult:
    if isinstance(error, InvalidUserName):
        return UserErrorResult(code=UserErrorCode.INVALID_NAME,
                               message="a user name is 1-63 of a-z, 0-9, '.', '_' and '-'")
    if isinstance(error, UserAlreadyExists):
        return UserErrorResult(code=UserErrorCode.ALREADY_EXISTS, message="the user exists")
    if isinstance(error, UserNotFound):
        return UserErrorResult(code=UserErrorCode.NOT_FOUND, message="no such user")
    return UserErrorResult(code=UserErrorCode.REFUSED, message=str(error))
