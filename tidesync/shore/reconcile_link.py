"""Reconciliation over the link, the shore's side: start an exchange with a ship as a RECONCILE
downlink command, take up each answer the ship posts, answer it with the next command until the
exchange ends, and keep every exchange (and so the last one per node and subject) in PostgreSQL.

The shore never connects to a ship: each of its turns is a command the ship pulls, and each of
the ship's turns arrives at /sync/v1/reconcile-answers (stored by the ingress in the exchange's
row, taken up here). Only counts, digests, keys and row hashes cross, never a business value.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.downlink_command import (
    CommandKind,
    NewCommand,
    ReconcilePayload,
    command_id_for,
)
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.evidence import decode_value
from tidesync.domain.rules.filter import parse_filter
from tidesync.domain.values import canonical_value
from tidesync.shore.downlink import DownlinkService
from tidesync.target import digests, reconciliation
from tidesync.target.digests import Key
from tidesync.target.reconciliation import Exchange

log = logging.getLogger(__name__)

Pool = ConnectionPool[psycopg.Connection[Any]]
BusinessConnection = Callable[[], contextlib.AbstractContextManager[sa.Connection]]
"""Opens a connection to the shore's business database (the `[target]` MySQL)."""


class ReconcileState(enum.StrEnum):
    RUNNING = "RUNNING"
    EQUAL = "EQUAL"
    DIFFERENT = "DIFFERENT"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    """The ship did not answer within `[reconcile] answer_timeout_seconds` of being heard from
    after the shore issued its turn."""


class ReconcileRefused(TidesyncError):
    """An exchange that cannot start (one runs already, an unknown rule) or be repaired."""

    code = ErrorCode.REFUSED


@dataclass(frozen=True, slots=True)
class Subject:
    """What is compared: `name` is `rule:ID` or `table:DB.TABLE`; the two sides' tables (a
    rule's target on the shore, its source on the ship) and the rule's row filter."""

    name: str
    shore_table: str
    ship_table: str
    row_filter: str = ""


@dataclass(frozen=True, slots=True)
class ExchangeRow:
    """One exchange as the shore keeps it (keys in type-tagged canonical form)."""

    exchange_id: uuid.UUID
    node_id: str
    subject: str
    shore_table: str
    ship_table: str
    state: str
    round: int
    messages: int
    link_bytes: int
    rows_compared: int
    differing_count: int | None
    differing_keys: list[list[object]] | None
    shore_only_keys: list[list[object]] | None
    actor: str
    reason: str
    error: str
    started_at: dt.datetime
    ended_at: dt.datetime | None
    repaired_at: dt.datetime | None

    @property
    def seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds())


_COLUMNS = ("exchange_id, node_id, subject, shore_table, ship_table, state, round, messages,"
            " link_bytes, rows_compared, differing_count, differing_keys, shore_only_keys,"
            " actor, reason, error, started_at, ended_at, repaired_at")
_ONE = ("SELECT exchange_id, node_id, subject, shore_table, ship_table, state, round, messages,"
        " link_bytes, rows_compared, differing_count, differing_keys, shore_only_keys, actor,"
        " reason, error, started_at, ended_at, repaired_at FROM reconcile_exchange"
        " WHERE exchange_id = %s")
