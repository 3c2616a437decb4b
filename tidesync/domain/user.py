"""Console users (§17.2–17.3): the User aggregate, roles and what each role may do.

A user holds only the digest of its bearer token; issuing tokens and the clock stay outside.
"""

from __future__ import annotations

import datetime as dt
import enum
import hmac
import re
import uuid

from eventsourcing.domain import Aggregate, event

from tidesync.domain.errors import ErrorCode, TidesyncError

USER_NAMESPACE = uuid.UUID("2f8c1d4a-6b3e-5a70-9e12-8d4c6a2b0f35")
USER_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    AUDITOR = "auditor"
    ADMIN = "admin"


class Permission(enum.StrEnum):
    """One capability of the console; roles are sets of these."""

    VIEW = "VIEW"
    """Nodes, backlogs, receipts, conflict summaries, evidence structure and digests,
    record head digests, projection and job status."""
    READ_EVIDENCE_VALUES = "READ_EVIDENCE_VALUES"
    """Values in conflict evidence and decisions, and record keys."""
    READ_SENSITIVE_COLUMNS = "READ_SENSITIVE_COLUMNS"
    """Values of columns configured as sensitive."""
    READ_AUDIT = "READ_AUDIT"
    """Audit events and any aggregate's history."""
    REPLAY_JOBS = "REPLAY_JOBS"
    REBUILD_PROJECTIONS = "REBUILD_PROJECTIONS"
    CANCEL_CONFLICTS = "CANCEL_CONFLICTS"
    REDISPATCH_CONFLICTS = "REDISPATCH_CONFLICTS"
    """Send a decision a ship rejected to it again (the decision itself is not changed)."""
    DECIDE_CONFLICTS = "DECIDE_CONFLICTS"
    MANAGE_NODES = "MANAGE_NODES"
    MANAGE_USERS = "MANAGE_USERS"
    AUTHOR_RULES = "AUTHOR_RULES"
    """Draft and validate sync rule versions."""
    APPROVE_RULES = "APPROVE_RULES"
    PUBLISH_RULES = "PUBLISH_RULES"
    """Publish approved rule versions to ships, and roll rules back."""


ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: frozenset({Permission.VIEW}),
    Role.OPERATOR: frozenset({Permission.VIEW, Permission.REPLAY_JOBS,
                              Permission.REBUILD_PROJECTIONS, Permission.CANCEL_CONFLICTS,
                              Permission.REDISPATCH_CONFLICTS, Permission.AUTHOR_RULES,
                              Permission.PUBLISH_RULES}),
    Role.APPROVER: frozenset({Permission.VIEW, Permission.READ_EVIDENCE_VALUES,
                              Permission.DECIDE_CONFLICTS, Permission.APPROVE_RULES}),
    Role.AUDITOR: frozenset({Permission.VIEW, Permission.READ_EVIDENCE_VALUES,
                             Permission.READ_SENSITIVE_COLUMNS, Permission.READ_AUDIT}),
    Role.ADMIN: frozenset(Permission),
}


class UserStatus(enum.StrEnum):
    ACTIVE = "ACTIVE"
    REVOKED = "REVOKED"


class UserError(TidesyncError):
    """A user command that the user's state does not allow."""

    code = ErrorCode.REFUSED


class InvalidUserName(UserError, ValueError):
    code = ErrorCode.INVALID_INPUT


class UnstorableText(UserError, ValueError):
    """Text with a NUL character or a lone UTF-16 surrogate, which no view can store."""

    code = ErrorCode.UNSTORABLE_TEXT


class LastAdmin(UserError):
    """Revoking the only active admin would leave no one to manage users."""

    code = ErrorCode.LAST_ADMIN


def check_text(what: str, text: str) -> str:
    """The text unless it holds a NUL character or a lone surrogate (the value is not quoted:
    it may be business data)."""
    if UNSTORABLE_TEXT.search(text) is not None:
        raise UnstorableText(f"{what} may not contain NUL characters or lone surrogates")
    return text


