"""Console bearer tokens naming no user: a flood of invented tokens is refused from a cached
list of user ids, not by reading the event store once per token.

The users application runs on the library's in-memory store; its recorder's reads are counted.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidesync.apps.users import UsersApplication, UserService
from tidesync.domain.user import Role
from tidesync.graphql.accounts import TokenAuthenticator


class Clock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


class CountedReads:
    """Counts every read the users application makes of its event store."""

    def __init__(self, app: UsersApplication) -> None:
        self.count = 0
        for name in ("select_events", "select_notifications"):
            setattr(app.recorder, name, self._counted(getattr(app.recorder, name)))

    def _counted(self, read: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return read(*args, **kwargs)
        return counted


@pytest.fixture
def users() -> Iterator[UsersApplication]:
    app = UsersApplication()
    yield app
    app.close()


def invented_token() -> str:
    """Well-formed like a console token, naming a user id nobody has."""
    raw = uuid.uuid4().bytes + os.urandom(32)
    return "tsu_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def test_a_flood_of_invented_tokens_reads_the_store_once_per_cache_period(users):
    service = UserService(users)
    token = service.add("erin", Role.VIEWER, "admin", "watch").token
    clock = Clock()
    authenticator = TokenAuthenticator(lambda: users, ttl=2.0, monotonic=clock)
    reads = CountedReads(users)

    assert all(authenticator.authenticate(invented_token()) is None for _ in range(500))
    assert reads.count <= 1
    assert authenticator.authenticate(token) is not None

    clock.seconds += 2.0
    flood_reads = reads.count
    assert all(authenticator.authenticate(invented_token()) is None for _ in range(500))
    assert reads.count - flood_reads <= 1


def test_a_user_added_elsewhere_is_accepted_once_the_cache_period_passed(users):
    service = UserService(users)
    service.add("erin", Role.VIEWER, "admin", "watch")
    clock = Clock()
    authenticator = TokenAuthenticator(lambda: users, ttl=2.0, monotonic=clock)
    assert authenticator.authenticate(invented_token()) is None

    token = service.add("frank", Role.OPERATOR, "admin", "on call").token
    clock.seconds += 2.0
    principal = authenticator.authenticate(token)
    assert principal is not None and principal.name == "frank"


def test_a_user_added_in_this_process_is_accepted_after_forget(users):
    service = UserService(users)
    authenticator = TokenAuthenticator(lambda: users, ttl=2.0, monotonic=Clock())
    assert authenticator.authenticate(invented_token()) is None

    token = service.add("gina", Role.APPROVER, "admin", "approver").token
    authenticator.forget()
    assert authenticator.authenticate(token) is not None
