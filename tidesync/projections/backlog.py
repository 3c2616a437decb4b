"""The backlog view (§15.1): events by node, direction, rule, priority and state.

Uplink on the shore follows the ApplyJob streams: each claimed event's rule, priority, size and
times are read once from its received batch and kept (`backlog_event`) until it reaches a
result, so the open states (CLAIMED, RETRY_WAIT, DEAD, PENDING) count what is waiting now and
the results count what ended there. The refresher adds events still waiting in the inbox
(RECEIVED: not claimed yet, so their rule is not known) and each node's own queue from its
latest heartbeat.

Priority: snapshot events (operation SNAPSHOT: an onboarding's or a rule activation's rows)
count as BULK, every other event in its rule's class (`priority` of the release now offered to
ships; NORMAL for a rule without one), as ships send them (§13.2). Events not yet claimed and
the nodes' own queues, whose rules and operations are not known here, count as NORMAL. An event
keeps the class it was first counted in until it ends, and a rebuild counts with the rules
offered then.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from tidesync.domain.apply_job import ApplyJob, EventResult
from tidesync.domain.change_event import Operation, table_rule
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import PriorityClass, SyncRule
from tidesync.projections.engine import Cursor, Events, event_topic
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import NameTable, WireError

log = logging.getLogger(__name__)

UPLINK = "UPLINK"
NORMAL = PriorityClass.NORMAL.value
BULK = PriorityClass.BULK.value
RECEIVED = "RECEIVED"
REJECTED = EventResult.REJECTED.value
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_CLAIMED = event_topic(ApplyJob.Claimed)  # type: ignore[attr-defined]
_STATE_OF_TOPIC = {
    _CLAIMED: "CLAIMED",
    event_topic(ApplyJob.RetryScheduled): "RETRY_WAIT",  # type: ignore[attr-defined]
    event_topic(ApplyJob.DeadLettered): "DEAD",  # type: ignore[attr-defined]
    event_topic(ApplyJob.Released): "PENDING",  # type: ignore[attr-defined]
    event_topic(ApplyJob.Replayed): "REPLAYED",  # type: ignore[attr-defined]
    # A skip takes the event out of its result the same way; the next job finalizes it.
    event_topic(ApplyJob.SkipRequested): "REPLAYED",  # type: ignore[attr-defined]
}
_FINALIZED = event_topic(ApplyJob.Finalized)  # type: ignore[attr-defined]

Key = tuple[str, str]
"""(origin node, event id)"""
Group = tuple[str, str, str, str]
"""(node, rule, priority, state) of the UPLINK direction"""


@dataclass(frozen=True)
class Item:
    """A received event not yet terminal: where it counts and what it weighs."""

    rule_id: str
    state: str
    bytes: int = 0
    captured_at: dt.datetime | None = None
    business_at: dt.datetime | None = None
    priority: str = NORMAL


def priority_of(operation: str) -> str:
    """The backlog priority of an event by its operation: snapshot rows are BULK."""
    return BULK if operation == Operation.SNAPSHOT.value else NORMAL


@dataclass
class Delta:
    events: int = 0
    bytes: int = 0
    captured: list[dt.datetime] | None = None
    business: list[dt.datetime] | None = None

    def add(self, item: Item, sign: int, times: bool) -> None:
        self.events += sign
        self.bytes += sign * item.bytes
        if times and sign > 0:
            self.captured = [t for t in (*(self.captured or []), item.captured_at) if t]
            self.business = [t for t in (*(self.business or []), item.business_at) if t]


class OfferedRules(Protocol):
    """The rule releases ships run now (`RuleReleasesApplication.offered`)."""

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]: ...


@dataclass(frozen=True)
class Step:
    key: Key
    state: str
    """CLAIMED, RETRY_WAIT, DEAD, PENDING, REPLAYED, or a result (the event ended)."""
    rule_id: str = ""
    priority: str = NORMAL


_Counted = TypeVar("_Counted", Item, Step)


class BacklogProjection:
    name = "backlog"
    topics: tuple[str, ...] = (*_STATE_OF_TOPIC, _FINALIZED)

    def __init__(self, table: str = "backlog", items_table: str = "backlog_event",
                 jobs_table: str = "backlog_job", rules: OfferedRules | None = None) -> None:
        self.table = table
        self.items_table = items_table
        self.jobs_table = jobs_table
        self.rules = rules

    def process(self, cursor: Cursor, events: Events) -> None:
        steps = self._steps(cursor, [event for _, event in events])
        if not steps:
            return
        known = self._load_items(cursor, {step.key for step in steps})
        facts = self._facts(cursor, {step.key for step in steps
                                     if (step.key not in known and step.state == "CLAIMED")
                                     or step.state == "REPLAYED"})
        classes = self._classes()
        if classes:
            facts = {key: _in_class(item, classes) for key, item in facts.items()}
            steps = [_in_class(step, classes) for step in steps]
        items, deltas, open_groups = self._apply(steps, known, facts)
        self._write_items(cursor, known, items)
        self._write_deltas(cursor, deltas)
        self._recompute_times(cursor, open_groups)
        self._drop_empty(cursor, set(deltas))

    def _classes(self) -> dict[str, str]:
        """Rule id → the priority class of the release ships run now (NORMAL left out)."""
        if self.rules is None:
            return {}
        return {rule.rule_id: rule.priority.value for rule, _ in self.rules.offered()
                if rule.priority is not PriorityClass.NORMAL}

    # ------------------------------------------------------------------ reading events

    def _steps(self, cursor: Cursor, events: list[Any]) -> list[Step]:
        """The per-event transitions these job events record, in order."""
        nodes = {event.originator_id: event.origin_node_id for event in events
                 if event_topic(type(event)) == _CLAIMED}
        if nodes:
            cursor.execute(
                f"INSERT INTO {self.jobs_table} (job_id, origin_node_id)"  # noqa: S608
                " SELECT * FROM unnest(%s::uuid[], %s::text[]) ON CONFLICT DO NOTHING",
                (list(nodes), list(nodes.values())))
        nodes.update(self._job_nodes(cursor, {e.originator_id for e in events} - set(nodes)))
        steps: list[Step] = []
        for event in events:
            node = nodes.get(event.originator_id)
            if node is None:
                log.warning("apply job %s has no claim on record", event.originator_id)
                continue
            topic = event_topic(type(event))
            if topic == _FINALIZED:
                steps += [Step((node, str(row[0])), str(row[1]),
                               str(row[6]) if len(row) > 6 and row[6] else "",
                               priority_of(str(row[8]) if len(row) > 8 else ""))
                          for row in event.results]
            else:
                state = _STATE_OF_TOPIC[topic]
                steps += [Step((node, str(event_id)), state) for event_id in event.event_ids]
        return steps

    def _job_nodes(self, cursor: Cursor, job_ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        if not job_ids:
            return {}
        cursor.execute(f"SELECT job_id, origin_node_id FROM {self.jobs_table}"  # noqa: S608
                       " WHERE job_id = ANY(%s)", (list(job_ids),))
        return {row[0]: row[1] for row in cursor.fetchall()}

    def _load_items(self, cursor: Cursor, keys: set[Key]) -> dict[Key, Item]:
        nodes, ids = _columns(keys)
        cursor.execute(
            f"SELECT e.origin_node_id, e.event_id::text, e.rule_id, e.state, e.bytes,"  # noqa: S608
            f" e.captured_at, e.business_at, e.priority FROM {self.items_table} e"
            " JOIN unnest(%b::text[], %b::text[]) AS k(node, id)"
            " ON e.origin_node_id = k.node AND e.event_id = k.id::uuid",
            (nodes, ids))
        return {(row[0], row[1]): Item(*row[2:]) for row in cursor.fetchall()}

    def _facts(self, cursor: Cursor, keys: set[Key]) -> dict[Key, Item]:
        """Rule, size and times of events, read from the batches they were received in."""
        if not keys:
            return {}
        nodes, ids = _columns(keys)
        cursor.execute(
            "SELECT i.origin_node_id, i.event_id::text, i.batch_ref, i.batch_index"
            " FROM inbox_event i JOIN unnest(%b::text[], %b::text[]) AS k(node, id)"
            " ON i.origin_node_id = k.node AND i.event_id = k.id::uuid",
            (nodes, ids))
        located = cursor.fetchall()
        cursor.execute("SELECT batch_ref, body FROM inbox_batch WHERE batch_ref = ANY(%s)",
                       (list({row[2] for row in located}),))
        batches = {}
        for batch_ref, body in cursor.fetchall():
            batch = pb.UploadBatch.FromString(bytes(body))
            batches[batch_ref] = (batch, NameTable(batch.strings))
        facts: dict[Key, Item] = {}
        for node, event_id, batch_ref, index in located:
            if batch_ref not in batches:
                continue  # The batch body is gone (retention): size and times unknown.
            batch, names = batches[batch_ref]
            try:
                facts[(node, event_id)] = wire_facts(batch.events[index], names)
            except (WireError, IndexError):
                continue  # Undecodable: it counts with an unknown rule and no size.
        return facts

    # ------------------------------------------------------------------ applying

    def _apply(self, steps: list[Step], known: dict[Key, Item], facts: dict[Key, Item],
               ) -> tuple[dict[Key, Item | None], dict[Group, Delta], set[Group]]:
        items: dict[Key, Item | None] = dict(known)
        deltas: dict[Group, Delta] = {}
        open_groups: set[Group] = set()

        def count(node: str, item: Item, sign: int) -> None:
            group = (node, item.rule_id, item.priority, item.state)
            is_open = item.state not in _RESULTS
            deltas.setdefault(group, Delta()).add(item, sign, times=not is_open)
            if is_open:
                open_groups.add(group)

        ended: dict[Key, Item] = {}
        for step in steps:
            node = step.key[0]
            item = items.get(step.key)
            if step.state in _RESULTS:
                result = Item(step.rule_id, step.state, priority=step.priority)
                if item is not None:
                    count(node, item, -1)
                    result = replace(item, rule_id=item.rule_id or step.rule_id,
                                     state=step.state)
                count(node, result, +1)
                items[step.key] = None
                ended[step.key] = result
                continue
            state = "PENDING" if step.state == "REPLAYED" else step.state
            if item is None:
                if step.state == "REPLAYED":
                    # A replay takes an event out of its result: the one it got in this
                    # batch, else REJECTED (the only result replays reverse), with its rule
                    # and size read from the batch it was received in.
                    item = ended.get(step.key) or replace(
                        facts.get(step.key, Item("", REJECTED)), state=REJECTED)
                    count(node, item, -1)
                else:
                    item = facts.get(step.key, Item("", state))
            else:
                count(node, item, -1)
            item = replace(item, state=state)
            count(node, item, +1)
            items[step.key] = item
        return items, deltas, open_groups

    # ------------------------------------------------------------------ writing

    def _write_items(self, cursor: Cursor, known: dict[Key, Item],
                     items: dict[Key, Item | None]) -> None:
        gone = [key for key, item in items.items() if item is None and key in known]
        if gone:
            nodes, ids = _columns(gone)
            cursor.execute(
                f"DELETE FROM {self.items_table} e USING unnest(%b::text[], %b::text[])"  # noqa: S608
                " AS k(node, id) WHERE e.origin_node_id = k.node AND e.event_id = k.id::uuid",
                (nodes, ids))
        changed = [(key, item) for key, item in items.items()
                   if item is not None and known.get(key) != item]
        if not changed:
            return
        cursor.execute(
            f"INSERT INTO {self.items_table} AS e (origin_node_id, event_id, rule_id,"  # noqa: S608
            " priority, state, bytes, captured_at, business_at)"
            " SELECT u.node, u.id::uuid, u.rule, u.priority, u.state, u.bytes, u.captured,"
            " u.business FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::int8[], %b::timestamptz[], %b::timestamptz[])"
            " AS u(node, id, rule, priority, state, bytes, captured, business)"
            " ON CONFLICT (origin_node_id, event_id) DO UPDATE SET state = EXCLUDED.state,"
            " rule_id = EXCLUDED.rule_id, priority = EXCLUDED.priority, bytes = EXCLUDED.bytes,"
            " captured_at = EXCLUDED.captured_at, business_at = EXCLUDED.business_at",
            ([key[0] for key, _ in changed], [key[1] for key, _ in changed],
             [item.rule_id for _, item in changed], [item.priority for _, item in changed],
             [item.state for _, item in changed],
             [item.bytes for _, item in changed], [item.captured_at for _, item in changed],
             [item.business_at for _, item in changed]))

    def _write_deltas(self, cursor: Cursor, deltas: dict[Group, Delta]) -> None:
        live = [(group, delta) for group, delta in deltas.items()
                if delta.events or delta.bytes or delta.captured or delta.business]
        if not live:
            return
        cursor.execute(
            f"INSERT INTO {self.table} AS b (node_id, direction, rule_id, priority, state,"  # noqa: S608
            " events, bytes, oldest_business_at, newest_business_at, oldest_captured_at,"
            " newest_captured_at)"
            " SELECT u.node, %s, u.rule, u.priority, u.state, u.events, u.bytes, u.ob, u.nb,"
            " u.oc, u.nc FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::int8[],"
            " %b::int8[], %b::timestamptz[], %b::timestamptz[], %b::timestamptz[],"
            " %b::timestamptz[]) AS u(node, rule, priority, state, events, bytes, ob, nb, oc, nc)"
            " ON CONFLICT (node_id, direction, rule_id, priority, state) DO UPDATE SET"
            " events = b.events + EXCLUDED.events, bytes = b.bytes + EXCLUDED.bytes,"
            " oldest_business_at = LEAST(b.oldest_business_at, EXCLUDED.oldest_business_at),"
            " newest_business_at = GREATEST(b.newest_business_at,"
            " EXCLUDED.newest_business_at),"
            " oldest_captured_at = LEAST(b.oldest_captured_at, EXCLUDED.oldest_captured_at),"
            " newest_captured_at = GREATEST(b.newest_captured_at,"
            " EXCLUDED.newest_captured_at)",
            (UPLINK, [g[0] for g, _ in live], [g[1] for g, _ in live],
             [g[2] for g, _ in live], [g[3] for g, _ in live], [d.events for _, d in live],
             [d.bytes for _, d in live],
             [min(d.business) if d.business else None for _, d in live],
             [max(d.business) if d.business else None for _, d in live],
             [min(d.captured) if d.captured else None for _, d in live],
             [max(d.captured) if d.captured else None for _, d in live]))

    def _recompute_times(self, cursor: Cursor, groups: set[Group]) -> None:
        """Oldest and newest times of open states, from the events still in them (indexed)."""
        if not groups:
            return
        cursor.execute(
            f"UPDATE {self.table} AS b SET"  # noqa: S608
            f" oldest_captured_at = (SELECT min(e.captured_at) FROM {self.items_table} e"
            "   WHERE e.origin_node_id = b.node_id AND e.rule_id = b.rule_id"
            "   AND e.priority = b.priority AND e.state = b.state),"
            f" newest_captured_at = (SELECT max(e.captured_at) FROM {self.items_table} e"
            "   WHERE e.origin_node_id = b.node_id AND e.rule_id = b.rule_id"
            "   AND e.priority = b.priority AND e.state = b.state),"
            f" oldest_business_at = (SELECT min(e.business_at) FROM {self.items_table} e"
            "   WHERE e.origin_node_id = b.node_id AND e.rule_id = b.rule_id"
            "   AND e.priority = b.priority AND e.state = b.state),"
            f" newest_business_at = (SELECT max(e.business_at) FROM {self.items_table} e"
            "   WHERE e.origin_node_id = b.node_id AND e.rule_id = b.rule_id"
            "   AND e.priority = b.priority AND e.state = b.state)"
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[])"
            " AS g(node, rule, priority, state)"
            " WHERE b.node_id = g.node AND b.direction = %s AND b.rule_id = g.rule"
            " AND b.priority = g.priority AND b.state = g.state",
            (*_group_columns(groups), UPLINK))

    def _drop_empty(self, cursor: Cursor, groups: set[Group]) -> None:
        if not groups:
            return
        cursor.execute(
            f"DELETE FROM {self.table} AS b"  # noqa: S608
            " USING unnest(%b::text[], %b::text[], %b::text[], %b::text[])"
            " AS g(node, rule, priority, state)"
            " WHERE b.node_id = g.node AND b.direction = %s AND b.rule_id = g.rule"
            " AND b.priority = g.priority AND b.state = g.state AND b.events <= 0",
            (*_group_columns(groups), UPLINK))


_RESULTS = frozenset(result.value for result in EventResult)


def wire_facts(wire: pb.ChangeEvent, names: NameTable) -> Item:
    """An event's rule (as `rule_for` names it), encoded size and times, from its wire form
    without decoding its values."""
    rule_id = names.name(wire.rule_id_ref) if wire.HasField("rule_id_ref") else ""
    if not rule_id:
        rule_id = table_rule(names.name(wire.record.database_ref),
                             names.name(wire.record.table_ref))
    business = (_EPOCH + dt.timedelta(microseconds=wire.business_occurred_at_micros)
                if wire.HasField("business_occurred_at_micros") else None)
    return Item(rule_id, "", wire.ByteSize(),
                _EPOCH + dt.timedelta(microseconds=wire.captured_at_micros), business,
                BULK if wire.operation == pb.SNAPSHOT else NORMAL)


def _in_class(counted: _Counted, classes: dict[str, str]) -> _Counted:
    """`counted` in its rule's class, unless it is a snapshot row (BULK whatever the rule)."""
    if counted.priority == BULK or counted.rule_id not in classes:
        return counted
    return replace(counted, priority=classes[counted.rule_id])