def check_user_name(name: str) -> str:
    """The name if it is 1-63 characters of `a-z`, `0-9`, `.`, `_` and `-`, starting
    alphanumeric."""
    if USER_NAME_PATTERN.fullmatch(name) is None:
        raise InvalidUserName(f"user name {name!r} must match [a-z0-9][a-z0-9._-]{{0,62}}")
    return name


def user_uuid(name: str) -> uuid.UUID:
    """The aggregate id of a user: adding the same name twice collides on it."""
    return uuid.uuid5(USER_NAMESPACE, check_user_name(name))


class User(Aggregate):
    """A console user with one role and one bearer token (held as a digest)."""

    @staticmethod
    def create_id(name: str, **_: object) -> uuid.UUID:
        return user_uuid(name)

    @event("Added")
    def __init__(self, name: str, role: Role, token_digest: str, actor: str, reason: str,
                 trace_id: str = "", issued_at: str = "") -> None:
        self.name = check_user_name(name)
        check_text("the reason", reason)
        check_text("the actor", actor)
        self.role = Role(role)
        self.token_digest = token_digest
        self.token_issued_at = issued_at
        self.status = UserStatus.ACTIVE
        self.added_by = actor
        self.revoke_reason = ""

    @property
    def is_revoked(self) -> bool:
        return self.status is UserStatus.REVOKED

    @property
    def permissions(self) -> frozenset[Permission]:
        return frozenset() if self.is_revoked else ROLE_PERMISSIONS[self.role]

    def accepts(self, token_digest: str) -> bool:
        """Whether a presented token's digest is this active user's (constant time)."""
        return not self.is_revoked and hmac.compare_digest(self.token_digest, token_digest)

    def token_expired(self, now: dt.datetime, lifetime: dt.timedelta) -> bool:
        """Whether the current token was issued `lifetime` or longer before `now` (users
        added before tokens carried an issue time count from when they were added)."""
        issued = getattr(self, "token_issued_at", "")
        issued_at = dt.datetime.fromisoformat(issued) if issued else self.created_on
        return now - issued_at >= lifetime

    def reissue(self, token_digest: str, issued_at: dt.datetime, actor: str, reason: str,
                trace_id: str = "") -> None:
        """Replace the token (the old one is refused from now on): an expired or leaked
        token is replaced without removing the user."""
        if self.is_revoked:
            raise UserError(f"user {self.name} is revoked")
        if not reason.strip():
            raise UserError("issuing a new token needs a reason")
        check_text("the reason", reason)
        check_text("the actor", actor)
        self._reissued(token_digest, issued_at.isoformat(), actor, reason, trace_id)

    @event("TokenReissued")
    def _reissued(self, token_digest: str, issued_at: str, actor: str, reason: str,
                  trace_id: str) -> None:
        self.token_digest = token_digest
        self.token_issued_at = issued_at

    def revoke(self, actor: str, reason: str, trace_id: str = "") -> None:
        if self.is_revoked:
            raise UserError(f"user {self.name} is already revoked")
        if not reason.strip():
            raise UserError("revoking a user needs a reason")
        check_text("the reason", reason)
        check_text("the actor", actor)
        self._revoked(actor, reason, trace_id)

    @event("Revoked")
    def _revoked(self, actor: str, reason: str, trace_id: str) -> None:
        self.status = UserStatus.REVOKED
        self.revoke_reason = reason


ADMIN_ROSTER_ID = uuid.uuid5(USER_NAMESPACE, "the admins")
"""No user's id: a user name holds no space."""


class AdminRoster(Aggregate):
    """Where revocations of admins meet. Revoking an active admin also records it here, in the
    same save as the user's own event: two revocations decided on the same roster (each saw the
    other admin still active) cannot both be stored, because the second one's version of the
    roster is taken, so the last active admin always stays."""

    @staticmethod
    def create_id(**_: object) -> uuid.UUID:
        return ADMIN_ROSTER_ID

    @event("Opened")
    def __init__(self) -> None:
        self.revocations = 0

    @event("AdminRevoked")
    def admin_revoked(self, name: str) -> None:
        self.revocations += 1
