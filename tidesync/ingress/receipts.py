"""GET /sync/v1/receipts: a node's terminal event results, paged by a stable cursor.

The cursor is the last `receipt.seq` a page returned; clients treat it as opaque text. With
`form=ranges` plain APPLIED results are named by offset ranges per source partition.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.ingress.database import Connection, transaction
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import Stream, encode_ranges

MAX_PAGE = 1000
MAX_COMPACT_PAGE = 10_000
"""Results of one page in the ranged form: plain APPLIED ones cost a few bytes per range there,
so a ship that uploads fast can learn their fate as fast."""
MAX_LISTED = MAX_PAGE
"""Results a ranged page lists one by one (conflicts, rejections, verdicts with a reason): each
costs a few dozen bytes of the downlink, so a page of them stays a fraction of a second of a
satellite link's time and the node's other requests (commands, heartbeats) do not queue behind
it; whatever follows goes on the next page."""
DEFAULT_PAGE = 500
_CURSOR = re.compile(r"0|[1-9][0-9]{0,18}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PAGE = (
    "SELECT seq, event_id, result, reason_code, conflict_id, result_revision, decided_at,"
    " source_topic, source_partition, source_position FROM receipt"
    " WHERE origin_node_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
_PAGE_WITH_EPOCH = (
    "SELECT r.seq, r.event_id, r.result, r.reason_code, r.conflict_id, r.source_topic,"
    " r.source_partition, r.source_position, e.replay_epoch FROM receipt r"
    " LEFT JOIN inbox_event e ON e.origin_node_id = r.origin_node_id"
    " AND e.event_id = r.event_id"
    " WHERE r.origin_node_id = %s AND r.seq > %s ORDER BY r.seq LIMIT %s"
)


class BadPageRequest(TidesyncError, ValueError):
    """A cursor or limit the server cannot use."""

    code = ErrorCode.INVALID_INPUT


def page_request(cursor: str, limit: str, maximum: int = MAX_PAGE) -> tuple[int, int]:
    """(last seq seen, page size) from the query parameters; limits above `maximum` are
    capped."""
    if cursor and (_CURSOR.fullmatch(cursor) is None or int(cursor) >= 1 << 63):
        raise BadPageRequest("cursor is not one this server issued")
    if limit and (not limit.isdigit() or int(limit) < 1 or len(limit) > 9):
        raise BadPageRequest("limit must be a positive integer")
    return int(cursor or 0), min(int(limit or DEFAULT_PAGE), maximum)


class PostgresReceiptsView:
    """Reads the `receipt` table (written by the receipts projection)."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def page(self, node_id: str, after_seq: int, limit: int) -> pb.ReceiptsPage:
        """Up to `limit` results of the node after `after_seq`, oldest first."""
        with transaction(self.pool) as conn:
            return self._page(conn, node_id, after_seq, limit)

    def _page(self, conn: Connection, node_id: str, after_seq: int,
              limit: int) -> pb.ReceiptsPage:
        rows = conn.execute(_PAGE, (node_id, after_seq, limit + 1)).fetchall()
        return _receipts_page(rows, after_seq, limit)

    def _compact_page(self, conn: Connection, node_id: str, after_seq: int,
                      limit: int) -> pb.ReceiptsPage:
        rows = conn.execute(_PAGE_WITH_EPOCH, (node_id, after_seq, limit + 1)).fetchall()
        return compact_receipts_page(rows, after_seq, limit)


def _receipts_page(rows: Sequence[tuple[Any, ...]], after_seq: int,
                   limit: int) -> pb.ReceiptsPage:
    """The page of `limit` rows (one more was read to tell whether there are more)."""
    page = pb.ReceiptsPage(has_more=len(rows) > limit)
    rows = rows[:limit]
    for (_, event_id, result, reason, conflict_id, revision, decided_at, topic, partition,
         position) in rows:
        item = page.results.add(
            event_id=event_id.bytes,
            result=result_code(result) or pb.EVENT_RESULT_CODE_UNSPECIFIED,
            reason_code=reason or "", source_topic=topic, source_partition=partition,
            source_position=position,
            decided_at_micros=(decided_at - _EPOCH) // dt.timedelta(microseconds=1),
        )
        if conflict_id is not None:
            item.conflict_id = conflict_id.bytes
        if revision is not None:
            item.result_revision = revision
    page.next_cursor = str(rows[-1][0] if rows else after_seq)
    return page


_RESULT_CODES: dict[str, pb.EventResultCode] = {
    name: getattr(pb, name) for name in pb.EventResultCode.keys()  # noqa: SIM118 - not a dict
}


def result_code(result: str | None) -> pb.EventResultCode | None:
    """The wire code of a stored result text (None for no or an unknown result)."""
    return _RESULT_CODES.get(result) if result else None


def compact_receipts_page(rows: Sequence[tuple[Any, ...]], after_seq: int,
                          limit: int) -> pb.ReceiptsPage:
    """The page of up to `limit` rows (one more was read to tell whether there are more).

    A page never holds two results of one event: their order would be lost between the
    ranges and the entries, so the later one starts the next page. Nor does it list more than
    MAX_LISTED results one by one: the next one starts the next page."""
    page = pb.ReceiptsPage(has_more=len(rows) > limit)
    applied: list[tuple[Stream, int]] = []
    places: set[tuple[Stream, int]] = set()
    events: set[uuid.UUID] = set()
    last = after_seq
    for (seq, event_id, result, reason, conflict_id, topic, partition, position,
         epoch) in rows[:limit]:
        if event_id in events:
            page.has_more = True
            break
        where = (Stream(topic, partition, epoch or 0), position)
        ranged = result == "APPLIED" and not reason and epoch is not None and where not in places
        if not ranged and len(page.results) >= MAX_LISTED:
            page.has_more = True
            break
        events.add(event_id)
        last = seq
        if ranged:
            places.add(where)
            applied.append(where)
            continue
        item = page.results.add(
            event_id=event_id.bytes,
            result=result_code(result) or pb.EVENT_RESULT_CODE_UNSPECIFIED,
            reason_code=reason or "")
        if conflict_id is not None:
            item.conflict_id = conflict_id.bytes
    strings, groups = encode_ranges(applied)
    page.strings.extend(strings)
    page.applied.extend(groups)
    page.next_cursor = str(last)
    return page
