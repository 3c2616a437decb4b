"""GET /sync/v1/config (§8.2, §9.2): the released rules that select a node, the version of that
set (what heartbeats compare to decide whether a ship should fetch again), and its control
parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eventsourcing.persistence import PersistenceError

from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.domain.node import NodeLink, NodeProfile
from tidesync.domain.rules.release import ReleasedRules, ReleaseStatus
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.wire import sync_pb2 as pb

NO_RULES_VERSION = "none"
"""The config version of a node no released rule selects."""
OFFER_TTL_SECONDS = 5.0
"""How long the offered rules are reused before `ReleasedRules` is read again: a publish or
rollback reaches the API within this bound."""


class RulesUnavailable(Unavailable):
    """The released rules could not be read (the event store is down)."""


class NoSuchRelease(TidesyncError):
    code = ErrorCode.NOT_FOUND


class NoReleasedRules:
    """An installation without rule releases: nothing is offered, nothing was released."""

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        return []

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return None

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise NoSuchRelease(f"rule {rule_id} version {version} was never released")


@dataclass(frozen=True, slots=True)
class OfferedRule:
    """One offered release, its canonical content and checksum computed once."""

    rule: SyncRule
    status: ReleaseStatus
    content: bytes
    checksum: bytes

    @classmethod
    def of(cls, rule: SyncRule, status: ReleaseStatus) -> OfferedRule:
        return cls(rule, status, rule.canonical(), rule.checksum())

    def snapshot(self) -> pb.RuleSnapshot:
        return pb.RuleSnapshot(rule_id=self.rule.rule_id, version=self.rule.version,
                               status=self.status.value,
                               content=self.content, checksum=self.checksum)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The rules offered to one node, ordered by rule id, and the version of that set."""

    version: str
    rules: tuple[OfferedRule, ...]


def config_version(rules: Sequence[OfferedRule]) -> str:
    """A digest of which rule versions a node is offered, stable across processes: the same
    (rule id, version, checksum) set gives the same version, whatever the order or status."""
    if not rules:
        return NO_RULES_VERSION
    listing = sorted([r.rule.rule_id, r.rule.version, r.checksum.hex()] for r in rules)
    digest = hashlib.sha256(json.dumps(listing, separators=(",", ":")).encode("ascii"))
    return "sha256:" + digest.hexdigest()


class RuleOffer:
    """Which rules each node is offered, from `ReleasedRules`, read at most once per `ttl`
    seconds (a heartbeat of every node must not replay the release streams)."""

    def __init__(self, released: ReleasedRules, ttl: float = OFFER_TTL_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.released, self.ttl, self.monotonic = released, ttl, monotonic
        self._offered: tuple[OfferedRule, ...] = ()
        self._loaded_at: float | None = None
        self._lock = threading.Lock()

    def for_node(self, node_id: str, profile: NodeProfile) -> NodeConfig:
        """The rules whose selector matches the node; raises RulesUnavailable."""
        chosen = tuple(offer for offer in self.offered() if offer.rule.selector.matches(
            node_id, profile.groups, profile.tags))
        return NodeConfig(config_version(chosen), chosen)

    def close(self) -> None:
        """Release the rule store, when it holds anything (connections)."""
        close = getattr(self.released, "close", None)
        if close is not None:
            close()

    def offered(self) -> tuple[OfferedRule, ...]:
        with self._lock:
            now = self.monotonic()
            if self._loaded_at is None or now - self._loaded_at >= self.ttl:
                self._offered = self._load()
                self._loaded_at = now
            return self._offered

    def _load(self) -> tuple[OfferedRule, ...]:
        try:
            offered = self.released.offered()
        except PersistenceError as error:
            raise RulesUnavailable(type(error).__name__) from error
        return tuple(sorted((OfferedRule.of(rule, status) for rule, status in offered),
                            key=lambda offer: offer.rule.rule_id))


def with_link(config: NodeConfig, link: NodeLink) -> NodeConfig:
    """The node's config with its uplink limit in the version, so that a ship whose limit
    changed is told to fetch its config again (no limit: the rules' version as it was)."""
    if not link.limited:
        return config
    return dataclasses.replace(
        config, version=f"{config.version}+uplink:{link.uplink_rate}/{link.uplink_burst}")


def config_response(config: NodeConfig, control: pb.ControlParameters) -> pb.ConfigResponse:
    return pb.ConfigResponse(config_version=config.version,
                             rules=[offer.snapshot() for offer in config.rules],
                             control=control)
