"""Replay by range on the ship (§7.4): read a closed range of one queue partition again under a
new replay epoch and send its events beside the client's ordinary ones.

`tidesync replay` stores the request (`tidesync.ship.replay_runs`); the running client carries it
out here, one run at a time. A run reads through a queue consumer of its own — its own consumer
group, assigned to the one partition, never committing, so the main consumer's queue offsets are
never touched — and records what it reads in the state store under its own watermark (a
consumer group name of its own) and epoch. The records' events get new ids, a source sequence
of their own stream (1, 2, … in that epoch) and `tidesync.replay_of_epoch`, so the shore answers
ALREADY_APPLIED to every event it applied before (`tidesync.domain.replay`). They join the
client's send window and receipts like any other event.

Reading is throttled by a token bucket over records read (`[ship] replay_rate_records_per_sec`),
and waits while the client's window for that partition is full, so ordinary changes keep
flowing. A run survives a restart: its watermark says where to read again, and records read
before are decided by their rows (sent again if still unsent, never given a second sequence).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass

from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord
from tidesync.cdc.kafka import KafkaQueue, PartitionKey, Polled, QueueUnavailable
from tidesync.cdc.outcomes import Normalized
from tidesync.domain.clock import Monotonic
from tidesync.domain.replay import ReplayRangeError, as_replay
from tidesync.domain.token_bucket import TokenBucket
from tidesync.ship.client_settings import PeriodicTimer
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.replay_runs import ReplayRun, SQLiteReplayRuns
from tidesync.ship.rules import ShipRules
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.intake import Consumed, Recorded

log = logging.getLogger(__name__)

QueueFactory = Callable[[str], KafkaQueue]
"""Opens a queue consumer under the given consumer group."""
NormalizerFactory = Callable[[int], DebeziumNormalizer]
"""A normalizer stamping the given replay epoch (the one the range was first read under)."""


def replay_group(group: str, replay_epoch: int) -> str:
    """The consumer group a run reads (and keeps its watermark) under."""
    return f"{group}.replay-{replay_epoch}"


class RangeQueue(KafkaQueue):
    """The queue as one run sees it: its partition only, the records of its range (and time
    window) only, and no commit ever."""

    def __init__(self, queue: KafkaQueue, run: ReplayRun) -> None:  # no second consumer
        self.inner = queue
        self.settings, self.consumer, self.pattern = queue.settings, queue.consumer, queue.pattern
        self.run = run
        self.reached = run.first - 1  # read again from the watermark after a restart
        self.last_read = 0

    @property
    def done(self) -> bool:
        """Every offset of the range has been read."""
        return self.reached >= self.run.last

    def partitions(self) -> list[PartitionKey]:
        return [self.run.key]

    def committed(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        return {key: None for key in keys}

    def assign(self, starts: Mapping[PartitionKey, int | None]) -> None:
        start = starts.get(self.run.key)
        self.inner.assign({self.run.key: self.run.first if start is None
                           else max(start, self.run.first)})

    def poll(self, max_records: int, timeout: float) -> Polled:
        polled = self.inner.poll(max_records, timeout)
        key = self.run.key
        kept: list[KafkaRecord] = []
        self.last_read = 0
        for record in polled.records:
            if PartitionKey(record.topic, record.partition) != key:
                continue
            self.last_read += 1
            self.reached = max(self.reached, record.offset)
            if self.run.wanted(record.offset, record.timestamp_ms):
                kept.append(record)
        at_end = {k: v for k, v in polled.at_end.items() if k == key}
        if key in at_end:  # the partition's end (the next offset to be written)
            self.reached = max(self.reached, at_end[key] - 1)
        if self.done:
            at_end[key] = self.run.last + 1
        return Polled(kept, at_end, {k: v for k, v in polled.errors.items() if k == key})

    def unassign(self, keys: Iterable[PartitionKey]) -> None:
        self.inner.unassign(keys)

    def pause(self, keys: Iterable[PartitionKey]) -> None:
        self.inner.pause(keys)

    def resume(self, keys: Iterable[PartitionKey]) -> None:
        self.inner.resume(keys)

    def commit(self, offsets: Mapping[PartitionKey, int]) -> None:
        """Never: a replay leaves every queue commit to the main consumer."""

    def end_offset(self, key: PartitionKey) -> int | None:
        return self.inner.end_offset(key)

    def first_offset(self, key: PartitionKey) -> int | None:
        return self.inner.first_offset(key)

    def close(self) -> None:
        self.inner.close()


class ReplayConsumer(QueueConsumer):
    """A queue consumer whose events are the records' events as read again under the run's
    epoch: new ids, the first epoch named in their source details."""

    def _consumed(self, record: KafkaRecord) -> Consumed:
        consumed = super()._consumed(record)
        if isinstance(consumed.outcome, Normalized):
            event = as_replay(consumed.outcome.event, self.replay_epoch)
            return dataclasses.replace(consumed, outcome=Normalized(event))
        return consumed


@dataclass(frozen=True)
class ReplaySettings:
    """How fast runs read, and how often the client looks for a new run."""

    records_per_second: float = 200.0
    poll_records: int = 500
    check_interval: float = 5.0


@dataclass
class _Active:
    run: ReplayRun
    queue: RangeQueue
    consumer: ReplayConsumer
    state: SQLiteShipState

    def close(self) -> None:
        self.queue.close()
        self.state.close()


class ShipReplays:
    """Carries out the stored replay runs beside the client's consumer (see the module)."""

    def __init__(self, state: SQLiteShipState, open_queue: QueueFactory,
                 normalizer_for: NormalizerFactory, rules: ShipRules | None = None,
                 settings: ReplaySettings | None = None, *,
                 monotonic: Monotonic = time.monotonic) -> None:
        self.state = state
        self.runs = SQLiteReplayRuns(state.database)
        self.open_queue, self.normalizer_for, self.rules = open_queue, normalizer_for, rules
        self.settings = settings or ReplaySettings()
        self.monotonic = monotonic
        rate = max(1.0, self.settings.records_per_second)
        self.bucket = TokenBucket.full(rate, rate, monotonic())
        self.checks = PeriodicTimer(self.settings.check_interval)
        self.active: _Active | None = None
        self._reopened = False

    # ------------------------------------------------------------------ the consumer's hook

    def poll(self, into: Recorded, paused: Set[PartitionKey]) -> None:
        """Read the next throttled slice of the current run into `into` (what the client's
        poll decided), unless its partition's window is full."""
        active = self.active or self._next()
        if active is None or active.run.key in paused:
            return
        now = self.monotonic()
        allowed = int(self.bucket.refilled(now).tokens)
        if allowed < 1:
            return
        try:
            recorded = active.consumer.poll(min(allowed, self.settings.poll_records), 0.0)
        except QueueUnavailable as error:
            log.warning("replay epoch %d: the queue is unavailable (%s)",
                        active.run.replay_epoch, error)
            return
        read = active.queue.last_read
        if read:
            self.bucket = self.bucket.take(read, now).bucket
            self.runs.read_up_to(active.run.replay_epoch, active.queue.reached, read)
        _merge(into, recorded)
        if active.queue.done:
            self.runs.finished_reading(active.run.replay_epoch)
            log.info("replay epoch %d: %s/%d offsets %d..%d read", active.run.replay_epoch,
                     active.run.topic, active.run.partition, active.run.first, active.run.last)
            active.close()
            self.active = None
            self.checks.next_at = 0.0  # the next run, if any, starts at once

    def caught_up(self) -> bool:
        """No run is being read or waiting to be (a run queued while the client runs is found
        at the next check)."""
        if self.active is not None:
            return False
        if self.checks.due(self.monotonic()):
            return self._reopened and self.runs.next_open() is None
        return True

    def close(self) -> None:
        if self.active is not None:
            self.active.close()
            self.active = None

    # ------------------------------------------------------------------ runs

    def _next(self) -> _Active | None:
        now = self.monotonic()
        if not self.checks.due(now):
            return None
        self.checks.done(now)
        if not self._reopened:
            # After a restart: a run read to its end with events still unsent reads again.
            reopened = self.runs.reopen_unsent()
            self._reopened = True
            if reopened:
                log.warning("%d replay runs have unsent events: reading them again", reopened)
        run = self.runs.next_open()
        if run is None:
            return None
        try:
            self.active = self._start(run)
        except QueueUnavailable as error:
            log.warning("replay epoch %d waits for the queue (%s)", run.replay_epoch, error)
            return None
        return self.active

    def _start(self, run: ReplayRun) -> _Active | None:
        group = replay_group(self.state.consumer_group, run.replay_epoch)
        queue = RangeQueue(self.open_queue(group), run)
        low = queue.first_offset(run.key)
        if low is None:
            queue.close()
            raise QueueUnavailable("the queue's first offset of the partition is unknown")
        try:
            run.range.check_closed(low, run.last)
        except ReplayRangeError as error:
            queue.close()
            self.runs.failed(run.replay_epoch, str(error))
            log.error("replay epoch %d failed: %s", run.replay_epoch, error)
            return None
        state = SQLiteShipState(self.state.path, self.state.origin_node_id, group,
                                clock=self.state.database.clock)
        with state.database.transaction() as conn:
            state.partition_watermarks.recompute(conn, run.key, run.replay_epoch)
        consumer = ReplayConsumer(queue, self.normalizer_for(run.original_epoch), state,
                                  run.replay_epoch, self.rules)
        consumer.refresh()
        self.runs.started(run.replay_epoch)
        log.warning("replay epoch %d started by %s: %s/%d offsets %d..%d (%s)",
                    run.replay_epoch, run.actor, run.topic, run.partition, run.first, run.last,
                    run.reason)
        return _Active(run, queue, consumer, state)


def _merge(into: Recorded, recorded: Recorded) -> None:
    into.sendable += recorded.sendable
    into.sizes.update(recorded.sizes)
    into.awaiting_receipt += recorded.awaiting_receipt
    into.new_events += recorded.new_events
    into.rereads += recorded.rereads
    into.skipped += recorded.skipped
    into.blocked += recorded.blocked
    into.duplicates += recorded.duplicates
