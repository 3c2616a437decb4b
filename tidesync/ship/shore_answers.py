"""The shore's answers read into the state store's terms: upload statuses (per event, or events
RECEIVED named by offset ranges) and receipt results, and the rejections the client itself
gives events the shore can never take.
"""

from __future__ import annotations

import enum
import functools
import uuid
from collections.abc import Sequence
from dataclasses import fields

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.slots import slot_builder
from tidesync.ship.state.receipts import ReceiveAnswer, ReceiveOutcome, TerminalResult
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import OffsetRanges, Stream, decode_ranges, within

_RECEIVE_OUTCOMES = {pb.RECEIVED: ReceiveOutcome.RECEIVED,
                     pb.RETRYABLE_FAILURE: ReceiveOutcome.RETRYABLE_FAILURE,
                     pb.PERMANENT_REJECTED: ReceiveOutcome.PERMANENT_REJECTED}


class ClientReason(enum.StrEnum):
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNENCODABLE_EVENT = "UNENCODABLE_EVENT"


def encodable(event: ChangeEvent) -> bool:
    try:
        codec.event_to_wire(event, codec.NameTable())
    except (ValueError, TypeError):
        return False
    return True


def receive_answer(status: pb.EventReceiveStatus) -> ReceiveAnswer:
    """One event's upload status; an unknown status is retried."""
    outcome = _RECEIVE_OUTCOMES.get(status.status, ReceiveOutcome.RETRYABLE_FAILURE)
    result = (_result_name(status.result.result)
              if status.HasField("result") and status.result.result else None)
    return ReceiveAnswer(uuid.UUID(bytes=status.event_id), outcome, status.reason_code,
                         status.detail, result)


@functools.lru_cache(maxsize=64)
def _result_name(code: int) -> str:
    """The name of a result code (raises ValueError for an unknown one, as `Name` does)."""
    return pb.EventResultCode.Name(code)


def terminal_results(page: pb.ReceiptsPage) -> list[TerminalResult]:
    """The page's results (one without a readable event id is left out)."""
    return [TerminalResult(uuid.UUID(bytes=r.event_id), pb.EventResultCode.Name(r.result),
                           r.reason_code)
            for r in page.results if len(r.event_id) == 16]


def batch_answers(events: Sequence[ChangeEvent], response: pb.UploadBatchResponse
                  ) -> list[ReceiveAnswer]:
    """The answers to a batch of `events`: its per-event statuses, and RECEIVED for each of
    its events the ranges name (raises WireError for ranges that cannot be read)."""
    answers = [receive_answer(status) for status in response.statuses]
    if not response.received:
        return answers
    ranges = decode_ranges(response.strings, response.received).streams
    named = {answer.event_id for answer in answers}
    # Each stream's ranges are looked up once per stream of the batch, not once per event.
    spans_of: dict[tuple[str, int, int], Sequence[tuple[int, int]]] = {}
    for event in events:
        event_id, offset = event.event_id, event.source_position
        where = (event.source_topic, event.source_partition, event.replay_epoch)
        spans = spans_of.get(where)
        if spans is None:
            spans = spans_of[where] = ranges.get(Stream(*where)) or ()
        if event_id not in named and within(spans, offset):
            answers.append(_RECEIVED(event_id, ReceiveOutcome.RECEIVED, "", "", None))
            named.add(event_id)
    return answers


_RECEIVED = slot_builder(ReceiveAnswer, [field.name for field in fields(ReceiveAnswer)])
"""ReceiveAnswer(...) built slot by slot: a batch's answer names each of its events."""


def applied_ranges(page: pb.ReceiptsPage) -> OffsetRanges:
    """The events a receipts page names APPLIED by offset ranges (raises WireError)."""
    return decode_ranges(page.strings, page.applied)
