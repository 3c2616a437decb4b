"""The ship's side of reconciliation over the link: answer a shore's RECONCILE turn against the
ship's business database and post the answer, or queue a repair's snapshot of listed keys.

A turn is answered by computing this side's message (`tidesync.target.reconciliation.answer`),
posting it to /sync/v1/reconcile-answers and only then acking the command, so a turn pulled
again after a crash is answered again (the same answer: the shore keeps the first). Only
counts, digests, keys and row hashes are sent, never a value; nothing of them is logged.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import sqlalchemy as sa

from tidesync.domain.downlink_command import (
    CommandResult,
    ReconcilePayload,
    SnapshotKeysPayload,
)
from tidesync.domain.evidence import EvidenceValueError, decode_value
from tidesync.domain.rules.filter import parse_filter
from tidesync.ship.reconcile_deferred import ReconcileDeferred
from tidesync.target import digests, reconciliation
from tidesync.target.digests import Key
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

log = logging.getLogger(__name__)

MAX_SNAPSHOT_KEYS = 1_000_000
_FINAL_REFUSALS = frozenset({400, 404, 405, 413})
BusinessConnection = Callable[[], contextlib.AbstractContextManager[sa.Connection]]
SnapshotRequester = Callable[[str, str, Sequence[Key], str, str], int]
"""(database, table, keys, actor, reason) → the snapshot request's id in the capture's store."""


class ReconcileReason(enum.StrEnum):
    RECONCILE_ANSWERED = "RECONCILE_ANSWERED"
    RECONCILE_NOT_WAITING = "RECONCILE_NOT_WAITING"
    RECONCILE_MALFORMED = "RECONCILE_MALFORMED"
    RECONCILE_TOO_LARGE = "RECONCILE_TOO_LARGE"
    TABLE_NOT_RECONCILABLE = "TABLE_NOT_RECONCILABLE"
    RECONCILE_ANSWER_REFUSED = "RECONCILE_ANSWER_REFUSED"
    SNAPSHOT_QUEUED = "SNAPSHOT_QUEUED"
    SNAPSHOT_UNAVAILABLE = "SNAPSHOT_UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class ReconcileOutcome:
    result: CommandResult
    reason: ReconcileReason
    detail: str


@runtime_checkable
class AnswerLink(Protocol):
    """Where the ship posts its answers (`HttpShoreLink`)."""

    def reconcile_answer(self, message: pb.ReconcileAnswer) -> pb.ReconcileAnswerResponse: ...


def _rejected(reason: ReconcileReason, detail: str) -> ReconcileOutcome:
    return ReconcileOutcome(CommandResult.COMMAND_REJECTED, reason, detail[:300])


class ShipReconciler:
    """Answers reconciliation turns and queues repair snapshots for the downlink loop."""

    def __init__(self, node_id: str, business: BusinessConnection, link: AnswerLink,
                 snapshots: SnapshotRequester | None = None) -> None:
        self.node_id, self.business, self.link = node_id, business, link
        self.snapshots = snapshots

    def answer(self, turn: ReconcilePayload, command_id: bytes) -> ReconcileOutcome:
        """Compute and post this side's answer; raises ReconcileDeferred to be retried."""
        try:
            message = reconciliation.decode(turn.message.encode())
            reply = self._reply(turn.ship_table, message)
            data = reconciliation.checked_size(reply)
        except reconciliation.MessageTooLarge as error:
            return _rejected(ReconcileReason.RECONCILE_TOO_LARGE, str(error))
        except reconciliation.ReconcileError as error:
            return _rejected(ReconcileReason.RECONCILE_MALFORMED, str(error))
        except digests.DigestError as error:
            return _rejected(ReconcileReason.TABLE_NOT_RECONCILABLE, str(error))
        except sa.exc.OperationalError as error:
            raise ReconcileDeferred(f"the business database is unreachable"
                                    f" ({type(error.orig).__name__})") from error
        return self._post(turn, command_id, reply, data)

    def _reply(self, ship_table: str, message: reconciliation.Exchange
               ) -> reconciliation.Exchange:
        if message.done:
            return message
        database, _, table = ship_table.rpartition(".")
        with self.business() as connection:
            digests.prepare_connection(connection)
            source = digests.digest_table(
                connection, table, database=database or None,
                row_filter=parse_filter(message.row_filter) if message.row_filter else None)
            return reconciliation.answer(connection, source, message)

    def _post(self, turn: ReconcilePayload, command_id: bytes,
              reply: reconciliation.Exchange, data: bytes) -> ReconcileOutcome:
        request = pb.ReconcileAnswer(
            protocol_version=codec.PROTOCOL_VERSION, node_id=self.node_id,
            command_id=command_id, exchange_id=turn.exchange_id.bytes, round=reply.round,
            message=reconciliation.pack(data))
        try:
            response = self.link.reconcile_answer(request)
        except Exception as error:
            raise ReconcileDeferred(f"the answer could not be posted ({type(error).__name__})"
                                    ) from error
        if not response.accepted:
            return ReconcileOutcome(CommandResult.COMMAND_ALREADY_APPLIED,
                                    ReconcileReason.RECONCILE_NOT_WAITING,
                                    "the shore no longer waits for this answer")
        log.info("reconciliation round %d answered (%d ranges, %d row lists)", reply.round,
                 len(reply.ranges), len(reply.leaves))
        return ReconcileOutcome(CommandResult.COMMAND_APPLIED,
                                ReconcileReason.RECONCILE_ANSWERED, f"round {reply.round}")

    def snapshot(self, request: SnapshotKeysPayload) -> ReconcileOutcome:
        """Queue a snapshot of the listed keys for the capture (`tidesync snapshot status`)."""
        if self.snapshots is None:
            return _rejected(ReconcileReason.SNAPSHOT_UNAVAILABLE,
                             "this ship runs no binlog capture to take snapshots")
        database, _, table = request.ship_table.rpartition(".")
        try:
            keys = [tuple(decode_value(value) for value in key) for key in request.keys]
        except (EvidenceValueError, ValueError, TypeError) as error:
            return _rejected(ReconcileReason.RECONCILE_MALFORMED,
                             f"unreadable keys ({type(error).__name__})")
        if not 1 <= len(keys) <= MAX_SNAPSHOT_KEYS or not database:
            return _rejected(ReconcileReason.RECONCILE_MALFORMED,
                             f"a snapshot of 1..{MAX_SNAPSHOT_KEYS} keys of a DB.TABLE")
        snapshot_id = self.snapshots(database, table, keys, request.actor or "shore",
                                     request.reason or "reconciliation repair")
        return ReconcileOutcome(CommandResult.COMMAND_APPLIED, ReconcileReason.SNAPSHOT_QUEUED,
                                f"snapshot {snapshot_id} of {len(keys)} keys queued")
