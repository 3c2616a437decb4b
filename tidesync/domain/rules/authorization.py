"""Whether a received event may be applied under the rule it names (§10.2, rule authorization),
and the shape it is applied in on the shore.

A ship names the rule and version its runtime shaped an event with; the shore trusts neither:
the version must be one the shore released, select the event's node, let changes travel
uplink, cover the event's table, and keep every column the event carries. Pure functions; the
shore's apply processor looks the rule up and turns a refusal into a terminal rejection.

Renaming happens on the shore, here: ships send source names (database, table, columns), the
shore applies an authorized event to the rule's target table under the target column names.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping

from tidesync.domain.change_event import ChangeEvent, RecordKey, table_rule
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.values import Value

IMPLICIT_RULE_PREFIX = "table:"
"""Implicit per-table rule ids (`table_rule`); a released rule id never holds a colon."""


class RuleRefusal(enum.StrEnum):
    """Why the shore refuses an event under rules (stable reason codes, terminal)."""

    RULE_NOT_RELEASED = "RULE_NOT_RELEASED"
    """The event names no rule, or a rule id or version the shore never released."""
    RULE_NOT_FOR_NODE = "RULE_NOT_FOR_NODE"
    """The rule version's selector does not select the event's node."""
    RULE_DIRECTION = "RULE_DIRECTION"
    """The rule does not let changes travel from ship to shore (DOWNLINK)."""
    NOT_AUTHORIZED_FOR_TABLE = "NOT_AUTHORIZED_FOR_TABLE"
    """The event's database.table is not the rule's source table."""
    COLUMN_OUTSIDE_RULE = "COLUMN_OUTSIDE_RULE"
    """The event carries a column the rule excludes, marks sensitive or does not include."""


def names_rule(event: ChangeEvent) -> bool:
    """Whether the event names a rule of its own (not absent, not an implicit table rule)."""
    rule_id = event.rule_id
    return bool(rule_id) and not str(rule_id).startswith(IMPLICIT_RULE_PREFIX)


def implicit_rule(event: ChangeEvent) -> str:
    """The rule id of an event applied without rules: its table's implicit rule."""
    return table_rule(event.database, event.table)


def refusal(rule: SyncRule | None, event: ChangeEvent, groups: Iterable[str] = (),
            tags: Iterable[str] = ()) -> RuleRefusal | None:
    """Why `event` may not be applied under `rule` (the released version it names, None when
    the shore knows no such version), or None when it may. `groups`/`tags`: the node's."""
    if rule is None or not names_rule(event) or event.rule_id != rule.rule_id or (
            event.rule_version != rule.version):
        return RuleRefusal.RULE_NOT_RELEASED
    if not rule.selector.matches(event.origin_node_id, groups, tags):
        return RuleRefusal.RULE_NOT_FOR_NODE
    if not rule.direction.uplink:
        return RuleRefusal.RULE_DIRECTION
    if (event.database, event.table) != rule.source:
        return RuleRefusal.NOT_AUTHORIZED_FOR_TABLE
    if outside_columns(rule, event) or _renaming_collides(rule, event):
        return RuleRefusal.COLUMN_OUTSIDE_RULE
    return None


def outside_columns(rule: SyncRule, event: ChangeEvent) -> list[str]:
    """The event's columns the rule does not keep (names only, never values). Key columns
    are always kept unless excluded or sensitive; the sync metadata columns in their exact
    spelling are the platform's and pass."""
    dropped = rule.dropped()
    outside = [name for name, _ in event.record.primary_key if name.lower() in dropped]
    seen: set[str] = set()
    for image in (event.before, event.after):
        for name in image or ():
            if name in seen or name in METADATA_COLUMNS or name in event.record.as_dict():
                continue
            seen.add(name)
            if not rule.keeps(name):
                outside.append(name)
    return outside


def shaped(rule: SyncRule, event: ChangeEvent) -> ChangeEvent:
    """The authorized event as the shore applies it: the rule's target database and table,
    target column names, and the rule id and version (no longer the ship's word for it)."""
    database, table = rule.target
    record = RecordKey(database, table,
                       tuple((rule.target_column(name), value)
                             for name, value in event.record.primary_key),
                       event.record.schema)
    return dataclasses.replace(
        event, record=record, before=_renamed(rule, event.before),
        after=_renamed(rule, event.after), rule_id=rule.rule_id, rule_version=rule.version)


def _renaming_collides(rule: SyncRule, event: ChangeEvent) -> bool:
    """Whether renaming would give two of the event's columns one name (one value lost)."""
    if not rule.rename:
        return False
    for image in (event.before, event.after):
        if image is not None and len({rule.target_column(name) for name in image}) != len(image):
            return True
    return False


def _renamed(rule: SyncRule, image: Mapping[str, Value] | None) -> dict[str, Value] | None:
    if image is None:
        return None
    if not rule.rename:
        return dict(image)
    return {name if name in METADATA_COLUMNS else rule.target_column(name): value
            for name, value in image.items()}
