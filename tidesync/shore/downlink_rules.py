"""Shore changes sent to ships under sync rules (§8, §12): which nodes get a change and in what
shape.

Once the shore offers any rule, a change of the shore table T travels under every offered rule
whose target is T and whose direction includes the downlink (DOWNLINK or BIDIRECTIONAL), to
the registered, unrevoked nodes its selector picks (node ids, groups, tags). The rule's shape
is applied in reverse: the shore's column names go back to the ship's (the rename map read
backwards), the record names the rule's source table (the ship's), excluded and sensitive
columns are dropped (an include list keeps only its columns and the key), and the row filter
decides with the ship runtime's semantics: a change travels when the row matches after it or
matched before it, an UPDATE that changed no kept column travels not at all. Transforms are
not applied: they shape what leaves a ship, and a shore value reaches the ship as it is. A
DOWNLINK rule with transforms sends nothing (ships refuse it too): its author expects values
changed that would not be.

A node gets one command per shore change: when several rules target the table and select the
same node, the first by rule id decides for it. The command names the rule and its version;
a DOWNLINK-only rule's command says `by_key`, so the ship applies it by key, without
revisions, to a table that carries no sync metadata.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey
from tidesync.domain.conflict_case import is_sync_column
from tidesync.domain.downlink_command import RowChangePayload
from tidesync.domain.errors import TidesyncError
from tidesync.domain.node import NodeProfile
from tidesync.domain.rules.release import ReleasedRules
from tidesync.domain.rules.runtime import CompiledRule, Filtered, ShapeFailed
from tidesync.domain.rules.sync_rule import Direction, SyncRule
from tidesync.domain.rules.transforms import TransformContext
from tidesync.domain.values import Row, Value, frozen_row

log = logging.getLogger(__name__)

_NO_MASK = TransformContext(mask_key=b"")


class DownlinkSkip(enum.StrEnum):
    """Why a shore change goes to no node under the offered rules (shore_cdc_event reason)."""

    NO_RULE = "NO_RULE"                    # no offered downlink rule targets its table
    NO_NODE = "NO_NODE"                    # the rules select no registered, unrevoked node
    ROW_FILTER = "ROW_FILTER"              # the row filter leaves the change out
    NO_SYNCED_CHANGE = "NO_SYNCED_CHANGE"  # an UPDATE of columns no rule sends
    RULE_SHAPE_FAILED = "RULE_SHAPE_FAILED"  # two shore columns map to one ship column


def row_change_payload(event: ChangeEvent, origin_node_id: str) -> RowChangePayload:
    """The command payload of a local shore change: the after image's non-key business
    columns, the revision the ship's row must have and the one it gets."""
    values = None
    if event.operation is not Operation.DELETE and event.after is not None:
        keys = set(event.record.as_dict())
        values = frozen_row((name, value) for name, value in event.after.items()
                            if name not in keys and not is_sync_column(name))
    return RowChangePayload(event.record, event.operation, values, event.base_revision,
                            event.result_revision, origin_node_id, event.event_id)


# ----------------------------------------------------------------------------- one rule


class ReverseRule:
    """One downlink rule made ready for shore changes of its target table."""

    def __init__(self, rule: SyncRule) -> None:
        self.rule = rule
        self.by_key = rule.direction is Direction.DOWNLINK
        self._to_source = {target.lower(): source for source, target in rule.rename.items()}
        # The runtime's filter, column selection and NO_SYNCED_CHANGE test, on the image in
        # ship names: no rename and no transforms left, the ship's table as the target.
        database, table = rule.source
        self._compiled = CompiledRule(dataclasses.replace(
            rule, rename=MappingProxyType({}), transforms=(), target_database=database,
            target_table=table))

    def source_column(self, column: str) -> str:
        """The ship's name of a shore column (the rename map read backwards)."""
        return self._to_source.get(column.lower(), column)

    def shape(self, event: ChangeEvent) -> ChangeEvent | Filtered | ShapeFailed:
        """The change as this rule's ships get it, or why none get it."""
        try:
            renamed = dataclasses.replace(
                event, record=self._record(event.record), before=self._image(event.before),
                after=self._image(event.after))
        except _Collision as collision:
            return ShapeFailed(self.rule.rule_id, str(collision))
        outcome = self._compiled.shape(renamed, _NO_MASK)
        if isinstance(outcome, Filtered | ShapeFailed):
            return outcome
        return outcome.event

    def payload(self, event: ChangeEvent, origin_node_id: str
                ) -> RowChangePayload | Filtered | ShapeFailed:
        """The command payload this rule's ships get for a shore change, or why none."""
        shaped = self.shape(event)
        if isinstance(shaped, Filtered | ShapeFailed):
            return shaped
        payload = dataclasses.replace(
            row_change_payload(shaped, origin_node_id), rule_id=self.rule.rule_id,
            rule_version=self.rule.version, by_key=self.by_key)
        if self.by_key:  # nothing to compare on the ship: no revisions travel
            payload = dataclasses.replace(payload, expected_local_revision=None,
                                          result_revision=None)
        return payload

    def _record(self, record: RecordKey) -> RecordKey:
        database, table = self.rule.source
        key = tuple((self.source_column(name), value) for name, value in record.primary_key)
        if len({name.lower() for name, _ in key}) != len(key):
            raise _Collision(f"rule {self.rule.rule_id}: two key columns map to one ship column")
        return RecordKey(database, table, key, record.schema)

    def _image(self, image: Row | None) -> dict[str, Value] | None:
        if image is None:
            return None
        renamed = {self.source_column(name): value for name, value in image.items()}
        if len(renamed) != len(image):
            raise _Collision(f"rule {self.rule.rule_id}: two shore columns map to one ship "
                             "column")
        return renamed


