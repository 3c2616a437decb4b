"""The Node aggregate (§17.1): a ship's identity, its signing credentials, its status, and the
groups and tags sync rules select it by (§8.1).

Credentials hold only sealed (encrypted) secrets; sealing, randomness and the clock stay outside.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from eventsourcing.domain import Aggregate, event

from tidesync.domain.errors import ErrorCode, TidesyncError

NODE_NAMESPACE = uuid.UUID("6a4e2f10-3b7c-5d9e-8f21-4c6b8a0d2e57")
NODE_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
PROFILE_NAME_PATTERN = NODE_ID_PATTERN
"""Group and tag names follow the node id rules: rule selectors and logs quote them."""
MAX_PROFILE_NAMES = 64
"""Groups, and tags, one node may carry."""


SECRET_BYTES = 32


def secret_text(secret: bytes) -> str:
    """How a signing secret is shown and configured: unpadded base64url."""
    return base64.urlsafe_b64encode(secret).rstrip(b"=").decode("ascii")


def secret_from_text(text: str) -> bytes:
    """A node signing secret from its configured form (unpadded base64url of 32 bytes)."""
    try:
        secret = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as error:
        raise ValueError("a node secret is base64url text") from error
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a node secret holds {SECRET_BYTES} bytes")
    return secret


class NodeStatus(enum.StrEnum):
    ACTIVE = "ACTIVE"
    REVOKED = "REVOKED"


class NodeError(TidesyncError):
    """A node command that the node's state does not allow."""

    code = ErrorCode.REFUSED


class InvalidNodeId(NodeError, ValueError):
    code = ErrorCode.INVALID_INPUT


class NodeRevoked(NodeError):
    pass


class InvalidNodeLink(NodeError, ValueError):
    """An uplink limit a node cannot be given."""

    code = ErrorCode.INVALID_INPUT


class InvalidNodeProfile(NodeError, ValueError):
    code = ErrorCode.INVALID_INPUT


def check_node_id(node_id: str) -> str:
    """The node id if it is 1-63 characters of `a-z`, `0-9` and `-`, starting alphanumeric."""
    if NODE_ID_PATTERN.fullmatch(node_id) is None:
        raise InvalidNodeId(
            f"node id {node_id!r} must match [a-z0-9][a-z0-9-]{{0,62}}"
        )
    return node_id


def node_uuid(node_id: str) -> uuid.UUID:
    """The aggregate id of a node: registering the same node id twice collides on it."""
    return uuid.uuid5(NODE_NAMESPACE, check_node_id(node_id))


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """The groups and tags a node carries: sync rules select nodes by them (§8.1)."""

    groups: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()

    @classmethod
    def of(cls, groups: Iterable[str] = (), tags: Iterable[str] = ()) -> NodeProfile:
        """A profile of checked names; raises InvalidNodeProfile."""
        return cls(_profile_names(groups, "group"), _profile_names(tags, "tag"))


def _profile_names(names: Iterable[str], kind: str) -> frozenset[str]:
    checked = frozenset(names)
    if len(checked) > MAX_PROFILE_NAMES:
        raise InvalidNodeProfile(f"a node carries at most {MAX_PROFILE_NAMES} {kind}s")
    for name in sorted(checked):
        if not isinstance(name, str) or PROFILE_NAME_PATTERN.fullmatch(name) is None:
            shown = name[:64] if isinstance(name, str) else type(name).__name__
            raise InvalidNodeProfile(
                f"{kind} {shown!r} must match [a-z0-9][a-z0-9-]{{0,62}}")
    return checked