_SENTINEL = (
    "SELECT DISTINCT ON (node_id, subject) exchange_id, node_id, subject, shore_table,"
    " ship_table, state, round, messages, link_bytes, rows_compared, differing_count,"
    " differing_keys, shore_only_keys, actor, reason, error, started_at, ended_at, repaired_at"
    " FROM reconcile_exchange WHERE %s::text IS NULL OR node_id = %s"
    " ORDER BY node_id, subject, started_order DESC"
)
_INSERT = (
    "INSERT INTO reconcile_exchange (exchange_id, node_id, subject, shore_table, ship_table,"
    " row_filter, state, round, waiting_round, command_id, messages, link_bytes, rows_compared,"
    " actor, reason, started_at, turn_at) VALUES (%s, %s, %s, %s, %s, %s, 'RUNNING', 1, 2, %s,"
    " 1, %s, %s, %s, %s, %s, %s)"
)
_NEXT_TURN = (
    "UPDATE reconcile_exchange SET round = %s, waiting_round = %s, command_id = %s,"
    " answer = NULL, messages = %s, link_bytes = link_bytes + %s, turn_at = %s,"
    " contact_at = NULL WHERE exchange_id = %s AND waiting_round = %s AND state = 'RUNNING'"
)
_FINISH = (
    "UPDATE reconcile_exchange SET state = %s, round = %s, waiting_round = NULL, answer = NULL,"
    " messages = %s, link_bytes = link_bytes + %s, rows_compared = %s, differing_count = %s,"
    " differing_keys = %s::jsonb, shore_only_keys = %s::jsonb, ended_at = %s"
    " WHERE exchange_id = %s AND state = 'RUNNING'"
)
_FAIL = (
    "UPDATE reconcile_exchange SET state = 'FAILED', waiting_round = NULL, answer = NULL,"
    " error = %s, ended_at = %s WHERE exchange_id = %s AND state = 'RUNNING'"
)
_CONTACT = (
    "UPDATE reconcile_exchange e SET contact_at = h.received_at FROM node_heartbeat h"
    " WHERE e.state = 'RUNNING' AND e.answer IS NULL AND e.contact_at IS NULL"
    " AND h.node_id = e.node_id AND h.received_at >= e.turn_at"
)
_TIME_OUT = (
    "UPDATE reconcile_exchange SET state = 'TIMED_OUT', waiting_round = NULL,"
    " error = 'the ship did not answer round ' || round || ' within ' || %s::text"
    " || ' s of being heard from', ended_at = %s"
    " WHERE state = 'RUNNING' AND answer IS NULL AND contact_at <= %s RETURNING exchange_id"
)
_ANSWERED = (
    "SELECT exchange_id, node_id, subject, shore_table, row_filter, waiting_round, answer"
    " FROM reconcile_exchange WHERE answer IS NOT NULL AND state = 'RUNNING'"
    " ORDER BY started_at LIMIT %s"
)
_REFUSED_TURNS = (
    "SELECT e.exchange_id, d.ack_reason_code FROM reconcile_exchange e"
    " JOIN downlink_command d ON d.command_id = e.command_id"
    " WHERE e.state = 'RUNNING' AND e.answer IS NULL AND d.ack_result = 'COMMAND_REJECTED'"
)


