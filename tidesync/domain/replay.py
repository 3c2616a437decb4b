"""Replay by range (§7.4, replay epochs): a closed range of a ship's queue read again under a new
replay epoch, and how the shore recognises what it already applied.

A replayed event has a new event id (the id covers the replay epoch), so the shore's ledger
cannot know it under that id. It carries the epoch it replays in its source details
(`REPLAY_OF_EPOCH`); with its unchanged coordinates (origin, topic, partition, offset), key and
operation that names the original event id exactly, and the shore checks the ledger for both
ids: an event applied under its original id is ALREADY_APPLIED, never applied a second time,
even when the row has changed since.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, replace

from tidesync.domain.change_event import ChangeEvent, SourceCoordinates, event_id_for
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.values import frozen_row

REPLAY_OF_EPOCH = "tidesync.replay_of_epoch"
"""The source detail naming the replay epoch a replayed event was first read under."""
MAX_REPLAY_RECORDS = 10_000_000


class ReplayRangeError(TidesyncError):
    """A replay range that is open, reversed, too large or not in the queue any more."""

    code = ErrorCode.INVALID_INPUT


def original_event_id(event: ChangeEvent) -> uuid.UUID | None:
    """The id the event had when first read, if it is a replay (else None)."""
    epoch = event.source_details.get(REPLAY_OF_EPOCH)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        return None
    if epoch == event.replay_epoch:
        return None
    coordinates = SourceCoordinates(event.origin_node_id, epoch, event.source_topic,
                                    event.source_partition, event.source_position)
    return event_id_for(coordinates, event.record, event.operation)


def ledger_ids(event: ChangeEvent) -> list[uuid.UUID]:
    """The ids under which the ledger may know this event: its own, and for a replay the
    original one."""
    original = original_event_id(event)
    return [event.event_id] if original is None else [event.event_id, original]


def as_replay(event: ChangeEvent, replay_epoch: int) -> ChangeEvent:
    """The event as read again under `replay_epoch`: new id, marked with its first epoch."""
    if replay_epoch <= event.replay_epoch:
        raise ReplayRangeError("a replay epoch must be newer than the event's")
    first = event.source_details.get(REPLAY_OF_EPOCH, event.replay_epoch)
    coordinates = SourceCoordinates(event.origin_node_id, replay_epoch, event.source_topic,
                                    event.source_partition, event.source_position)
    return replace(event, replay_epoch=replay_epoch,
                   event_id=event_id_for(coordinates, event.record, event.operation),
                   source_details=frozen_row({**event.source_details, REPLAY_OF_EPOCH: first}))


@dataclass(frozen=True, slots=True)
class ReplayRange:
    """A closed range of one queue partition: offsets `first`..`last`, both included."""

    topic: str
    partition: int
    first: int
    last: int

    def __post_init__(self) -> None:
        if not self.topic or self.partition < 0:
            raise ReplayRangeError("a replay range needs a topic and a partition >= 0")
        if not 0 <= self.first <= self.last:
            raise ReplayRangeError(f"a replay range runs from an offset to a later one,"
                                   f" got {self.first}..{self.last}")
        if self.last - self.first + 1 > MAX_REPLAY_RECORDS:
            raise ReplayRangeError(f"a replay range holds at most {MAX_REPLAY_RECORDS} records")

    def check_closed(self, low_offset: int, terminal_offset: int) -> None:
        """Refuse a range the queue no longer holds (`low_offset`: its first record) or that
        reaches past what the shore has finished (`terminal_offset`, inclusive)."""
        if self.first < low_offset:
            raise ReplayRangeError(f"offsets before {low_offset} are no longer in the queue")
        if self.last > terminal_offset:
            raise ReplayRangeError(
                f"the range is not closed: offsets after {terminal_offset} are still being"
                " sent; replay only what the shore has finished")


def check_times(since: dt.datetime, until: dt.datetime) -> None:
    """A --since/--until pair: aware times, the first before the second."""
    if since.tzinfo is None or until.tzinfo is None:
        raise ReplayRangeError("--since and --until need a time zone (e.g. 2026-01-02T03:04Z)")
    if since >= until:
        raise ReplayRangeError("--since must be before --until")
