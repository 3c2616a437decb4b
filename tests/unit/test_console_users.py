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
    LastAdmin,
    Permission,
    Role,
    User,
    UserError,
    UserStatus,
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


def _active_admins(service: UserService) -> list[str]:
    return [user.name for user in service.list()
            if user.role is Role.ADMIN and user.status is UserStatus.ACTIVE]


def test_the_last_active_admin_cannot_be_revoked(users):
    service = UserService(users)
    service.add("ana", Role.ADMIN, "setup", "first admin")
    service.add("bo", Role.ADMIN, "setup", "second admin")
    service.add("cy", Role.OPERATOR, "setup", "an operator")
    service.revoke("bo", "ana", "left the company")
    service.revoke("cy", "ana", "left the company")
    with pytest.raises(LastAdmin):
        service.revoke("ana", "ana", "tidying up")
    assert _active_admins(service) == ["ana"]


def test_two_admins_revoking_each_other_at_once_leave_one_admin(users):
    # Each revocation is decided while the other admin is still active. Saved one after the
    # other, the second must be refused, not leave the console without an admin.
    service = UserService(users)
    service.add("ana", Role.ADMIN, "setup", "first admin")
    service.add("bo", Role.ADMIN, "setup", "second admin")
    save = users.save
    raced: list[int] = []

    def the_other_revocation_first(*aggregates, **kwargs):
        if users.save is the_other_revocation_first:
            users.save = save  # the competing revocation saves as usual
            raced.append(service.revoke("ana", "bo", "handing over"))
        return save(*aggregates, **kwargs)

    users.save = the_other_revocation_first
    with pytest.raises(LastAdmin):
        service.revoke("bo", "ana", "handing over")
    assert raced, "the competing revocation did not run"
    assert _active_admins(service) == ["bo"]
    # The revocation that went through is at the position its answer named.
    assert users.user("ana").is_revoked
    named = [n for n in users.notification_log.select(1, 10) if n.id == raced[0]]
    assert [(n.originator_id, n.topic) for n in named] == [
        (users.user("ana").id, "tidesync.domain.user:User.Revoked")]
