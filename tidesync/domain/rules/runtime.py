"""The rule runtime (§8.3): what one node's active rules make of one normalized change event.

Pure: rule match → row filter → column selection → transforms →
rule id, version and business time on the event. The loop check happens before, on the event
as captured; the size check after, on the shaped event.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.errors import TidesyncError
from tidesync.domain.rules.filter import RowFilter
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.rules.transforms import (
    TransformContext,
    TransformError,
    TransformSpec,
    apply_transforms,
)
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.values import Row, Value

_METADATA = frozenset(name.lower() for name in METADATA_COLUMNS)


class FilterReason(enum.StrEnum):
    """Why the runtime sends nothing for an event."""

    NO_RULE = "NO_RULE"                   # no active uplink rule covers its table
    ROW_FILTER = "ROW_FILTER"             # the rule's row filter leaves the change out
    NO_SYNCED_CHANGE = "NO_SYNCED_CHANGE"  # an UPDATE that changed only columns not synced


@dataclass(frozen=True, slots=True)
class Shaped:
    """The event as the shore gets it."""

    event: ChangeEvent


@dataclass(frozen=True, slots=True)
class Filtered:
    """Nothing is sent: the record is passed like a skipped one (no row, no sequence)."""

    reason: FilterReason
    rule_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShapeFailed:
    """The rule cannot be applied to this event; `detail` names rule and column, no value."""

    rule_id: str
    detail: str


ShapeOutcome: TypeAlias = Shaped | Filtered | ShapeFailed


# --------------------------------------------------------------------------- one rule


class CompiledRule:
    """One rule made ready for events: its filter parsed and its column sets lower-cased."""

    def __init__(self, rule: SyncRule) -> None:
        self.rule = rule
        self.row_filter: RowFilter | None = rule.parsed_filter()
        self.key = frozenset(name.lower() for name in rule.key_columns)
        self.dropped = rule.dropped()
        self.include = frozenset(name.lower() for name in rule.include_columns)
        self.business_time = rule.business_time_column.lower()

    def keeps(self, column: str, key: frozenset[str] = frozenset()) -> bool:
        """Key columns (the rule's and the row's own primary key) always; the sync metadata
        unless dropped by name; else the selection."""
        lowered = column.lower()
        if lowered in self.key or lowered in key:
            return True
        if lowered in self.dropped:
            return False
        return lowered in _METADATA or not self.include or lowered in self.include

    def shape(self, event: ChangeEvent, context: TransformContext) -> ShapeOutcome:
        """The event this rule makes of `event` (whose table it covers)."""
        business_time = self._business_time(event)
        if not self._passes(event, business_time):
            return Filtered(FilterReason.ROW_FILTER, self.rule.rule_id)
        key_columns = frozenset(name.lower() for name, _ in event.record.primary_key)
        try:
            before = self._image(event.before, key_columns, context)
            after = self._image(event.after, key_columns, context)
        except _ShapeError as error:
            return ShapeFailed(self.rule.rule_id, str(error))
        # Names stay the ship's: the shore maps them to the rule's target table and columns
        # after checking the event against the rule, and the record key (part of the event
        # id) is never changed, as key columns take no transform.
        shaped = dataclasses.replace(
            event, before=before, after=after, rule_id=self.rule.rule_id,
            rule_version=self.rule.version, business_occurred_at=business_time)
        if (event.operation is Operation.UPDATE and not shaped.changed_columns()
                and event.base_revision == event.result_revision):
            return Filtered(FilterReason.NO_SYNCED_CHANGE, self.rule.rule_id)
        return Shaped(shaped)

    # ------------------------------------------------------------------ steps

    def _passes(self, event: ChangeEvent, business_time: dt.datetime | None) -> bool:
        """A change travels when the row matches after it, or matched before it: a row that
        leaves the filter takes its last change along, a deleted row its delete."""
        if self.row_filter is None:
            return True
        return any(self.row_filter.matches(image, business_time)
                   for image in (event.after, event.before) if image is not None)

    def _business_time(self, event: ChangeEvent) -> dt.datetime | None:
        if not self.business_time:
            return None
        image = event.after if event.after is not None else event.before
        value = None if image is None else _value_of(image, self.business_time)
        if isinstance(value, dt.datetime):
            return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        if isinstance(value, dt.date):
            return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
        return None

    def _image(self, image: Row | None, key_columns: frozenset[str],
               context: TransformContext) -> dict[str, Value] | None:
        if image is None:
            return None
        return self._transformed({name: value for name, value in image.items()
                                  if self.keeps(name, key_columns)}, context)

    def _transformed(self, row: dict[str, Value], context: TransformContext
                     ) -> dict[str, Value]:
        for spec in self.rule.transforms:
            row = _apply(self.rule.rule_id, spec, row, context)
        return row


class _ShapeError(TidesyncError):
    """Internal: a rule step failed; becomes a ShapeFailed naming rule and column."""


def _apply(rule_id: str, spec: TransformSpec, row: dict[str, Value],
           context: TransformContext) -> dict[str, Value]:
    try:
        return apply_transforms((spec,), row, context)
    except TransformError:
        # The transform's message may describe the value; the detail names only the column.
        raise _ShapeError(f"rule {rule_id}: transform {spec.ref()} cannot be applied to "
                          f"column {spec.column}") from None


def _value_of(row: Mapping[str, Value], lowered: str) -> Value:
    return next((value for name, value in row.items() if name.lower() == lowered), None)


# --------------------------------------------------------------------------- a rule set


class RuleSet:
    """The uplink rules one node runs. An empty set is the implicit one — every table is its own
    rule and events pass unchanged (an installation that never had rules) — unless it is
    `explicit`: a node whose rules were all withdrawn sends nothing."""

    def __init__(self, rules: Iterable[SyncRule] = (), *, explicit: bool = False) -> None:
        self.rules = tuple(sorted(rules, key=lambda rule: rule.rule_id))
        self.explicit = explicit
        self._by_source: dict[tuple[str, str], CompiledRule] = {}
        for rule in self.rules:
            if rule.direction.uplink:
                self._by_source.setdefault(rule.source, CompiledRule(rule))

    @property
    def implicit(self) -> bool:
        return not self.rules and not self.explicit

    def versions(self) -> dict[str, int]:
        return {rule.rule_id: rule.version for rule in self.rules}

    def rule_for(self, database: str, table: str) -> CompiledRule | None:
        return self._by_source.get((database, table))

    def shape(self, event: ChangeEvent, context: TransformContext) -> ShapeOutcome:
        if self.implicit:
            return Shaped(event)
        compiled = self.rule_for(event.database, event.table)
        if compiled is None:
            return Filtered(FilterReason.NO_RULE)
        return compiled.shape(event, context)

    def uses_mask_key(self) -> bool:
        return any(spec.name == "hmac_mask" for rule in self.rules for spec in rule.transforms)


def covering_conflicts(rules: Iterable[SyncRule]) -> dict[str, str]:
    """rule id → the rule id that already covers its source table uplink (the first by id):
    one table's changes follow one rule, so a second uplink rule for it cannot run."""
    taken: dict[tuple[str, str], str] = {}
    conflicts: dict[str, str] = {}
    for rule in sorted(rules, key=lambda rule: rule.rule_id):
        if not rule.direction.uplink:
            continue
        first = taken.setdefault(rule.source, rule.rule_id)
        if first != rule.rule_id:
            conflicts[rule.rule_id] = first
    return conflicts
