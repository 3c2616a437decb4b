"""Bearer-token authentication of console users: a token names its user's aggregate id, so
authenticating reads one stream (cached briefly); ids of no user are refused from a cached list.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from eventsourcing.persistence import PersistenceError

from tidesync.apps.users import (
    UserNotFound,
    UsersApplication,
    UserStoreUnavailable,
    token_digest,
    token_user_id,
)
from tidesync.domain.actor import user_actor
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.user import (
    Permission,
    Role,
    User,
)


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: an authenticated console user and what it may do."""

    name: str
    role: Role
    permissions: frozenset[Permission]

    @property
    def actor(self) -> str:
        """How the user appears on the events its commands record."""
        return user_actor(self.name)

    def may(self, permission: Permission) -> bool:
        return permission in self.permissions


@dataclass(frozen=True, slots=True)
class _Entry:
    user: User | None
    loaded_at: float


class TokenAuthenticator:
    """Bearer token → Principal, reading the user's stream at most every `ttl` seconds, so a
    revoke takes effect within that bound; a token issued `token_lifetime` ago or longer is
    refused (None: tokens do not expire). `authenticate` blocks: call it off the event loop.

    A token naming no known user is refused without reading its stream: the list of user ids
    is read at most every `ttl` seconds, so a flood of invented tokens costs one read per
    `ttl`, and a user added by another process is accepted within that bound.

    `users` gives the users application (its owner opens, caches and closes it).
    """

    def __init__(self, users: Callable[[], UsersApplication], ttl: float = 2.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 max_entries: int = 10_000, token_lifetime: dt.timedelta | None = None,
                 clock: Clock = utc_now) -> None:
        self._users = users
        self._token_lifetime, self._clock = token_lifetime, clock
        self._ttl, self._monotonic, self._max_entries = ttl, monotonic, max_entries
        self._entries: dict[uuid.UUID, _Entry] = {}
        self._known_ids: frozenset[uuid.UUID] = frozenset()
        self._known_at: float | None = None

    def authenticate(self, token: str) -> Principal | None:
        """The token's user if the token is valid and the user active; None otherwise.
        Raises UserStoreUnavailable when the event store cannot be read."""
        user_id = token_user_id(token)
        if user_id is None:
            return None
        user = self._user(user_id)
        if user is None or not user.accepts(token_digest(token)):
            return None
        if (self._token_lifetime is not None
                and user.token_expired(self._clock(), self._token_lifetime)):
            return None
        return Principal(user.name, user.role, user.permissions)

    def forget(self) -> None:
        """Drop cached users (after a command in this process changed one)."""
        self._entries.clear()
        self._known_at = None

    def _user(self, user_id: uuid.UUID) -> User | None:
        entry = self._entries.get(user_id)
        if entry is not None and self._monotonic() - entry.loaded_at < self._ttl:
            return entry.user
        if not self._known(user_id):
            return None
        try:
            user: User | None = self._users().user_by_id(user_id)
        except UserNotFound:
            user = None
        except PersistenceError as error:
            raise UserStoreUnavailable(type(error).__name__) from error
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[user_id] = _Entry(user, self._monotonic())
        return user

    def _known(self, user_id: uuid.UUID) -> bool:
        """Whether a user has this id, from the list of ids read within the last `ttl`."""
        if user_id in self._known_ids:
            return True
        now = self._monotonic()
        if self._known_at is not None and now - self._known_at < self._ttl:
            return False
        try:
            self._known_ids = frozenset(self._users().user_ids())
        except PersistenceError as error:
            raise UserStoreUnavailable(type(error).__name__) from error
        self._known_at = now
        return user_id in self._known_ids
