"""The send window and the batcher: events awaiting upload, cut into upload batches (§9.3, §13.2).

A batch holds as many events as fit the byte budget the upload pipeline gives it (about a second
of link time, see `tidesync.ship.pace`), within ≤ 10 000 events and ≤ 4 MiB before compression;
it prefers one rule and source partition and keeps each partition's events in offset order (one
key lives in one partition).

Which partition heads the next batch (§13.2): the one whose next event has the highest priority
class (its rule's `priority`: CRITICAL, HIGH, NORMAL, BULK; snapshot rows are BULK), partitions
of one class taking turns. A head that has waited in the window longer than its class's maximum
wait (`MAX_WAIT_SECONDS`) counts as CRITICAL until it is sent, so a busy higher class never
starves a lower one. A batch is topped up from the other partitions, higher classes first.

A partition whose next event's rule is outside its schedule (§13.3, `sendable`, see
`tidesync.ship.send_schedule`) is passed over, in offset order behind it; its wait for the
starvation rule counts from when the schedule let it go.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.rules.sync_rule import PriorityClass
from tidesync.ship.state.intake import rule_of
from tidesync.wire import codec

RANK = {PriorityClass.CRITICAL: 0, PriorityClass.HIGH: 1, PriorityClass.NORMAL: 2,
        PriorityClass.BULK: 3}
MAX_WAIT_SECONDS = {PriorityClass.CRITICAL: 0.0, PriorityClass.HIGH: 60.0,
                    PriorityClass.NORMAL: 300.0, PriorityClass.BULK: 1800.0}
"""How long a class's next event may wait in the window before it is sent as CRITICAL."""

PriorityOf = Callable[[ChangeEvent], PriorityClass]
Sendable = Callable[[ChangeEvent], bool]


def default_priority(event: ChangeEvent) -> PriorityClass:
    """Without rules that say otherwise: snapshot rows are BULK, changes NORMAL."""
    return PriorityClass.BULK if event.operation is Operation.SNAPSHOT else PriorityClass.NORMAL


class BodyCompressor(Protocol):
    """Compresses a serialized column-wise batch into its body (e.g. with a zstd dictionary
    the shore holds)."""

    def compress(self, raw: bytes, level: int) -> bytes: ...


@dataclass(frozen=True)
class BatchLimits:
    max_events: int = 10_000
    max_bytes: int = 4 * 1024 * 1024
    level: int = codec.DEFAULT_LEVEL
    include_before: bool = True
    wire_version: int = 2
    """2: column-wise batches (UploadBatchV2, before values only where a conflict can be
    recorded); 1: UploadBatch, for a shore that only speaks major 1."""
    compressor: BodyCompressor | None = None
    """Compresses bodies of wire version 2 (None: plain zstd)."""

    def __post_init__(self) -> None:
        if self.max_events < 1 or self.max_bytes < 1:
            raise ValueError("batch limits must be >= 1")


@dataclass
class Pending:
    """One event in the window: its size estimate and when it may be sent (monotonic s)."""

    event: ChangeEvent
    size: int
    not_before: float = 0.0
    attempts: int = 0
    since: float = 0.0
    """When it entered the window (monotonic s): its wait, for the starvation rule."""


@dataclass(frozen=True)
class OutgoingBatch:
    """One upload: the compressed body and the events it carries, in batch order."""

    batch_id: uuid.UUID
    events: tuple[ChangeEvent, ...]
    body: bytes
    uncompressed_bytes: int
    wire_version: int = 1
    """The upload format of `body` (1: UploadBatch, 2: UploadBatchV2)."""
    resume_from: int = 0
    """The first bytes of `body` the shore kept from an upload cut off mid-way: only the
    rest goes (0: all of it)."""

    @property
    def event_ids(self) -> list[uuid.UUID]:
        return [event.event_id for event in self.events]

    def partitions(self) -> set[PartitionKey]:
        return {PartitionKey(e.source_topic, e.source_partition) for e in self.events}


