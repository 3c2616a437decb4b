"""Console users: the `users` application, adding, revoking and listing users. Tokens are
random, shown once, stored as a SHA-256 digest; a token names its user's aggregate id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError

from tidesync.apps.recorder import created_ids
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import ErrorCode, Unavailable
from tidesync.domain.user import (
    ADMIN_ROSTER_ID,
    AdminRoster,
    LastAdmin,
    Role,
    User,
    UserError,
    UserStatus,
    check_user_name,
    user_uuid,
)

TOKEN_PREFIX = "tsu_"  # noqa: S105 - a marker, not a secret
SECRET_BYTES = 32
RandomBytes = Callable[[int], bytes]
_REVOKE_ATTEMPTS = 5


class UserNotFound(UserError):
    code = ErrorCode.NOT_FOUND


class UserAlreadyExists(UserError):
    code = ErrorCode.ALREADY_EXISTS


class UserStoreUnavailable(Unavailable):
    """The event store holding the users could not be read."""


class UsersApplication(Application[uuid.UUID]):
    """The User streams, in their own events table."""

    name = "users"

    def user(self, name: str) -> User:
        return self.user_by_id(user_uuid(name))

    def user_by_id(self, user_id: uuid.UUID) -> User:
        try:
            user: User = self.repository.get(user_id)
        except AggregateNotFoundError:
            raise UserNotFound("no such user") from None
        return user

    def admin_roster(self) -> AdminRoster:
        """The roster revocations of admins go through (a new one before the first)."""
        try:
            roster: AdminRoster = self.repository.get(ADMIN_ROSTER_ID)
        except AggregateNotFoundError:
            return AdminRoster()
        return roster

    def user_ids(self) -> list[uuid.UUID]:
        """Every user's aggregate id, in the order they were added."""
        return created_ids(self, User.Added)  # type: ignore[attr-defined]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_user_id(token: str) -> uuid.UUID | None:
    """The user id a token names, or None when it is not a console token at all."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    text = token[len(TOKEN_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16 + SECRET_BYTES:
        return None
    return uuid.UUID(bytes=raw[:16])


@dataclass(frozen=True)
class IssuedToken:
    """A new user and its bearer token: shown once, stored only as a digest."""

    name: str
    role: Role
    token: str
    position: int


@dataclass(frozen=True)
class UserSummary:
    name: str
    role: Role
    status: UserStatus
    added_by: str
    revoke_reason: str


class UserService:
    """Add, revoke and list console users; each command is one saved event."""

    def __init__(self, app: UsersApplication, random_bytes: RandomBytes = os.urandom,
                 clock: Clock = utc_now) -> None:
        self.app = app
        self.random_bytes = random_bytes
        self.clock = clock

    def add(self, name: str, role: Role, actor: str, reason: str,
            trace_id: str = "") -> IssuedToken:
        check_user_name(name)
        token = self._new_token(user_uuid(name))
        user = User(name=name, role=role, token_digest=token_digest(token), actor=actor,
                    reason=reason, trace_id=trace_id, issued_at=self.clock().isoformat())
        try:
            recordings = self.app.save(user)
        except IntegrityError:
            raise UserAlreadyExists(f"user {name} already exists") from None
        return IssuedToken(name, role, token, recordings[-1].notification.id)

    def reissue(self, name: str, actor: str, reason: str, trace_id: str = "") -> IssuedToken:
        """A new token for the user (shown once); the old one is refused from now on."""
        user = self.app.user(name)
        token = self._new_token(user.id)
        user.reissue(token_digest(token), self.clock(), actor, reason, trace_id)
        return IssuedToken(user.name, user.role, token, self.app.save(user)[-1].notification.id)

    def _new_token(self, user_id: uuid.UUID) -> str:
        return TOKEN_PREFIX + base64.urlsafe_b64encode(
            user_id.bytes + self.random_bytes(SECRET_BYTES)).rstrip(b"=").decode("ascii")

    def revoke(self, name: str, actor: str, reason: str, trace_id: str = "") -> int:
        """Refuse the user's token from now on; returns the position of the event.

        An active admin's revocation is saved together with the admin roster's, so of two
        admins revoking each other at once only one succeeds: the other finds its roster
        taken, looks again and is refused as the last admin."""
        for _ in range(_REVOKE_ATTEMPTS):
            user = self.app.user(name)
            roster = (self.app.admin_roster() if user.role is Role.ADMIN and not user.is_revoked
                      else None)
            if roster is not None and not self._other_admins(user):
                raise LastAdmin(f"user {name} is the last active admin; add another admin"
                                " first")
            user.revoke(actor, reason, trace_id)
            try:
                if roster is None:
                    return self.app.save(user)[-1].notification.id
                roster.admin_revoked(user.name)
                recordings = self.app.save(user, roster)
            except IntegrityError:
                continue  # another change to this user or to the admins came first
            return max(recording.notification.id for recording in recordings
                       if recording.domain_event.originator_id == user.id)
        raise UserStoreUnavailable(f"revoking user {name} kept meeting other changes; try again")

    def _other_admins(self, user: User) -> bool:
        return any(other.role is Role.ADMIN and not other.is_revoked and other.id != user.id
                   for other in map(self.app.user_by_id, self.app.user_ids()))

    def list(self) -> list[UserSummary]:
        return [_summary(self.app.user_by_id(user_id)) for user_id in self.app.user_ids()]


def _summary(user: User) -> UserSummary:
    return UserSummary(user.name, user.role, user.status, user.added_by, user.revoke_reason)