MIN_UPLINK_BYTES = 1024
MAX_UPLINK_RATE = 1 << 30
MAX_UPLINK_BURST = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NodeLink:
    """The node's uplink limit set on the shore (§13.1): compressed bytes per second on the
    wire and the burst; a rate of 0 sets none (the ship's own `[ship]` limit, if any, holds).
    Ships apply the lower of this and their own."""

    uplink_rate: int = 0
    uplink_burst: int = 0

    @classmethod
    def of(cls, rate: int, burst: int = 0) -> NodeLink:
        """A checked limit; burst 0 takes an eighth of a second of the rate (at least 16 KiB).
        Raises InvalidNodeLink."""
        if rate == 0:
            if burst:
                raise InvalidNodeLink("a burst needs a rate")
            return cls()
        if not MIN_UPLINK_BYTES <= rate <= MAX_UPLINK_RATE:
            raise InvalidNodeLink(f"the uplink rate must be 0 (none) or {MIN_UPLINK_BYTES}.."
                                  f"{MAX_UPLINK_RATE} bytes per second")
        if burst == 0:
            burst = max(16 * 1024, rate // 8)
        if not MIN_UPLINK_BYTES <= burst <= MAX_UPLINK_BURST:
            raise InvalidNodeLink(f"the uplink burst must be {MIN_UPLINK_BYTES}.."
                                  f"{MAX_UPLINK_BURST} bytes")
        return cls(rate, burst)

    @property
    def limited(self) -> bool:
        return self.uplink_rate > 0


@dataclass(frozen=True, slots=True)
class Credential:
    """One issued signing secret, sealed; valid from `issued_at` until `valid_until` (None:
    until replaced)."""

    number: int
    sealed_secret: str
    issued_at: dt.datetime
    valid_until: dt.datetime | None = None

    def is_valid_at(self, now: dt.datetime) -> bool:
        return self.valid_until is None or now < self.valid_until


class Node(Aggregate):
    """A registered node. Every event records who did it, why, and when (the caller's clock)."""

    link = NodeLink()
    """The uplink limit set on the shore (none until `change_link`)."""

    @staticmethod
    def create_id(node_id: str) -> uuid.UUID:
        return node_uuid(node_id)

    @event("Registered")
    def __init__(
        self, node_id: str, sealed_secret: str, at: dt.datetime, actor: str, reason: str,
        trace_id: str = "",
    ) -> None:
        self.node_id = check_node_id(node_id)
        self.status = NodeStatus.ACTIVE
        self.credentials: list[Credential] = [Credential(1, sealed_secret, at)]
        self.registered_at = at
        self.registered_by = actor
        self.revoked_at: dt.datetime | None = None
        self.revoke_reason = ""
        self.profile = NodeProfile()

    @property
    def is_revoked(self) -> bool:
        return self.status is NodeStatus.REVOKED

    @property
    def next_credential_number(self) -> int:
        """The number the next rotation gives its credential (sealing binds it)."""
        return self.credentials[-1].number + 1

    def valid_credentials(self, now: dt.datetime) -> list[Credential]:
        """Credentials a request signed at `now` may use: the current one, plus rotated ones
        still inside their overlap."""
        if self.is_revoked:
            return []
        return [credential for credential in self.credentials if credential.is_valid_at(now)]

    def rotate(
        self, sealed_secret: str, at: dt.datetime, overlap: dt.timedelta, actor: str, reason: str,
        trace_id: str = "",
    ) -> None:
        """Issue a new credential; the ones still valid stay valid for `overlap` more."""
        if self.is_revoked:
            raise NodeRevoked(f"node {self.node_id} is revoked")
        if overlap < dt.timedelta(0):
            raise NodeError("the overlap cannot be negative")
        self._credential_rotated(sealed_secret, at, at + overlap, actor, reason, trace_id)

    @event("CredentialRotated")
    def _credential_rotated(
        self, sealed_secret: str, at: dt.datetime, old_valid_until: dt.datetime, actor: str,
        reason: str, trace_id: str,
    ) -> None:
        # Credentials that already expired are dropped; the events keep their history.
        kept = [
            credential if credential.valid_until is not None and
            credential.valid_until <= old_valid_until
            else Credential(credential.number, credential.sealed_secret, credential.issued_at,
                            old_valid_until)
            for credential in self.credentials if credential.is_valid_at(at)
        ]
        self.credentials = [*kept, Credential(self.next_credential_number, sealed_secret, at)]

    def change_profile(self, profile: NodeProfile, at: dt.datetime, actor: str, reason: str,
                       trace_id: str = "") -> None:
        """Give the node these groups and tags (replacing the ones it had)."""
        self._check_change("groups and tags", reason)
        checked = NodeProfile.of(profile.groups, profile.tags)
        self._profile_changed(sorted(checked.groups), sorted(checked.tags), at, actor, reason,
                              trace_id)

    @event("ProfileChanged")
    def _profile_changed(self, groups: list[str], tags: list[str], at: dt.datetime, actor: str,
                         reason: str, trace_id: str) -> None:
        self.profile = NodeProfile(frozenset(groups), frozenset(tags))

    def change_link(self, link: NodeLink, at: dt.datetime, actor: str, reason: str,
                    trace_id: str = "") -> None:
        """Give the node this uplink limit (rate 0: none); ships take it with their config."""
        self._check_change("uplink limit", reason)
        checked = NodeLink.of(link.uplink_rate, link.uplink_burst)
        self._link_changed(checked.uplink_rate, checked.uplink_burst, at, actor, reason,
                           trace_id)

    @event("LinkChanged")
    def _link_changed(self, uplink_rate: int, uplink_burst: int, at: dt.datetime, actor: str,
                      reason: str, trace_id: str) -> None:
        self.link = NodeLink(uplink_rate, uplink_burst)

    def _check_change(self, what: str, reason: str) -> None:
        if self.is_revoked:
            raise NodeRevoked(f"node {self.node_id} is revoked")
        if not reason.strip():
            raise NodeError(f"changing a node's {what} needs a reason")

    def revoke(self, at: dt.datetime, actor: str, reason: str, trace_id: str = "") -> None:
        """Refuse the node's requests from now on; what it already sent stays."""
        if self.is_revoked:
            raise NodeRevoked(f"node {self.node_id} is already revoked")
        if not reason.strip():
            raise NodeError("revoking a node needs a reason")
        self._revoked(at, actor, reason, trace_id)

    @event("Revoked")
    def _revoked(self, at: dt.datetime, actor: str, reason: str, trace_id: str) -> None:
        self.status = NodeStatus.REVOKED
        self.revoked_at = at
        self.revoke_reason = reason
