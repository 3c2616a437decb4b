"""Console users: roles and their permissions, bearer tokens (random, shown once, stored as a
digest), authentication with a short cache, and revocation.

The users application runs on the library's in-memory store here; the integration tests run
it on PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from tidesync.apps.users import (
    UserAlreadyExists,
    UserNotFound,
    UsersApplication,
    UserService,
    token_digest,
    token_user_id,
)
from tidesync.domain.user import (
    ROLE_PERMISSIONS,
    InvalidUserName,
    Permission,
    Role,
    User,
    UserError,
)
from tidesync.graphql.accounts import TokenAuthenticator


def test_the_role_matrix():
    p = Permission
    assert ROLE_PERMISSIONS[Role.VIEWER] == {p.VIEW}
    assert ROLE_PERMISSIONS[Role.OPERATOR] == {p.VIEW, p.REPLAY_JOBS, p.REBUILD_PROJECTIONS,
                                               p.CANCEL_CONFLICTS, p.REDISPATCH_CONFLICTS,
                                               p.AUTHOR_RULES, p.PUBLISH_RULES}
    assert ROLE_PERMISSIONS[Role.APPROVER] == {p.VIEW, p.READ_EVIDENCE_VALUES,
                                               p.DECIDE_CONFLICTS, p.APPROVE_RULES}
    assert ROLE_PERMISSIONS[Role.AUDITOR] == {p.VIEW, p.READ_EVIDENCE_VALUES,
                                              p.READ_SENSITIVE_COLUMNS, p.READ_AUDIT}
    assert ROLE_PERMISSIONS[Role.ADMIN] == set(Permission)
    for role in Role:
        if role is not Role.ADMIN:
            assert Permission.MANAGE_USERS not in ROLE_PERMISSIONS[role]
            assert Permission.MANAGE_NODES not in ROLE_PERMISSIONS[role]


class Clock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


@pytest.fixture
def users():
    app = UsersApplication()
    yield app
    app.close()


def test_tokens_are_random_name_their_user_and_are_stored_as_digests(users):
    service = UserService(users)
    first = service.add("alice", Role.APPROVER, "admin", "new approver")
    second = service.add("bob", Role.APPROVER, "admin", "new approver")
    assert first.token != second.token and first.token.startswith("tsu_")
    assert token_user_id(first.token) == users.user("alice").id
    stored = users.user("alice")
    assert stored.token_digest == token_digest(first.token)
    assert first.token not in repr(next(iter(users.events.get(stored.id))).__dict__)
    assert first.position >= 1
    with pytest.raises(UserAlreadyExists):
        service.add("alice", Role.VIEWER, "admin", "again")
    with pytest.raises(InvalidUserName):
        service.add("Alice Smith", Role.VIEWER, "admin", "bad name")


def test_authentication_accepts_active_users_and_honours_revocation(users):
    service = UserService(users)
    token = service.add("carol", Role.OPERATOR, "admin", "on call").token
    clock = Clock()
    authenticator = TokenAuthenticator(lambda: users, ttl=2.0, monotonic=clock)
    principal = authenticator.authenticate(token)
    assert principal is not None and principal.role is Role.OPERATOR
    assert principal.may(Permission.REPLAY_JOBS) and not principal.may(Permission.READ_AUDIT)
    assert principal.actor == "user:carol"
    for bad in ("", "tsu_", token[:-2], token + "x", "Bearer " + token,
                "tsu_" + uuid.uuid4().hex):
        assert authenticator.authenticate(bad) is None

    service.revoke("carol", "admin", "left")
    assert authenticator.authenticate(token) is not None  # still cached
    clock.seconds += 2.0
    assert authenticator.authenticate(token) is None
    with pytest.raises(UserError):
        service.revoke("carol", "admin", "again")
    with pytest.raises(UserNotFound):
        service.revoke("nobody", "admin", "why")
    assert [(u.name, u.status.value) for u in service.list()] == [("carol", "REVOKED")]


def test_a_revoke_needs_a_reason():
    user = User(name="dave", role=Role.VIEWER, token_digest="d", actor="a", reason="r")
    with pytest.raises(UserError):
        user.revoke("admin", " ")
    assert user.accepts("d") and not user.accepts("e")
