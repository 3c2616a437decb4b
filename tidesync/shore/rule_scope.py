"""Which received events the apply processor may write, and how (§10.2, rule authorization).

Two modes, decided per event:

* **No rules.** While the shore has released no rule at all and the event names none, each
  table is its own implicit rule (`table:DB.TABLE`) and `[apply.node_tables]` decides which
  tables a node may write, as before rules existed.
* **Rules.** Once any rule is offered, or when the event names a rule, the event must name a
  rule version the shore released, and that version must select the node, carry changes
  uplink, cover the event's table and keep every column the event carries
  (`tidesync.domain.rules.authorization`). `[apply.node_tables]` no longer plays a part. An
  authorized event is renamed to the rule's target table and columns here, before any target
  sees it, and carries the rule id and version the shore looked up, never the ship's word.

Released versions never change, so lookups are cached; a version the shore does not know and
a node's groups and tags are looked up again after a short while.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.clock import Monotonic
from tidesync.domain.rules.authorization import (
    RuleRefusal,
    implicit_rule,
    names_rule,
    refusal,
    shaped,
)
from tidesync.domain.rules.release import ReleasedRules
from tidesync.domain.rules.sync_rule import RULE_ID, Direction, SyncRule
from tidesync.shore.settings import NOT_AUTHORIZED, ApplyConfig

log = logging.getLogger(__name__)

LOOKUP_TTL_SECONDS = 30.0
"""How long an unknown rule version or a node's groups and tags are trusted from the cache."""
_CACHE_LIMIT = 4096
K = TypeVar("K")
V = TypeVar("V")


class NodeProfiles(Protocol):
    """A node's groups and tags, which rule selectors may name."""

    def profile(self, node_id: str) -> tuple[frozenset[str], frozenset[str]]:
        """(groups, tags) of the node; both empty for a node without any."""
        ...


@dataclass(frozen=True, slots=True)
class Admitted:
    """An event the processor may write: `event` as the target receives it (renamed under a
    rule), the rule id it is recorded under, and whether it is applied by key without sync
    metadata (`one_way`: an UPLINK rule, §5.3)."""

    event: ChangeEvent
    rule_id: str
    one_way: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    """An event that is never written: the reason code and the implicit rule of its table
    (the rule it named is not taken on trust)."""

    event: ChangeEvent
    reason_code: str
    rule_id: str


class RuleScope:
    """Decides every decoded event of a chunk: `admit(events)`."""

    def __init__(self, rules: ReleasedRules | None, profiles: NodeProfiles | None,
                 fallback: ApplyConfig, monotonic: Monotonic = time.monotonic) -> None:
        self._rules = rules
        self._profiles = profiles
        self._fallback = fallback
        self._monotonic = monotonic
        self._rules_exist = False
        self._known: dict[tuple[str, int], SyncRule] = {}
        self._unknown: dict[tuple[str, int], float] = {}
        self._nodes: dict[str, tuple[frozenset[str], frozenset[str], float]] = {}

    @property
    def rules_mode(self) -> bool:
        """Whether a rule has been seen released (from then on, every event needs a rule)."""
        return self._rules_exist

    def admit(self, events: Sequence[ChangeEvent]) -> list[Admitted | Refused]:
        """Each event's decision, in order. Asks for the offered rules at most once a chunk
        while none was seen."""
        if not self._rules_exist and self._rules is not None and events:
            self._rules_exist = bool(self._rules.offered())
        decisions = [self._decide(event) for event in events]
        self._log_refusals(decisions)
        return decisions

    def _decide(self, event: ChangeEvent) -> Admitted | Refused:
        if not self._rules_exist and not names_rule(event):
            if self._fallback.allows(event.origin_node_id, event.database, event.table):
                if event.rule_id is not None or event.rule_version is not None:
                    # An implicit rule's id is derived here, not taken from the ship.
                    event = dataclasses.replace(event, rule_id=None, rule_version=None)
                return Admitted(event, implicit_rule(event))
            return Refused(event, NOT_AUTHORIZED, implicit_rule(event))
        rule = self._released(event)
        groups, tags = self._profile(event.origin_node_id) if rule is not None else ((), ())
        reason = refusal(rule, event, groups, tags)
        if reason is not None or rule is None:
            return Refused(event, (reason or RuleRefusal.RULE_NOT_RELEASED).value,
                           implicit_rule(event))
        return Admitted(shaped(rule, event), rule.rule_id,
                        one_way=rule.direction is Direction.UPLINK)

    def _released(self, event: ChangeEvent) -> SyncRule | None:
        rule_id, version = event.rule_id, event.rule_version
        if self._rules is None or not rule_id or version is None or not RULE_ID.fullmatch(
                rule_id):
            return None
        key = (rule_id, version)
        known = self._known.get(key)
        if known is not None:
            return known
        now = self._monotonic()
        until = self._unknown.get(key)
        if until is not None and now < until:
            return None
        found = self._rules.released(rule_id, version)
        if found is None:
            _bounded(self._unknown)[key] = now + LOOKUP_TTL_SECONDS
        else:
            self._unknown.pop(key, None)
            _bounded(self._known)[key] = found
            self._rules_exist = True
        return found

    def _profile(self, node_id: str) -> tuple[frozenset[str], frozenset[str]]:
        if self._profiles is None:
            return frozenset(), frozenset()
        now = self._monotonic()
        cached = self._nodes.get(node_id)
        if cached is not None and now < cached[2]:
            return cached[0], cached[1]
        groups, tags = self._profiles.profile(node_id)
        _bounded(self._nodes)[node_id] = (groups, tags, now + LOOKUP_TTL_SECONDS)
        return groups, tags

    @staticmethod
    def _log_refusals(decisions: Sequence[Admitted | Refused]) -> None:
        counts = Counter((d.event.origin_node_id, d.reason_code)
                         for d in decisions if isinstance(d, Refused))
        for (node_id, reason_code), count in sorted(counts.items()):
            log.warning("refused %d event(s) of node %s: %s", count, node_id, reason_code)


def _bounded(cache: dict[K, V]) -> dict[K, V]:
    """The cache, emptied first when it is full (ids from ships must not grow it forever)."""
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    return cache
