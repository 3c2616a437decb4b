"""Node identities (§17.1): the `nodes` application, its commands, and the credential directory
that request authentication reads (cached a few seconds so a revoke takes effect quickly).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.utils import get_topic

from tidesync.domain.errors import Unavailable
from tidesync.domain.node import (
    NODE_ID_PATTERN,
    Node,
    NodeError,
    NodeStatus,
    check_node_id,
    node_uuid,
)
from tidesync.ingress.master_key import MasterKeyError, SecretBox
from tidesync.wire.signing import SECRET_BYTES, secret_text

RandomBytes = Callable[[int], bytes]


class NodeNotFound(NodeError):
    pass


class NodeAlreadyRegistered(NodeError):
    pass


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
        topic = get_topic(Node.Registered)  # type: ignore[attr-defined]
        ids: list[uuid.UUID] = []
        start = 1
        while True:
            page = self.recorder.select_notifications(start, 500, topics=[topic])
            ids += [uuid.UUID(str(n.originator_id)) for n in page]
            if len(page) < 500:
                break
            start = page[-1].id + 1
        return [self.repository.get(aggregate_id).node_id for aggregate_id in ids]






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
                 random_bytes: RandomBytes = os.urandom) -> None:
        self.app = app
        self.box = box
        self.random_bytes = random_bytes

    def register(self, node_id: str, actor: Actor, now: dt.datetime) -> IssuedSecret:
        check_node_id(node_id)
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
        node = self.app.node(node_id)
        node.revoke(now, actor.name, actor.reason, actor.trace_id)
        self.app.save(node)

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
        revoked_at=node.revoked_at, revoke_reason=node.revoke_reason,
    )


# ----------------------------------------------------------------------------- directory


@dataclass(frozen=True, slots=True)
class SigningKey:
    """An opened signing secret and the end of its validity (None: until rotated)."""

    secret: bytes
    valid_until: dt.datetime | None

    def is_valid_at(self, now: dt.datetime) -> bool:
        return self.valid_until is None or now < self.valid_until


@dataclass(frozen=True, slots=True)
class NodeCredentials:
    """What authentication knows of a node: None status means unknown."""

    node_id: str
    status: NodeStatus | None
    keys: tuple[SigningKey, ...] = ()

    def secrets_at(self, now: dt.datetime) -> list[bytes]:
        return [key.secret for key in self.keys if key.is_valid_at(now)]


@dataclass(frozen=True, slots=True)
class _Entry:
    credentials: NodeCredentials
    loaded_at: float


class NodeDirectory:
    """Node credentials by node id, read from the nodes application and cached for `ttl`
    seconds (unknown ids too), so a revoke or rotation is seen within that bound.

    `lookup` blocks (event store reads): call it off the event loop. `cached` never blocks.
    """

    def __init__(
        self, open_app: Callable[[], NodesApplication], open_box: Callable[[], SecretBox],
        ttl: float = 5.0, monotonic: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self._open_app, self._open_box = open_app, open_box
        self._app: NodesApplication | None = None
        self._box: SecretBox | None = None
        self._ttl, self._monotonic, self._max_entries = ttl, monotonic, max_entries
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def cached(self, node_id: str, max_age: float | None = None) -> NodeCredentials | None:
        """The cached credentials if loaded less than `max_age` (default: the ttl) ago."""
        entry = self._entries.get(node_id)
        limit = self._ttl if max_age is None else min(max_age, self._ttl)
        if entry is None or self._monotonic() - entry.loaded_at >= limit:
            return None
        return entry.credentials

    def lookup(self, node_id: str, max_age: float | None = None) -> NodeCredentials:
        """Credentials loaded less than `max_age` (default: the ttl) ago, reading the event
        store if needed; raises NodeStoreUnavailable or MasterKeyError."""
        credentials = self.cached(node_id, max_age)
        if credentials is None:
            credentials = self._load(node_id)
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            self._entries[node_id] = _Entry(credentials, self._monotonic())
        return credentials

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
            self._app = None

    def _load(self, node_id: str) -> NodeCredentials:
        if NODE_ID_PATTERN.fullmatch(node_id) is None:
            return NodeCredentials(node_id, None)
        try:
            node = self._nodes().node(node_id)
        except NodeNotFound:
            return NodeCredentials(node_id, None)
        except PersistenceError as error:
            raise NodeStoreUnavailable(type(error).__name__) from error
        if node.is_revoked:
            return NodeCredentials(node_id, NodeStatus.REVOKED)
        box = self._secret_box()
        keys = tuple(
            SigningKey(box.open(c.sealed_secret, node_id, c.number), c.valid_until)
            for c in node.credentials
        )
        return NodeCredentials(node_id, node.status, keys)

    def _nodes(self) -> NodesApplication:
        with self._lock:
            if self._app is None:
                try:
                    self._app = self._open_app()
                except PersistenceError as error:
                    raise NodeStoreUnavailable(type(error).__name__) from error
            return self._app

    def _secret_box(self) -> SecretBox:
        with self._lock:
            if self._box is None:
                self._box = self._open_box()
            return self._box