def _group_columns(groups: Iterable[Group]) -> tuple[list[str], ...]:
    """Nodes, rules, priorities and states of groups, as four arrays."""
    rows = list(groups)
    return tuple([group[index] for group in rows] for index in range(4))


def _columns(keys: Iterable[Key]) -> tuple[list[str], list[str]]:
    pairs = list(keys)
    return [node for node, _ in pairs], [event_id for _, event_id in pairs]


class BacklogRefresher:
    """Events in the inbox not yet claimed (RECEIVED, per node), and each node's own queue as
    its latest heartbeat reported it (UPLINK_SHIP / DOWNLINK_SHIP, state QUEUED)."""

    def __init__(self, table: str = "backlog", items_table: str = "backlog_event") -> None:
        self.table = table
        self.items_table = items_table

    def refresh(self, cursor: Cursor) -> None:
        cursor.execute(f"DELETE FROM {self.table} WHERE (direction = %s AND state = %s)"  # noqa: S608
                       " OR direction IN ('UPLINK_SHIP', 'DOWNLINK_SHIP')", (UPLINK, RECEIVED))
        cursor.execute(
            f"INSERT INTO {self.table} (node_id, direction, rule_id, priority, state, events,"  # noqa: S608
            " bytes) SELECT i.origin_node_id, %s, '', %s, %s, count(*), 0 FROM inbox_event i"
            " WHERE i.state = 'PENDING' AND NOT EXISTS ("
            f"   SELECT 1 FROM {self.items_table} e WHERE e.origin_node_id = i.origin_node_id"
            "   AND e.event_id = i.event_id)"
            " GROUP BY i.origin_node_id",
            (UPLINK, NORMAL, RECEIVED))
        cursor.execute(
            f"INSERT INTO {self.table} (node_id, direction, rule_id, priority, state, events,"  # noqa: S608
            " bytes, oldest_business_at, oldest_captured_at, estimated_compressed_bytes,"
            " reported_at)"
            " SELECT m.node_id, m.direction || '_SHIP', coalesce(m.rule_id, ''), %s, 'QUEUED',"
            " sum(greatest(m.end_offset - coalesce(m.terminal_offset + 1, 0), 0)),"
            " sum(coalesce(m.backlog_bytes, 0)), min(m.oldest_business_at),"
            " min(m.oldest_captured_at), sum(m.estimated_compressed_bytes), h.sent_at"
            " FROM node_heartbeat h JOIN metric_sample m ON m.node_id = h.node_id"
            " AND m.sampled_at = h.sent_at AND m.kind = 'BACKLOG'"
            " GROUP BY m.node_id, m.direction, coalesce(m.rule_id, ''), h.sent_at",
            (NORMAL,))
