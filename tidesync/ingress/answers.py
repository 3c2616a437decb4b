"""Compact upload answers on the shore (events RECEIVED named by offset ranges), and the answers
kept so that a ship whose answer was lost can ask for it
(GET /sync/v1/batches/{batch_id}) instead of sending the batch again.
"""

from __future__ import annotations

import datetime as dt
import re

from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.ingress.database import Connection
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import Stream, encode_ranges

ANSWER_RETENTION = dt.timedelta(days=7)
"""How long an upload answer is kept for a ship to ask for it."""
_BATCH_ID = re.compile(r"[0-9a-f]{32}")

_REMEMBER = (
    "INSERT INTO upload_answer (origin_node_id, client_batch_id, answer, answered_at)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (origin_node_id, client_batch_id)"
    " DO UPDATE SET answer = EXCLUDED.answer, answered_at = EXCLUDED.answered_at"
)
_FORGET_OLD = "DELETE FROM upload_answer WHERE origin_node_id = %s AND answered_at < %s"
_RECALL = ("SELECT answer FROM upload_answer WHERE origin_node_id = %s AND client_batch_id = %s"
           " AND answered_at >= %s")


class BadBatchId(TidesyncError, ValueError):
    """A batch id in a path that is not 32 lower-case hex digits."""

    code = ErrorCode.INVALID_INPUT


def batch_id_from_path(text: str) -> bytes:
    if _BATCH_ID.fullmatch(text) is None:
        raise BadBatchId("the batch id must be 32 lower-case hex digits")
    return bytes.fromhex(text)


# ----------------------------------------------------------------------------- upload answers


def compact_answer(batch: pb.UploadBatch, full: pb.UploadBatchResponse
                   ) -> pb.UploadBatchResponse:
    """`full` (one status per event, in batch order) with the events RECEIVED without a
    result named by offset ranges; every other status stays as it is."""
    answer = pb.UploadBatchResponse(batch_id=full.batch_id,
                                    server_time_micros=full.server_time_micros)
    names = batch.strings
    received: list[tuple[Stream, int]] = []
    seen: set[tuple[Stream, int]] = set()
    exceptions: list[pb.EventReceiveStatus] = []
    for wire, status in zip(batch.events, full.statuses, strict=True):
        if status.status == pb.RECEIVED and not status.HasField("result"):
            stream = Stream(names[wire.source_topic_ref], wire.source_partition,
                            wire.replay_epoch)
            where = (stream, wire.source_position)
            if where not in seen:  # two events at one place are named by id
                seen.add(where)
                received.append(where)
                continue
        exceptions.append(status)
    answer.statuses.extend(exceptions)
    strings, groups = encode_ranges(received)
    answer.strings.extend(strings)
    answer.received.extend(groups)
    return answer


class PostgresUploadAnswers:
    """The `upload_answer` table: the compact answer of each node's batch by its batch id."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def _remember(self, conn: Connection, node_id: str, batch_id: bytes,
                  answer: pb.UploadBatchResponse, now: dt.datetime) -> None:
        conn.execute(_FORGET_OLD, (node_id, now - ANSWER_RETENTION))
        conn.execute(_REMEMBER, (node_id, batch_id, answer.SerializeToString(), now))

    def _recall(self, conn: Connection, node_id: str, batch_id: bytes,
                now: dt.datetime) -> pb.UploadBatchResponse | None:
        row = conn.execute(_RECALL, (node_id, batch_id, now - ANSWER_RETENTION)).fetchone()
        if row is None:
            return None
        answer = pb.UploadBatchResponse()
        answer.ParseFromString(bytes(row[0]))
        return answer
