"""User commands: add a user (its token is shown once), issue a user a new token (the old one
is refused from then on) and revoke one."""

from __future__ import annotations

import strawberry

from tidesync.apps.users import IssuedToken, UserAlreadyExists, UserNotFound
from tidesync.domain.user import InvalidUserName, LastAdmin, Role, UnstorableText, UserError
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


@strawberry.input
class ReissueUserTokenInput:
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
        return _token_answer(issued)

    @mutation(extensions=allow(CanManageUsers),
              description="Issue the user a new token (shown once); the old one is refused.")
    async def reissue_user_token(self, info: Info, input: ReissueUserTokenInput,
                                 ) -> AddUserResult:
        context = info.context
        if not input.reason.strip():
            return UserErrorResult(code=UserErrorCode.REASON_REQUIRED,
                                   message="a reason is required")

        def run() -> IssuedToken:
            issued = context.console.user_service().reissue(input.name, context.actor,
                                                             input.reason, context.trace_id)
            context.console.authenticator.forget()
            return issued

        try:
            issued = await blocking(run)
        except UserError as error:
            return _error_of(error)
        return _token_answer(issued)

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
    if isinstance(error, LastAdmin):
        return UserErrorResult(code=UserErrorCode.LAST_ADMIN,
                               message="the last active admin cannot be revoked")
    if isinstance(error, UnstorableText):
        return UserErrorResult(code=UserErrorCode.UNSTORABLE_TEXT, message=str(error))
    return UserErrorResult(code=UserErrorCode.REFUSED, message=str(error))


def _token_answer(issued: IssuedToken) -> UserAdded:
    """A user's new token (shown once) and the position its event can be waited on at."""
    return UserAdded(name=issued.name, role=issued.role, token_value=issued.token,
                     position=WritePosition.of(Position("users", issued.position)))
