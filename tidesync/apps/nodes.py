"""Node identities (§17.1): the `nodes` application and its commands (register, rotate,
revoke, groups and tags, show, list).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError

from tidesync.apps.master_key import MasterKeyError, SecretBox
from tidesync.apps.recorder import created_ids
from tidesync.domain.errors import ErrorCode, Unavailable
from tidesync.domain.node import (
    SECRET_BYTES,
    Node,
    NodeError,
    NodeLink,
    NodeProfile,
    NodeStatus,
    check_node_id,
    node_uuid,
    secret_text,
)

RandomBytes = Callable[[int], bytes]


class NodeNotFound(NodeError):
    code = ErrorCode.NOT_FOUND


class NodeAlreadyRegistered(NodeError):
    code = ErrorCode.ALREADY_EXISTS


class NodeIdReserved(NodeError):
    """The id names the shore itself (or another id the shore keeps for its own rows)."""

    code = ErrorCode.REFUSED


RESERVED_NODE_IDS = frozenset({"shore"})
"""Node ids never registered for a ship: the shore's own origin on the rows it writes."""


class NodeStoreUnavailable(Unavailable):
    """The event store holding the nodes could not be read."""


class NodesApplication(Application[uuid.UUID]):
    """The Node streams, in their own events table."""

    name = "nodes"

    def node(self, node_id: str) -> Node:
        try:
            node: Node = self.repository.get(node_uuid(node_id))
        except AggregateNotFoundError:
            raise NodeNotFound(f"node {node_id} is not registered") from None
        return node

    def node_ids(self) -> list[str]:
        """Every registered node id, in registration order."""
        ids = created_ids(self, Node.Registered)  # type: ignore[attr-defined]
        return [self.repository.get(aggregate_id).node_id for aggregate_id in ids]

    def active_profiles(self) -> dict[str, NodeProfile]:
        """The groups and tags of every registered node that is not revoked, by node id."""
        nodes: list[Node] = [self.repository.get(aggregate_id) for aggregate_id in
                             created_ids(self, Node.Registered)]  # type: ignore[attr-defined]
        return {node.node_id: node.profile for node in nodes if not node.is_revoked}


# ----------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class IssuedSecret:
    """A freshly issued signing secret: shown once, stored only sealed."""

    node_id: str
    number: int
    secret: bytes

    @property
    def text(self) -> str:
        return secret_text(self.secret)


@dataclass(frozen=True)
class NodeSummary:
    node_id: str
    status: NodeStatus
    registered_at: dt.datetime
    valid_credentials: int
    credentials_expiring: dt.datetime | None
    revoked_at: dt.datetime | None
    revoke_reason: str
    profile: NodeProfile = field(default_factory=NodeProfile)
    link: NodeLink = field(default_factory=NodeLink)


@dataclass(frozen=True)
class Actor:
    """Who runs a node command, why, and the trace id that ties its events together."""

    name: str
    reason: str
    trace_id: str = ""


class NodeService:
    """Register, rotate, revoke and list nodes; each command is one saved event. `box` seals
    new secrets (only register and rotate need it)."""

    def __init__(self, app: NodesApplication, box: SecretBox | None,
                 random_bytes: RandomBytes = os.urandom,
                 reserved: frozenset[str] = RESERVED_NODE_IDS) -> None:
        self.app = app
        self.box = box
        self.random_bytes = random_bytes
        self.reserved = RESERVED_NODE_IDS | reserved

    def register(self, node_id: str, actor: Actor, now: dt.datetime) -> IssuedSecret:
        check_node_id(node_id)
        if node_id in self.reserved:
            raise NodeIdReserved(f"node id {node_id} is reserved for the shore")
        if self._exists(node_id):
            raise NodeAlreadyRegistered(f"node {node_id} is already registered")
        secret = self.random_bytes(SECRET_BYTES)
        node = Node(node_id=node_id, sealed_secret=self._seal(secret, node_id, 1), at=now,
                    actor=actor.name, reason=actor.reason, trace_id=actor.trace_id)
        try:
            self.app.save(node)
        except IntegrityError:
            raise NodeAlreadyRegistered(f"node {node_id} is already registered") from None
        return IssuedSecret(node_id, 1, secret)

    def rotate(self, node_id: str, overlap: dt.timedelta, actor: Actor,
               now: dt.datetime) -> IssuedSecret:
        node = self.app.node(node_id)
        number = node.next_credential_number
        secret = self.random_bytes(SECRET_BYTES)
        node.rotate(self._seal(secret, node_id, number), now, overlap, actor.name, actor.reason,
                    actor.trace_id)
        self.app.save(node)
        return IssuedSecret(node_id, number, secret)

    def revoke(self, node_id: str, actor: Actor, now: dt.datetime) -> None:
        self._saved(node_id, lambda node: node.revoke(now, actor.name, actor.reason,
                                                      actor.trace_id))

    def change_profile(self, node_id: str, profile: NodeProfile, actor: Actor,
                       now: dt.datetime) -> NodeProfile:
        """Give the node these groups and tags; returns the profile it now has."""
        return self._saved(node_id, lambda node: node.change_profile(
            profile, now, actor.name, actor.reason, actor.trace_id)).profile

    def change_link(self, node_id: str, link: NodeLink, actor: Actor,
                    now: dt.datetime) -> NodeLink:
        """Give the node this uplink limit; returns the one it now has (burst filled in)."""
        return self._saved(node_id, lambda node: node.change_link(
            link, now, actor.name, actor.reason, actor.trace_id)).link

    def _saved(self, node_id: str, change: Callable[[Node], None]) -> Node:
        """The node after `change`, saved."""
        node = self.app.node(node_id)
        change(node)
        self.app.save(node)
        return node

    def show(self, node_id: str, now: dt.datetime) -> NodeSummary:
        return _summary(self.app.node(node_id), now)

    def list(self, now: dt.datetime) -> list[NodeSummary]:
        return [_summary(self.app.node(node_id), now) for node_id in self.app.node_ids()]

    def _exists(self, node_id: str) -> bool:
        try:
            self.app.node(node_id)
        except NodeNotFound:
            return False
        return True

    def _seal(self, secret: bytes, node_id: str, number: int) -> str:
        if self.box is None:
            raise MasterKeyError("issuing a secret needs the master key")
        return self.box.seal(secret, node_id, number, self.random_bytes(12))


def _summary(node: Node, now: dt.datetime) -> NodeSummary:
    valid = node.valid_credentials(now)
    ends = [c.valid_until for c in valid if c.valid_until is not None]
    return NodeSummary(
        node_id=node.node_id, status=node.status, registered_at=node.registered_at,
        valid_credentials=len(valid), credentials_expiring=min(ends) if ends else None,
        revoked_at=node.revoked_at, revoke_reason=node.revoke_reason, profile=node.profile,
        link=node.link,
    )


