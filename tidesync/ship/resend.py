"""Answering a shore's resend request (§10.4): upload a partition's events again from the source
sequence the shore is missing.

The shore asks when a `source_sequence` gap stays open past its deadline. The ship's backlog
stays in the queue until the shore has finished its events (the queue commit follows the
terminal watermark), so the events behind the gap are still there: their RECEIVED rows go back
to READY (`tidesync.ship.state.resends`) and the consumer reads the partition again from the
first of them. Re-read records follow their rows, as after a restart: those READY are sent
again with the sequence they had, everything else (terminal, blocked, skipped) stays as it is.
Nothing the checkpoint passed is sent again, and a record the queue no longer holds is refused,
never skipped. Events the shore does hold are sent again with the missing ones (it answers them
as duplicates): the request names where the shore's gap begins, not where it ends.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.downlink_command import CommandResult, ResendPayload
from tidesync.domain.errors import Unavailable
from tidesync.domain.ship_intake import SENDABLE, EventState
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.resends import ResendStart, SQLiteResends

log = logging.getLogger(__name__)


class ResendReason(enum.StrEnum):
    """Why a resend request was answered the way it was (the ack's reason code)."""

    RESEND_QUEUED = "RESEND_QUEUED"
    ALREADY_TERMINAL = "ALREADY_TERMINAL"
    PARTITION_NOT_READ = "PARTITION_NOT_READ"
    REPLAY_EPOCH_MISMATCH = "REPLAY_EPOCH_MISMATCH"
    SEQUENCE_UNKNOWN = "SEQUENCE_UNKNOWN"
    EVENT_BLOCKED = "EVENT_BLOCKED"
    EVENT_EXPIRED = "EVENT_EXPIRED"
    QUEUE_OFFSET_GONE = "QUEUE_OFFSET_GONE"


class ResendDeferred(Unavailable):
    """The queue could not say what it holds now: the request is answered later."""

    reason_code = "QUEUE_UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class ResendOutcome:
    result: CommandResult
    reason: ResendReason
    detail: str


def _rejected(reason: ResendReason, detail: str) -> ResendOutcome:
    return ResendOutcome(CommandResult.COMMAND_REJECTED, reason, detail)


class QueueResender:
    """Carries out resend requests on the ship client's consumer and state store."""

    def __init__(self, state: SQLiteShipState, consumer: QueueConsumer) -> None:
        self.consumer = consumer
        self.resends = SQLiteResends(state.database, state.partition_watermarks)

    def resend(self, request: ResendPayload) -> ResendOutcome:
        """Queue the partition's events from `request.from_sequence` on to be sent again, or
        say why not. Raises ResendDeferred when the queue cannot be asked now."""
        key = PartitionKey(request.topic, request.partition)
        progress = self.consumer.partitions.get(key)
        if progress is None or progress.blocked_reason is not None:
            return _rejected(ResendReason.PARTITION_NOT_READ,
                             "this ship does not read that partition now")
        start = self.resends.start(key, request.replay_epoch, request.from_sequence)
        refused = _refusal(start, request)
        if refused is not None:
            return refused
        if start.reread_from is None:
            return ResendOutcome(CommandResult.COMMAND_APPLIED, ResendReason.RESEND_QUEUED,
                                 "the events from that sequence on are still to be sent")
        first = self.consumer.queue.first_offset(key)
        if first is None:
            raise ResendDeferred("the queue's first offset of the partition is unknown")
        if start.reread_from < first:
            return _rejected(ResendReason.QUEUE_OFFSET_GONE,
                             f"the queue no longer holds offset {start.reread_from}"
                             f" (it starts at {first})")
        reopened = self.resends.reopen(key, request.replay_epoch, request.from_sequence)
        self.consumer.rewind(key, start.reread_from)
        log.warning("the shore misses %s/%d from source_sequence %d: sending %d events again"
                    " from offset %d", key.topic, key.partition, request.from_sequence,
                    reopened, start.reread_from)
        return ResendOutcome(CommandResult.COMMAND_APPLIED, ResendReason.RESEND_QUEUED,
                             f"{reopened} events are sent again")


def _refusal(start: ResendStart, request: ResendPayload) -> ResendOutcome | None:
    """The answer when the event with the missing sequence cannot or need not be sent."""
    watermark = start.watermark
    if watermark is None or watermark.replay_epoch != request.replay_epoch:
        return _rejected(ResendReason.REPLAY_EPOCH_MISMATCH,
                         "this ship reads that partition in another replay epoch")
    # A sequence this partition gave out whose row is gone was pruned: applied on the shore
    # (`tidesync.ship.state.retention`).
    pruned = start.state is None and 0 < request.from_sequence < watermark.next_source_sequence
    if start.state is None and not pruned:
        return _rejected(ResendReason.SEQUENCE_UNKNOWN,
                         f"no event of this ship has source_sequence {request.from_sequence}")
    if start.state is EventState.TERMINAL or pruned:
        return ResendOutcome(CommandResult.COMMAND_ALREADY_APPLIED,
                             ResendReason.ALREADY_TERMINAL,
                             "the shore already answered that event with its result")
    if start.state is EventState.EXPIRED_APPROVED:
        return _rejected(ResendReason.EVENT_EXPIRED,
                         "an operator approved that the event is never delivered")
    if start.state is EventState.BLOCKED:
        return _rejected(ResendReason.EVENT_BLOCKED,
                         "the event is blocked on the ship and waits for an operator")
    assert start.state in SENDABLE or start.state is EventState.RECEIVED
    return None