class SendWindow:
    """Events read from the queue and not yet received by the shore, per partition in offset
    order. The consumer pauses a partition whose share is full, so the window stays bounded;
    payloads leave it as soon as the shore has them (RECEIVED), never staying for receipts."""

    def __init__(self, priority: PriorityOf = default_priority, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 sendable: Sendable | None = None) -> None:
        self.priority, self.monotonic, self.sendable = priority, monotonic, sendable
        self._held_at: dict[PartitionKey, float] = {}
        """When each partition was last passed over by its rule's schedule (monotonic s)."""
        self._partitions: dict[PartitionKey, OrderedDict[uuid.UUID, Pending]] = {}
        self._where: dict[uuid.UUID, PartitionKey] = {}
        self._in_flight: set[uuid.UUID] = set()
        self._turn = 0
        self.bytes = 0
        """The summed size estimates of the events held."""
        self._bytes: dict[PartitionKey, int] = {}

    def add(self, events: Iterable[ChangeEvent], sizes: dict[uuid.UUID, int] | None = None
            ) -> None:
        """Append events (in offset order per partition); an event already held is ignored."""
        where, sizes, since = self._where, sizes or {}, self.monotonic()
        # Each partition's key and events looked up once per call, not once per event.
        found: dict[tuple[str, int], tuple[PartitionKey, OrderedDict[uuid.UUID, Pending]]] = {}
        for event in events:
            event_id = event.event_id
            if event_id in where:
                continue
            coordinates = (event.source_topic, event.source_partition)
            partition = found.get(coordinates)
            if partition is None:
                key = PartitionKey(*coordinates)
                partition = found[coordinates] = (
                    key, self._partitions.setdefault(key, OrderedDict()))
            key, pending = partition
            size = sizes.get(event_id) or 1024
            pending[event_id] = Pending(event, size, since=since)
            where[event_id] = key
            self.bytes += size
            self._bytes[key] = self._bytes.get(key, 0) + size

    def discard(self, event_ids: Iterable[uuid.UUID]) -> None:
        for event_id in event_ids:
            key = self._where.pop(event_id, None)
            self._in_flight.discard(event_id)
            if key is not None:
                pending = self._partitions[key]
                size = pending.pop(event_id).size
                self.bytes -= size
                self._bytes[key] -= size
                if not pending:
                    del self._partitions[key], self._bytes[key]
                    self._held_at.pop(key, None)

    def defer(self, event_ids: Iterable[uuid.UUID], not_before: float) -> None:
        """Hold events (retryable per-event failures) until `not_before`."""
        for event_id in event_ids:
            key = self._where.get(event_id)
            self._in_flight.discard(event_id)
            if key is not None:
                pending = self._partitions[key][event_id]
                pending.not_before = max(pending.not_before, not_before)
                pending.attempts += 1

    def release(self, event_ids: Iterable[uuid.UUID]) -> None:
        """Events of a batch that did not get through: sendable again."""
        for event_id in event_ids:
            self._in_flight.discard(event_id)

    def attempts(self, event_id: uuid.UUID) -> int:
        key = self._where.get(event_id)
        return 0 if key is None else self._partitions[key][event_id].attempts

    def count(self, key: PartitionKey) -> int:
        return len(self._partitions.get(key, ()))

    def bytes_of(self, key: PartitionKey) -> int:
        """The summed size estimates of one partition's events."""
        return self._bytes.get(key, 0)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, event_id: uuid.UUID) -> bool:
        return event_id in self._where

    def has_due(self, now: float) -> bool:
        """Events wait whose rule's schedule lets them go (deferred ones included)."""
        sendable = self.sendable
        return any(sendable is None or sendable(next(iter(pending.values())).event)
                   for pending in self._partitions.values())

    def next_due(self) -> float | None:
        """The earliest time a held event becomes sendable (None: nothing waits)."""
        times = [p.not_before for pending in self._partitions.values()
                 for p in pending.values() if p.event.event_id not in self._in_flight]
        return min(times) if times else None

    def _due(self, now: float, key: PartitionKey) -> Iterator[Pending]:
        for pending in self._partitions[key].values():
            if pending.event.event_id not in self._in_flight and pending.not_before <= now:
                yield pending

    def estimate(self, event_ids: Iterable[uuid.UUID]) -> int:
        """The summed size estimates of held events."""
        total = 0
        for event_id in event_ids:
            key = self._where.get(event_id)
            if key is not None:
                total += self._partitions[key][event_id].size
        return total

    def take(self, now: float, limits: BatchLimits, budget: int | None = None
             ) -> list[ChangeEvent]:
        """Due events up to the limits (and `budget` bytes of size estimates), marked in
        flight. The partition whose next event ranks highest heads the batch (see the module
        text), partitions of one rank taking turns; the batch is topped up from the others,
        higher ranks first and the head's rule first within a rank; each partition's events
        keep their offset order."""
        max_bytes = limits.max_bytes if budget is None else max(1, min(limits.max_bytes,
                                                                       budget))
        keys = sorted(self._partitions)
        start = self._turn % len(keys) if keys else 0
        heads: dict[PartitionKey, Pending] = {}
        waited, sendable = self.monotonic(), self.sendable
        for key in keys[start:] + keys[:start]:
            head = next(self._due(now, key), None)
            if head is not None and sendable is not None and not sendable(head.event):
                self._held_at[key] = waited
            elif head is not None:
                heads[key] = head
        if not heads:
            return []
        ranks = {key: self._rank(key, head, waited) for key, head in heads.items()}
        # Stable: among equal ranks the turn order above stands.
        order = sorted(heads, key=ranks.__getitem__)
        self._turn = keys.index(order[0]) + 1
        rule = rule_of(heads[order[0]].event)
        ranked = sorted(order[1:], key=lambda k: (ranks[k], rule_of(heads[k].event) != rule))
        chosen: list[ChangeEvent] = []
        size = 0
        for key in [order[0], *ranked]:
            checked = rule_of(heads[key].event)
            for pending in self._due(now, key):
                if chosen and (len(chosen) >= limits.max_events
                               or size + pending.size > max_bytes):
                    self._in_flight.update(event.event_id for event in chosen)
                    return chosen
                if sendable is not None and rule_of(pending.event) != checked:
                    checked = rule_of(pending.event)  # another rule's: its own schedule
                    if not sendable(pending.event):
                        self._held_at[key] = waited
                        break
                chosen.append(pending.event)
                size += pending.size
        self._in_flight.update(event.event_id for event in chosen)
        return chosen

    def _rank(self, key: PartitionKey, head: Pending, now: float) -> int:
        """The head's class rank; a head past its class's maximum wait ranks as CRITICAL (the
        wait counts from when its schedule last held it)."""
        priority = self.priority(head.event)
        since = max(head.since, self._held_at.get(key, 0.0))
        return 0 if now - since >= MAX_WAIT_SECONDS[priority] else RANK[priority]


