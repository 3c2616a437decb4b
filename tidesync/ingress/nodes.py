"""Node identities (§17.1): the `nodes` application, its commands, and the credential directory
that request authentication reads (cached a few seconds so a revoke takes effect quickly).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eventsourcing.persistence import PersistenceError

from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import NodeNotFound, NodesApplication, NodeStoreUnavailable
from tidesync.domain.node import (
    NODE_ID_PATTERN,
    NodeLink,
    NodeProfile,
    NodeStatus,
)

RandomBytes = Callable[[int], bytes]


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
    """What authentication knows of a node (None status means unknown), the groups and tags
    the rules it is offered are selected by, and the uplink limit its config carries."""

    node_id: str
    status: NodeStatus | None
    keys: tuple[SigningKey, ...] = ()
    profile: NodeProfile = field(default_factory=NodeProfile)
    link: NodeLink = field(default_factory=NodeLink)

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
        max_entries: int = 10_000, max_unknown: int = 10_000,
    ) -> None:
        self._open_app, self._open_box = open_app, open_box
        self._app: NodesApplication | None = None
        self._box: SecretBox | None = None
        self._ttl, self._monotonic, self._max_entries = ttl, monotonic, max_entries
        self._max_unknown = max_unknown
        self._entries: dict[str, _Entry] = {}
        # Unknown ids apart, oldest first: a flood of invented ids evicts only its own kind,
        # never the entries of real nodes.
        self._unknown: dict[str, float] = {}
        self._lock = threading.Lock()

    def cached(self, node_id: str, max_age: float | None = None) -> NodeCredentials | None:
        """The cached credentials if loaded less than `max_age` (default: the ttl) ago."""
        limit = self._ttl if max_age is None else min(max_age, self._ttl)
        entry = self._entries.get(node_id)
        if entry is not None:
            fresh = self._monotonic() - entry.loaded_at < limit
            return entry.credentials if fresh else None
        loaded_at = self._unknown.get(node_id)
        if loaded_at is None or self._monotonic() - loaded_at >= limit:
            return None
        return NodeCredentials(node_id, None)

    def lookup(self, node_id: str, max_age: float | None = None) -> NodeCredentials:
        """Credentials loaded less than `max_age` (default: the ttl) ago, reading the event
        store if needed; raises NodeStoreUnavailable or MasterKeyError."""
        credentials = self.cached(node_id, max_age)
        if credentials is None:
            credentials = self._load(node_id)
            self._remember(credentials)
        return credentials

    def _remember(self, credentials: NodeCredentials) -> None:
        node_id, now = credentials.node_id, self._monotonic()
        if credentials.status is None:
            self._entries.pop(node_id, None)
            self._unknown.pop(node_id, None)
            while len(self._unknown) >= self._max_unknown:
                del self._unknown[next(iter(self._unknown))]
            self._unknown[node_id] = now
            return
        self._unknown.pop(node_id, None)
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[node_id] = _Entry(credentials, now)

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
        return NodeCredentials(node_id, node.status, keys, node.profile, node.link)

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

