"""Repairing what a reconciliation found, and reconciling every active rule on a schedule.

Repair (audited: the commands carry the operator's actor and reason): keys the ship holds
(missing or different on the shore) become one SNAPSHOT_KEYS command, the ship's capture then
sends those rows as snapshot records; keys only the shore holds become ROW_CHANGE commands
built from the shore's rows the way the downlink builds a shore change's command (under the
exchange's rule: the ship's names and columns, the rule's filter and version). The schedule
starts an exchange per (node, active rule) when the last one began longer ago than
`[reconcile] interval_seconds`, never two at once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tidesync.domain.actor import system_actor
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.conflict_images import is_sync_column
from tidesync.domain.downlink_command import (
    CommandKind,
    NewCommand,
    SnapshotKeysPayload,
)
from tidesync.domain.node import NodeProfile
from tidesync.domain.rules.release import ReleasedRules, ReleaseStatus
from tidesync.domain.rules.runtime import Filtered, ShapeFailed
from tidesync.domain.rules.sync_rule import Direction, SyncRule
from tidesync.domain.values import canonical_value
from tidesync.shore.downlink_rules import ReverseRule, row_change_payload
from tidesync.shore.reconcile_link import (
    ReconcileLink,
    ReconcileRefused,
    ReconcileState,
    Subject,
    keys_from_json,
)
from tidesync.target.digests import Key

log = logging.getLogger(__name__)

SCHEDULER = system_actor("reconcile-scheduler")
_CONNECTOR = "reconcile-repair"
"""The source of the shore changes a repair makes of rows only the shore holds."""
_MARK_REPAIRED = (
    "UPDATE reconcile_exchange SET repaired_at = %s, repair_actor = %s, repair_reason = %s"
    " WHERE exchange_id = %s AND repaired_at IS NULL"
)


@dataclass(frozen=True, slots=True)
class Repair:
    """What a repair sent: rows the ship is asked to snapshot, rows sent from the shore."""

    snapshot_keys: int
    row_changes: int


def rule_subject(rule: SyncRule) -> Subject:
    return Subject(f"rule:{rule.rule_id}", ".".join(rule.target), ".".join(rule.source),
                   rule.row_filter)


def table_subject(table: str, ship_table: str = "") -> Subject:
    return Subject(f"table:{table}", table, ship_table or table)


def repair(link: ReconcileLink, exchange_id: uuid.UUID, actor: str, reason: str,
           shore_node_id: str = "shore", rules: Sequence[SyncRule] = ()) -> Repair:
    """Send the differing rows of a finished exchange (once: a repaired exchange is refused).
    `rules`: the offered rules; an exchange about a rule sends its rows shaped by it."""
    row = link.store.exchange(exchange_id)
    if row is None or row.state != ReconcileState.DIFFERENT:
        raise ReconcileRefused("only an exchange that ended DIFFERENT can be repaired")
    if row.repaired_at is not None:
        raise ReconcileRefused(f"exchange {exchange_id} was repaired already")
    shore_only = {_key_id(key) for key in keys_from_json(row.shore_only_keys or [])}
    differing = keys_from_json(row.differing_keys or [])
    rows = [key for key in differing if _key_id(key) in shore_only]
    reverse = _reverse_rule(row.subject, rules) if rows else None
    commands: list[NewCommand] = []
    ship_keys = [key for key in differing if _key_id(key) not in shore_only]
    if ship_keys:
        payload = SnapshotKeysPayload(
            exchange_id, row.ship_table,
            tuple(tuple(canonical_value(v) for v in key) for key in ship_keys), actor, reason)
        commands.append(NewCommand(row.node_id, CommandKind.SNAPSHOT_KEYS, payload.source_id,
                                   payload, actor=actor, reason=reason))
    commands += _row_changes(link, row.node_id, row.shore_table, row.ship_table, rows,
                             exchange_id, shore_node_id, actor, reason, reverse)
    link.downlink.issue(commands, [(_MARK_REPAIRED, (link.clock(), actor, reason,
                                                     exchange_id))])
    log.info("reconciliation %s repaired: %d keys to snapshot on the ship, %d rows sent",
             exchange_id, len(ship_keys), len(commands) - bool(ship_keys))
    return Repair(len(ship_keys), len(commands) - bool(ship_keys))


def _reverse_rule(subject: str, rules: Sequence[SyncRule]) -> ReverseRule | None:
    """The rule a repair's row changes travel under, as the downlink sends shore changes
    (None: a table's exchange, sent as its rows are)."""
    kind, _, rule_id = subject.partition(":")
    if kind != "rule":
        return None
    rule = next((rule for rule in rules if rule.rule_id == rule_id), None)
    if rule is None or not rule.direction.downlink:
        raise ReconcileRefused(f"rule {rule_id} is not offered as a rule that sends shore"
                               " rows: rows only the shore holds cannot be sent under it")
    if rule.direction is Direction.DOWNLINK and rule.transforms:
        raise ReconcileRefused(f"rule {rule_id} is DOWNLINK with transforms: the downlink"
                               " sends nothing under it, and neither does a repair")
    return ReverseRule(rule)


def _row_changes(link: ReconcileLink, node_id: str, shore_table: str, ship_table: str,
                 keys: list[Key], exchange_id: uuid.UUID, shore_node_id: str, actor: str,
                 reason: str, reverse: ReverseRule | None) -> list[NewCommand]:
    """An INSERT for each row only the shore holds, with the shore's values and revision,
    made the way the downlink makes a shore change's command (under `reverse`'s rule: names,
    columns, filter, rule version; else the table's row as it is)."""
    if not keys:
        return []
    shore_database, _, shore_name = shore_table.rpartition(".")
    ship_database, _, ship_name = ship_table.rpartition(".")
    commands = []
    with link.source(shore_table, "") as (connection, source):
        names = [column.name for column in source.key]
        for key in keys:
            found = connection.execute(sa.select(source.table).where(
                *(column == value for column, value in zip(source.key, key, strict=True))
            )).mappings().first()
            if found is None:
                continue  # deleted on the shore since: nothing to send
            event_id = uuid.uuid5(exchange_id, _key_id(key))
            record = (RecordKey.of(shore_database, shore_name, zip(names, key, strict=True))
                      if reverse is not None else
                      RecordKey.of(ship_database, ship_name, zip(names, key, strict=True)))
            event = ChangeEvent(
                event_id, shore_node_id, _CONNECTOR, _CONNECTOR, 0, 0, record,
                Operation.INSERT, link.clock(),
                after={name: value for name, value in found.items()
                       if not is_sync_column(name)},
                result_revision=_revision(found[source.revision.name]))
            payload = (row_change_payload(event, shore_node_id) if reverse is None
                       else reverse.payload(event, shore_node_id))
            if isinstance(payload, Filtered | ShapeFailed):
                log.warning("reconciliation %s: a shore row is not sent under its rule (%s)",
                            exchange_id, type(payload).__name__)
                continue
            commands.append(NewCommand(node_id, CommandKind.ROW_CHANGE, event_id, payload,
                                       actor=actor, reason=reason))
    return commands


def _revision(stored: object) -> Revision | None:
    """A `_sync_revision` as the database returns it (text or bytes)."""
    if isinstance(stored, str | bytes):
        return Revision.parse(stored)
    return None


def _key_id(key: Key) -> str:
    return json.dumps([canonical_value(value) for value in key], separators=(",", ":"))


class ReconcileSchedule:
    """Starts an exchange per (node, active rule) every `interval_seconds` (0: never)."""

    def __init__(self, link: ReconcileLink, rules: ReleasedRules,
                 profiles: Callable[[], Mapping[str, NodeProfile]], interval_seconds: int,
                 clock: Clock = utc_now) -> None:
        self.link, self.rules, self.profiles = link, rules, profiles
        self.interval = dt.timedelta(seconds=interval_seconds)
        self.clock = clock
        # Checked at most every tenth of the interval (at most once a minute): a fleet's
        # rules are not read on every worker round.
        self.check_every = min(self.interval / 10, dt.timedelta(minutes=1))
        self.next_check: dt.datetime | None = None

    def run_once(self) -> int:
        """Start the exchanges that are due; returns how many started."""
        now = self.clock()
        if not self.interval or (self.next_check is not None and now < self.next_check):
            return 0
        self.next_check = now + self.check_every
        profiles = self.profiles()
        started = 0
        for rule, status in self.rules.offered():
            if status is not ReleaseStatus.ACTIVE:
                continue
            for node_id, profile in sorted(profiles.items()):
                if rule.selector.matches(node_id, profile.groups, profile.tags):
                    started += self._start_if_due(node_id, rule_subject(rule), now)
        return started

    def _start_if_due(self, node_id: str, subject: Subject, now: dt.datetime) -> int:
        last = self.link.store.last_started(node_id, subject.name)
        if last is not None and (last[1] == ReconcileState.RUNNING
                                 or now - last[0] < self.interval):
            return 0
        try:
            self.link.start(node_id, subject, SCHEDULER,
                            f"scheduled every {int(self.interval.total_seconds())} s")
        except ReconcileRefused:
            return 0  # another worker started it a moment ago
        return 1


class ReconcileStep:
    """The shore worker's part: take up the ships' answers, start what the schedule says."""

    def __init__(self, link: ReconcileLink, schedule: ReconcileSchedule | None) -> None:
        self.link, self.schedule = link, schedule

    def run_once(self) -> int:
        moved = self.link.advance()
        if self.schedule is not None:
            moved += self.schedule.run_once()
        return moved
