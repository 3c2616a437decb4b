"""Shore CDC partitions held at a record, and their release by an operator.

The shore CDC consumer holds a partition at a record it cannot pass: a change that claims to
be a platform write the ledger does not prove (ORIGIN_UNPROVEN), or one the normalizer blocks.
Nothing after it reaches the ships until someone decides. `release` records that the record
is passed over: an OperatorAction (who, why; in the audit view) and a `shore_cdc_release` row in
one transaction. The consumer, whether it still holds the partition (it looks every few
seconds) or reads the record again after a restart, then records it SKIPPED with
OPERATOR_RELEASED and goes on with the rest of the partition.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from dataclasses import dataclass

import psycopg
from eventsourcing.persistence import IntegrityError
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.operations import OperationsApplication
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.operator_action import OperatorAction, OperatorActionError

Pool = ConnectionPool[psycopg.Connection[TupleRow]]

RELEASE_ACTION = "RELEASE_SHORE_CDC_HOLD"
_RELEASE_NAMESPACE = uuid.UUID("3f0c6a52-8d1e-5b7a-9c44-2e6f1d0b7a93")


@dataclass(frozen=True, slots=True)
class Hold:
    """A held partition: where and why (a reason code, never values)."""

    topic: str
    partition: int
    offset: int
    reason_code: str
    event_id: uuid.UUID | None
    blocked_at: dt.datetime


class HoldRefused(TidesyncError):
    """A release that cannot be carried out as asked; `code` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


def release_action_id(topic: str, partition: int, offset: int) -> uuid.UUID:
    """One release per queue position: asking again answers with the first one."""
    return uuid.uuid5(_RELEASE_NAMESPACE, f"{topic}\x1f{partition}\x1f{offset}")


class ShoreCdcHolds:
    def __init__(self, pool: Pool, *, owns_pool: bool = False) -> None:
        self.pool = pool
        self._owns_pool = owns_pool

    @classmethod
    def open(cls, conninfo: str) -> ShoreCdcHolds:
        """Over a small pool of its own (closed with it); the tables are migrated by then."""
        return cls(ConnectionPool(conninfo, min_size=1, max_size=2, open=True), owns_pool=True)

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    def holds(self) -> list[Hold]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT topic, kafka_partition, kafka_offset, reason_code, event_id, blocked_at"
                " FROM shore_cdc_block ORDER BY blocked_at, topic, kafka_partition").fetchall()
        return [Hold(str(r[0]), int(r[1]), int(r[2]), str(r[3]),
                     None if r[4] is None else uuid.UUID(str(r[4])), r[5]) for r in rows]

    def released(self, topic: str, partition: int, offset: int) -> bool:
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT 1 FROM shore_cdc_release WHERE topic = %s AND kafka_partition = %s"
                " AND kafka_offset = %s", (topic, partition, offset)).fetchone()
        return row is not None

    def release(self, operations: OperationsApplication, topic: str, partition: int,
                offset: int, *, actor: str, reason: str, now: dt.datetime,
                trace_id: str = "") -> uuid.UUID:
        """Release the hold at this position; returns the OperatorAction id."""
        if offset < 0:
            raise HoldRefused("NOT_RELEASABLE", "a partition held without a record (its offset"
                                                " is gone from the broker, or it failed) has"
                                                " nothing to release; it is retried on restart")
        action_id = release_action_id(topic, partition, offset)
        if self.released(topic, partition, offset):
            return action_id
        hold = next((h for h in self.holds()
                     if (h.topic, h.partition) == (topic, partition)), None)
        if hold is None or hold.offset != offset:
            where = "" if hold is None else f" (it is held at offset {hold.offset})"
            raise HoldRefused("NOT_HELD",
                              f"no shore CDC hold at {topic}/{partition}@{offset}{where}")
        try:
            action = OperatorAction.request(action_id, RELEASE_ACTION,
                                            f"{topic}/{partition}@{offset}", now, actor, reason,
                                            trace_id)
        except OperatorActionError as error:
            raise HoldRefused("REASON_REQUIRED", str(error)) from None
        action.complete(now, {"hold_reason": hold.reason_code}, actor, reason, trace_id)
        # Released at the same moment by someone else: the same release (same id).
        with contextlib.suppress(IntegrityError):
            operations.save(action, extra_statements=[
                ("INSERT INTO shore_cdc_release (topic, kafka_partition, kafka_offset,"
                 " hold_reason, action_id) VALUES (%s, %s, %s, %s, %s)",
                 (topic, partition, offset, hold.reason_code, action_id)),
                ("DELETE FROM shore_cdc_block WHERE topic = %s AND kafka_partition = %s"
                 " AND kafka_offset = %s", (topic, partition, offset)),
            ])
        return action_id