def build_batch(events: list[ChangeEvent], node_id: str, created_at: dt.datetime,
                limits: BatchLimits, batch_id: uuid.UUID | None = None
                ) -> tuple[OutgoingBatch, list[ChangeEvent]]:
    """The batch of as many leading `events` as fit `limits.max_bytes` uncompressed (at least
    one), and the events left over. Size estimates only choose candidates; this decides."""
    left: list[ChangeEvent] = []
    batch_id = batch_id or uuid.uuid4()
    while True:
        message = codec.build_any_batch(
            events, node_id=node_id, batch_id=batch_id, created_at=created_at,
            include_before=limits.include_before, wire_version=limits.wire_version,
            before_values=(codec.BeforeValues.CONFLICT if limits.include_before
                           else codec.BeforeValues.NONE))
        raw = codec.serialize_batch(message)
        if len(raw) <= limits.max_bytes or len(events) == 1:
            body = (limits.compressor.compress(raw, limits.level)
                    if limits.compressor is not None and limits.wire_version >= 2
                    else codec.compress_bytes(raw, limits.level))
            return OutgoingBatch(batch_id, tuple(events), body, len(raw),
                                 limits.wire_version), left
        # Keep the share that fits by bytes, less a tenth for the name table's growth.
        keep = max(1, min(len(events) - 1, len(events) * limits.max_bytes * 9 // (len(raw) * 10)))
        events, left = events[:keep], events[keep:] + left