class ExchangeStore:
    """The `reconcile_exchange` table (and its `reconcile_sentinel` view)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def query(self, statement: str, params: Sequence[object]) -> list[dict[str, Any]]:
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(statement.encode(), params)
            return cursor.fetchall()

    def execute(self, statement: str, params: Sequence[object]) -> int:
        with self.pool.connection() as conn, conn.transaction():
            return conn.execute(statement.encode(), params).rowcount

    def exchange(self, exchange_id: uuid.UUID) -> ExchangeRow | None:
        rows = self.query(_ONE, (exchange_id,))
        return _row(rows[0]) if rows else None

    def sentinel(self, node_id: str | None = None) -> list[ExchangeRow]:
        """The last exchange of every node and subject (of one node)."""
        rows = self.query(_SENTINEL, (node_id, node_id))
        return [_row(row) for row in rows]

    def last_started(self, node_id: str, subject: str) -> tuple[dt.datetime, str] | None:
        """When the last exchange of the node and subject began, and its state."""
        rows = self.query("SELECT started_at, state FROM reconcile_exchange WHERE node_id = %s"
                          " AND subject = %s ORDER BY started_order DESC LIMIT 1",
                          (node_id, subject))
        return (rows[0]["started_at"], rows[0]["state"]) if rows else None


def _row(row: dict[str, Any]) -> ExchangeRow:
    return ExchangeRow(**{name: row[name] for name in _COLUMNS.replace(" ", "").split(",")})


def key_json(keys: Sequence[Key]) -> str:
    return json.dumps([[canonical_value(value) for value in key] for key in keys],
                      separators=(",", ":"), ensure_ascii=False)


def keys_from_json(raw: Sequence[Sequence[object]]) -> list[Key]:
    return [tuple(decode_value(value) for value in key) for key in raw]


DEFAULT_ANSWER_TIMEOUT = dt.timedelta(hours=24)


class ReconcileLink:
    """Starts exchanges and carries them forward (`advance`, from the worker or a waiting CLI)."""

    def __init__(self, store: ExchangeStore, downlink: DownlinkService,
                 business: BusinessConnection, clock: Clock = utc_now,
                 answer_timeout: dt.timedelta | None = DEFAULT_ANSWER_TIMEOUT) -> None:
        self.store, self.downlink, self.business, self.clock = store, downlink, business, clock
        self.answer_timeout = answer_timeout
        """How long a ship may stay silent about the awaited turn once it has been heard
        from (a heartbeat) after the turn was issued; None: forever."""

    # ------------------------------------------------------------------ start

    def start(self, node_id: str, subject: Subject, actor: str, reason: str) -> uuid.UUID:
        """Compute the first message on the shore and send it to the node; refused while an
        exchange of the node and subject runs."""
        now = self.clock()
        with self.source(subject.shore_table, subject.row_filter) as (connection, source):
            first = reconciliation.start(connection, source, subject.name, now,
                                         row_filter=subject.row_filter)
        data = reconciliation.checked_size(first)
        exchange_id = uuid.uuid4()
        payload = ReconcilePayload(exchange_id, 1, subject.ship_table, data.decode())
        command_id = command_id_for(node_id, CommandKind.RECONCILE, payload.source_id)
        try:
            self.store.execute(_INSERT, (
                exchange_id, node_id, subject.name, subject.shore_table, subject.ship_table,
                subject.row_filter, command_id, len(reconciliation.pack(data)),
                first.rows_compared, actor, reason, now, now))
        except psycopg.errors.UniqueViolation as error:
            raise ReconcileRefused(f"an exchange of {subject.name} with {node_id} is running"
                                   ) from error
        try:
            self.downlink.issue([NewCommand(node_id, CommandKind.RECONCILE, payload.source_id,
                                            payload, actor=actor, reason=reason)])
        except Exception:
            # An exchange without its first command would block its node and subject.
            self._fail(exchange_id, "the first command could not be issued")
            raise
        log.info("reconciliation %s of %s with %s started", exchange_id, subject.name, node_id)
        return exchange_id

    # ------------------------------------------------------------------ advance

    def advance(self, limit: int = 20) -> int:
        """Take up the answers ships posted, fail exchanges whose turn a ship refused and
        time out those whose ship stays silent; returns how many exchanges moved."""
        moved = self._time_out()
        for exchange_id, reason_code in [(r["exchange_id"], r["ack_reason_code"])
                                         for r in self.store.query(_REFUSED_TURNS, ())]:
            moved += self._fail(exchange_id, f"the ship refused its turn ({reason_code})")
        for row in self.store.query(_ANSWERED, (limit,)):
            try:
                moved += self._take_up(row)
            except reconciliation.ReconcileError as error:
                moved += self._fail(row["exchange_id"], str(error)[:300])
            except digests.DigestError as error:
                moved += self._fail(row["exchange_id"], str(error)[:300])
        return moved

    def _take_up(self, row: dict[str, Any]) -> int:
        raw = bytes(row["answer"])
        answer = reconciliation.decode(reconciliation.unpack(raw))
        if answer.round != row["waiting_round"]:
            raise reconciliation.ReconcileError("the ship answered another round")
        if answer.done:
            return self._finish(row["exchange_id"], answer, len(raw))
        with self.source(row["shore_table"], row["row_filter"]) as (connection, source):
            reply = reconciliation.answer(connection, source, answer)
        if reply.done:
            return self._finish(row["exchange_id"], reply, len(raw))
        data = reconciliation.checked_size(reply)
        ship_table = self._ship_table(row["exchange_id"])
        payload = ReconcilePayload(row["exchange_id"], reply.round, ship_table, data.decode())
        command = NewCommand(row["node_id"], CommandKind.RECONCILE, payload.source_id, payload,
                             reason=f"reconciliation round {reply.round}")
        self.downlink.issue([command], [(_NEXT_TURN, (
            reply.round, reply.round + 1, command.command_id, reply.round,
            len(raw) + len(reconciliation.pack(data)), self.clock(), row["exchange_id"],
            row["waiting_round"]))])
        return 1

    def _time_out(self) -> int:
        """Note when each silent exchange's ship was first heard from after its turn was
        issued, and end those silent for longer than the timeout since then."""
        if self.answer_timeout is None:
            return 0
        self.store.execute(_CONTACT, ())
        now = self.clock()
        ended = self.store.query(_TIME_OUT, (
            int(self.answer_timeout.total_seconds()), now, now - self.answer_timeout))
        for row in ended:
            log.warning("reconciliation %s timed out: the ship did not answer",
                        row["exchange_id"])
        return len(ended)

    def _ship_table(self, exchange_id: uuid.UUID) -> str:
        found = self.store.exchange(exchange_id)
        return "" if found is None else found.ship_table

    def _finish(self, exchange_id: uuid.UUID, message: Exchange, answer_bytes: int) -> int:
        state = ReconcileState.DIFFERENT if message.differing else ReconcileState.EQUAL
        changed = self.store.execute(_FINISH, (
            state, message.round, message.round, answer_bytes, message.rows_compared,
            len(message.differing), key_json(message.differing), key_json(message.starter_only),
            self.clock(), exchange_id))
        log.info("reconciliation %s ended %s: %d differing keys", exchange_id, state,
                 len(message.differing))
        return changed

    def _fail(self, exchange_id: uuid.UUID, error: str) -> int:
        log.warning("reconciliation %s failed: %s", exchange_id, error)
        return self.store.execute(_FAIL, (error, self.clock(), exchange_id))

    @contextlib.contextmanager
    def source(self, table: str, row_filter: str
               ) -> Iterator[tuple[sa.Connection, digests.DigestTable]]:
        """A shore table (DB.TABLE) as the digests read it, with a rule's row filter."""
        database, _, name = table.rpartition(".")
        with self.business() as connection:
            digests.prepare_connection(connection)
            yield connection, digests.digest_table(
                connection, name, database=database or None,
                row_filter=parse_filter(row_filter) if row_filter else None)
