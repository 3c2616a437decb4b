"""The shore's answers read into the state store's terms: per-event upload statuses and receipt
results, and the rejections the client itself gives events the shore can never take.
"""

from __future__ import annotations

import enum
import uuid

from tidesync.domain.change_event import ChangeEvent
from tidesync.ship.state.receipts import ReceiveAnswer, ReceiveOutcome, TerminalResult
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

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
    result = (pb.EventResultCode.Name(status.result.result)
              if status.HasField("result") and status.result.result else None)
    return ReceiveAnswer(uuid.UUID(bytes=status.event_id), outcome, status.reason_code,
                         status.detail, result)


def terminal_results(page: pb.ReceiptsPage) -> list[TerminalResult]:
    """The page's results (one without a readable event id is left out)."""
    return [TerminalResult(uuid.UUID(bytes=r.event_id), pb.EventResultCode.Name(r.result),
                           r.reason_code)
            for r in page.results if len(r.event_id) == 16]
