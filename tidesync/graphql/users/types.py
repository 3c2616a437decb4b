"""User types: who is signed in, console users, and the results of user commands."""

from __future__ import annotations

import enum
from typing import Annotated

import strawberry

from tidesync.apps.users import UserSummary
from tidesync.domain.user import Role
from tidesync.graphql.common import WritePosition, field
from tidesync.graphql.permissions import CanManageUsers, allow

strawberry.enum(Role, name="Role")


@strawberry.type(description="The signed-in user and what its role may do.")
class Viewer:
    name: str
    role: Role
    permissions: list[str]


@strawberry.type(description="A console user (its token is never shown again).")
class ConsoleUser:
    name: str
    role: Role
    status: str
    added_by: str
    revoke_reason: str

    @classmethod
    def from_summary(cls, summary: UserSummary) -> ConsoleUser:
        return cls(name=summary.name, role=summary.role, status=summary.status.value,
                   added_by=summary.added_by, revoke_reason=summary.revoke_reason)


@strawberry.enum
class UserErrorCode(enum.Enum):
    INVALID_NAME = "INVALID_NAME"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    NOT_FOUND = "NOT_FOUND"
    REASON_REQUIRED = "REASON_REQUIRED"
    LAST_ADMIN = "LAST_ADMIN"
    UNSTORABLE_TEXT = "UNSTORABLE_TEXT"
    REFUSED = "REFUSED"


@strawberry.type(description="A user command that was refused, and why.")
class UserError:
    code: UserErrorCode
    message: str


@strawberry.type(description="A user was added. The token is shown only in this answer.")
class UserAdded:
    name: str
    role: Role
    position: WritePosition
    token_value: strawberry.Private[str]

    @field(extensions=allow(CanManageUsers), description="The bearer token, shown once.")
    def token(self) -> str:
        return self.token_value


@strawberry.type(description="The user's token is refused from now on.")
class UserRevoked:
    name: str
    position: WritePosition


AddUserResult = Annotated[UserAdded | UserError, strawberry.union("AddUserResult")]
RevokeUserResult = Annotated[UserRevoked | UserError, strawberry.union("RevokeUserResult")]
