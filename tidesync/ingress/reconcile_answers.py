"""POST /sync/v1/reconcile-answers: a ship's answer to one turn of a reconciliation, kept in the
exchange's row until the shore's worker takes it up (`tidesync.shore.reconcile_link`).

Only the node the exchange is with, and only for the round the exchange waits for, is
accepted; a repeated post of the same answer is accepted unchanged. Bodies are bounded like
uploads and the message inside by the link's limit for reconciliation messages.
"""

from __future__ import annotations

import uuid
from typing import Any

from google.protobuf.message import Message

from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

MAX_ANSWER_BYTES = 8 * 1024 * 1024
"""The most bytes of a (compressed) answer message; the JSON inside is checked on take-up."""

_KEEP = (
    "UPDATE reconcile_exchange SET answer = %s WHERE exchange_id = %s AND node_id = %s"
    " AND state = 'RUNNING' AND waiting_round = %s AND answer IS NULL"
)
_SAME = (
    "SELECT 1 FROM reconcile_exchange WHERE exchange_id = %s AND node_id = %s"
    " AND (answer = %s OR (waiting_round IS DISTINCT FROM %s AND round >= %s))"
)


class BadReconcileAnswer(codec.MalformedPayload):
    """An answer without a 16-byte exchange id or over its limits."""


def decode_answer(body: bytes, max_compressed: int) -> pb.ReconcileAnswer:
    answer = codec.decompress_message(body, pb.ReconcileAnswer, max_compressed=max_compressed,
                                      max_decompressed=MAX_ANSWER_BYTES + 4096)
    if len(answer.exchange_id) != 16 or len(answer.command_id) != 16:
        raise BadReconcileAnswer("exchange_id and command_id must be 16 bytes")
    if not answer.message or len(answer.message) > MAX_ANSWER_BYTES:
        raise BadReconcileAnswer(f"an answer holds a message of 1..{MAX_ANSWER_BYTES} bytes")
    return answer


def keep_answer(conn: Any, node_id: str, answer: pb.ReconcileAnswer) -> Message:
    """Store the answer in its exchange (inside the request's transaction)."""
    exchange_id = uuid.UUID(bytes=answer.exchange_id)
    message = bytes(answer.message)
    kept = conn.execute(_KEEP, (message, exchange_id, node_id, answer.round)).rowcount
    if not kept:
        # Sent before and taken up already (or kept): the ship may forget it all the same.
        kept = conn.execute(_SAME, (exchange_id, node_id, message, answer.round,
                                    answer.round)).fetchone() is not None
    return pb.ReconcileAnswerResponse(accepted=bool(kept))