class _Collision(TidesyncError, ValueError):
    """Renaming back would give two shore columns one ship name."""


# ----------------------------------------------------------------------------- the rule set


class NodeDirectory(Protocol):
    """Registered nodes that are not revoked, with their groups and tags
    (`NodesApplication.active_profiles`)."""

    def active_profiles(self) -> Mapping[str, NodeProfile]: ...


@dataclass(frozen=True, slots=True)
class Routed:
    """A shore change's commands under rules: one payload per node."""

    payloads: Mapping[str, RowChangePayload]
    skip: DownlinkSkip | None = None


@dataclass(frozen=True)
class DownlinkRoutes:
    """The offered downlink rules by target table and the nodes they may select, as read at
    one moment."""

    by_target: Mapping[tuple[str, str], tuple[ReverseRule, ...]]
    profiles: Mapping[str, NodeProfile]
    rules_offered: bool

    @classmethod
    def of(cls, offered: Sequence[SyncRule], profiles: Mapping[str, NodeProfile],
           warned: set[tuple[str, int]] | None = None) -> DownlinkRoutes:
        """`warned`: rule versions already logged as unusable (logged once each)."""
        warned = set() if warned is None else warned
        by_target: dict[tuple[str, str], list[ReverseRule]] = {}
        for rule in sorted(offered, key=lambda rule: rule.rule_id):
            if rule.direction is Direction.DOWNLINK and rule.transforms:
                if (rule.rule_id, rule.version) not in warned:
                    warned.add((rule.rule_id, rule.version))
                    log.warning("rule %s@%d is DOWNLINK with transforms: nothing is sent "
                                "under it", rule.rule_id, rule.version)
            elif rule.direction.downlink:
                by_target.setdefault(rule.target, []).append(ReverseRule(rule))
        return cls({key: tuple(rules) for key, rules in by_target.items()}, dict(profiles),
                   bool(offered))

    def two_way(self, database: str, table: str) -> bool:
        """Whether a BIDIRECTIONAL rule targets the table: its changes need the loop check and
        revisions, so the table must be one of `[downlink].bidirectional_tables`."""
        return any(not reverse.by_key for reverse in self.by_target.get((database, table), ()))

    def route(self, event: ChangeEvent, origin_node_id: str) -> Routed:
        """Each selected node's payload for a shore change, or why there is none."""
        rules = self.by_target.get((event.database, event.table), ())
        if not rules:
            return Routed({}, DownlinkSkip.NO_RULE)
        payloads: dict[str, RowChangePayload] = {}
        skip = DownlinkSkip.NO_NODE
        for reverse in rules:
            selector = reverse.rule.selector
            nodes = sorted(node for node, profile in self.profiles.items()
                           if node not in payloads
                           and selector.matches(node, profile.groups, profile.tags))
            if not nodes:
                continue
            payload = reverse.payload(event, origin_node_id)
            if isinstance(payload, ShapeFailed):
                log.warning("shore change not sent under a rule: %s", payload.detail)
                skip = DownlinkSkip.RULE_SHAPE_FAILED
                continue
            if isinstance(payload, Filtered):
                skip = DownlinkSkip(payload.reason.value)
                continue
            for node in nodes:
                payloads[node] = payload
        return Routed(payloads, None if payloads else skip)


class DownlinkRules:
    """The offered rules and the nodes' profiles, read again every `ttl` seconds (a new rule
    version or a node's new group counts from then on). `current()` is one consistent view."""

    def __init__(self, rules: ReleasedRules, open_nodes: Callable[[], NodeDirectory],
                 ttl: float = 10.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._rules = rules
        self._open_nodes = open_nodes
        self._nodes: NodeDirectory | None = None
        self._ttl, self._monotonic = ttl, monotonic
        self._cached: tuple[float, DownlinkRoutes] | None = None
        self._warned: set[tuple[str, int]] = set()

    def current(self) -> DownlinkRoutes:
        now = self._monotonic()
        if self._cached is None or now - self._cached[0] >= self._ttl:
            offered = [rule for rule, _ in self._rules.offered()]
            profiles: Mapping[str, NodeProfile] = {}
            if any(rule.direction.downlink for rule in offered):
                if self._nodes is None:
                    self._nodes = self._open_nodes()
                profiles = self._nodes.active_profiles()
            self._cached = (now, DownlinkRoutes.of(offered, profiles, self._warned))
        return self._cached[1]

    def close(self) -> None:
        for part in (self._nodes, self._rules):
            closer = getattr(part, "close", None)
            if closer is not None:
                closer()
        self._nodes = None
