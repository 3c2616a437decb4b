"""Downlink commands (shore -> ship, §9.4, §10.4, §11.6): issue, page to a ship, record its acks.

Each command is a DownlinkCommand stream; the `downlink_command` table indexes them in the
same transaction (per-node contiguous sequence, payload, ack), so pages and follow-ups never
read streams one by one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    PersistenceError,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg import sql
from psycopg.rows import DictRow

from tidesync.apps.downlink import DownlinkApplication
from tidesync.apps.recorder import Statement, open_application
from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.downlink_command import (
    MAX_ACKS_PER_REQUEST,
    CommandKind,
    CommandResult,
    DownlinkCommand,
    DownlinkUnavailable,
    NewCommand,
    Payload,
    ReconcilePayload,
    ResendPayload,
    RowChangePayload,
    SnapshotKeysPayload,
    TooManyAcks,
    image_from_json,
    kind_of,
    needs_follow_up,
    parse_cursor,
    payload_from_json,
)
from tidesync.domain.values import Value
from tidesync.migrations import MigrationError, migrate_postgres
from tidesync.shore.reconcile_wire import reconcile_to_wire
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import (
    MalformedPayload,
    NameTable,
    columns_from_wire,
    columns_to_wire,
    record_key_to_wire,
)

log = logging.getLogger(__name__)

_SEQUENCE_LOCK = 0x646F776E6C696E6B  # "downlink"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ATTEMPTS = 5

# Sequences must be assigned in commit order: the events table lock of the recorder is
# taken only after the extra statements run, so the index takes its own lock first.
_LOCK_SEQUENCES: Statement = ("SELECT pg_advisory_xact_lock(%s)", (_SEQUENCE_LOCK,))
_INSERT_COMMAND = (
    "INSERT INTO downlink_command (node_id, sequence, command_id, kind, source_id, conflict_id,"
    " payload, trace_id, issued_at)"
    " SELECT %s, COALESCE(MAX(sequence), 0) + 1, %s, %s, %s, %s, %s::jsonb, %s, %s"
    " FROM downlink_command WHERE node_id = %s"
    " ON CONFLICT (command_id) DO NOTHING"
)
# acked_at and followed_up_at are database time, used only to order and mark follow-ups;
# nothing compares them with the injected clock.
_RECORD_ACK = (
    "UPDATE downlink_command SET ack_result = %s, ack_reason_code = %s,"
    " ack_local_revision = %s, ack_row_exists = %s, ack_current_row = %s::jsonb,"
    " processed_at = %s, acked_at = now(), needs_follow_up = %s"
    " WHERE command_id = %s AND ack_result IS NULL"
)
_PAGE = (
    "SELECT command_id, sequence, kind, payload, issued_at FROM downlink_command"
    " WHERE node_id = %s AND sequence > %s ORDER BY sequence LIMIT %s"
)
_FOLLOW_UPS = (
    "SELECT command_id, node_id, kind, sequence, source_id, conflict_id, payload, ack_result,"
    " ack_reason_code, ack_local_revision, ack_row_exists, ack_current_row"
    " FROM downlink_command WHERE needs_follow_up AND followed_up_at IS NULL"
    " AND NOT (command_id = ANY(%s::uuid[]))"
    " ORDER BY acked_at, node_id, sequence LIMIT %s"
)


@dataclass(frozen=True)
class IssuedCommand:
    command_id: uuid.UUID
    node_id: str
    sequence: int
    position: int
    """The notification id of the command's Issued event (what a reader can wait on)."""


@dataclass(frozen=True)
class AckedCommand:
    command_id: uuid.UUID
    node_id: str
    kind: CommandKind
    sequence: int
    source_id: uuid.UUID
    conflict_id: uuid.UUID | None
    payload: Payload
    result: str
    reason_code: str
    local_revision: Revision | None
    row_exists: bool
    current_row: dict[str, Value] | None


@dataclass(frozen=True)
class CommandRow:
    """A command as the index holds it (status and tests)."""

    command_id: uuid.UUID
    node_id: str
    sequence: int
    kind: CommandKind
    source_id: uuid.UUID
    payload: Payload
    ack_result: str | None


@dataclass(frozen=True)
class _Ack:
    """One decoded CommandAck."""

    command_id: uuid.UUID
    sequence: int
    result: CommandResult
    reason_code: str
    detail: str
    local_revision: Revision | None
    row_exists: bool
    current_row: dict[str, Value] | None
    processed_at: dt.datetime | None


@contextmanager
def store_errors() -> Iterator[None]:
    """The one place where driver failures of the downlink become DownlinkUnavailable."""
    try:
        yield
    except (OperationalError, InterfaceError, psycopg.OperationalError,
            psycopg.InterfaceError) as error:
        raise DownlinkUnavailable(type(error).__name__) from error


class DownlinkService:
    """Issues commands, pages them to ships and records their acks (PostgreSQL event store)."""

    def __init__(self, app: DownlinkApplication, max_page_size: int = 500) -> None:
        recorder = app.recorder
        if not isinstance(recorder, PostgresApplicationRecorder):
            raise TypeError("the downlink needs the PostgreSQL event store")
        self.app = app
        self.datastore = recorder.datastore
        self.events_table = recorder.events_table_name
        self.max_page_size = max_page_size

    def close(self) -> None:
        self.app.close()

    # -------------------------------------------------------------------- issue

    def issue(self, commands: Sequence[NewCommand],
              extra_statements: Sequence[Statement] = ()) -> list[IssuedCommand]:
        """Record the commands not recorded yet, in one transaction with `extra_statements`;
        returns every command as recorded (a repeated command is never duplicated)."""
        for command in commands:
            if kind_of(command.payload) is not command.kind:
                raise ValueError(f"a {command.kind} command cannot carry that payload")
        unique = list({c.command_id: c for c in commands}.values())
        ids = [c.command_id for c in unique]
        with store_errors():
            for _ in range(_ATTEMPTS):
                known = self._known(ids)
                fresh = [c for c in unique if c.command_id not in known]
                try:
                    self._record(fresh, extra_statements)
                except IntegrityError:
                    continue  # Another issuer recorded some of them first: look again.
                return self._issued(ids)
        raise DownlinkUnavailable("commands kept colliding with concurrent issuers")

    def _record(self, fresh: Sequence[NewCommand], extra: Sequence[Statement]) -> None:
        if not fresh:
            if extra:
                self._execute(extra)
            return
        aggregates = [DownlinkCommand(
            node_id=c.node_id, kind=c.kind.value, source_id=str(c.source_id),
            payload=c.payload.to_json(),
            conflict_id=None if c.conflict_id is None else str(c.conflict_id),
            actor=c.actor, reason=c.reason, trace_id=c.trace_id) for c in fresh]
        statements = [_LOCK_SEQUENCES, *(_insert_statement(c, a)
                                         for c, a in zip(fresh, aggregates, strict=True)),
                      *extra]
        self.app.save(*aggregates, extra_statements=statements)

    def _known(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = self._query("SELECT command_id FROM downlink_command WHERE command_id = ANY(%s)",
                           (list(ids),))
        return {row["command_id"] for row in rows}

    def _issued(self, ids: Sequence[uuid.UUID]) -> list[IssuedCommand]:
        query = sql.SQL(
            "SELECT d.command_id, d.node_id, d.sequence, e.notification_id"
            " FROM downlink_command d JOIN {events} e"
            " ON e.originator_id = d.command_id AND e.originator_version = 1"
            " WHERE d.command_id = ANY(%s)").format(events=sql.Identifier(self.events_table))
        rows = {row["command_id"]: row for row in self._query(query, (list(ids),))}
        return [IssuedCommand(i, rows[i]["node_id"], rows[i]["sequence"],
                              rows[i]["notification_id"]) for i in ids if i in rows]

    # -------------------------------------------------------------------- page

    def page(self, node_id: str, cursor: str, limit: int) -> pb.CommandsPage:
        """The node's commands after `cursor` (decimal text of the last sequence seen),
        ascending, at most `limit` (capped by max_page_size; 0 means the cap)."""
        after = parse_cursor(cursor)
        size = min(limit, self.max_page_size) if limit > 0 else self.max_page_size
        with store_errors():
            rows = self._query(_PAGE, (node_id, after, size + 1))
        page = pb.CommandsPage(has_more=len(rows) > size)
        names = NameTable()
        for row in rows[:size]:
            command = page.commands.add(
                command_id=row["command_id"].bytes, sequence=row["sequence"],
                issued_at_micros=_micros(row["issued_at"]))
            payload = payload_from_json(CommandKind(row["kind"]), row["payload"])
            _payload_to_wire(payload, names, command)
        page.strings.extend(names.names)
        page.next_cursor = str(rows[:size][-1]["sequence"] if rows else after)
        return page

    # -------------------------------------------------------------------- acks

    def acknowledge(self, node_id: str, acks: pb.CommandAcks) -> pb.CommandAcksResponse:
        """Record the node's acks (persisted before this returns). An ack of an unknown
        command or of another node's is rejected; a repeated ack is accepted unchanged."""
        if len(acks.acks) > MAX_ACKS_PER_REQUEST:
            raise TooManyAcks(f"at most {MAX_ACKS_PER_REQUEST} acks per request")
        names = NameTable(acks.strings)
        decoded = [_decode_ack(ack, names) for ack in acks.acks]
        with store_errors():
            for _ in range(_ATTEMPTS):
                try:
                    accepted = self._record_acks(node_id, decoded)
                except IntegrityError:
                    continue  # A concurrent request acked one of them first: look again.
                break
            else:
                raise DownlinkUnavailable("acks kept colliding with concurrent requests")
        response = pb.CommandAcksResponse()
        for ack in decoded:
            target = (response.accepted_command_ids if ack.command_id in accepted
                      else response.rejected_command_ids)
            target.append(ack.command_id.bytes)
        return response

    def _record_acks(self, node_id: str, acks: Sequence[_Ack]) -> set[uuid.UUID]:
        rows = {row["command_id"]: row for row in self._query(
            "SELECT command_id, node_id, sequence, ack_result FROM downlink_command"
            " WHERE command_id = ANY(%s)", ([a.command_id for a in acks],))}
        accepted: set[uuid.UUID] = set()
        changed: dict[uuid.UUID, DownlinkCommand] = {}
        statements: list[Statement] = []
        for ack in acks:
            row = rows.get(ack.command_id)
            if row is None or row["node_id"] != node_id or (
                    ack.sequence and ack.sequence != row["sequence"]):
                continue
            accepted.add(ack.command_id)
            if row["ack_result"] is not None or ack.command_id in changed:
                continue
            command = self.app.get_command(ack.command_id)
            if command.acknowledge(ack.result, ack.reason_code, ack.detail, ack.local_revision,
                                   ack.row_exists, ack.current_row, ack.processed_at,
                                   f"node:{node_id}"):
                changed[ack.command_id] = command
                statements.append(_ack_statement(command, ack))
        if changed:
            self.app.save(*changed.values(), extra_statements=statements)
        return accepted

    # -------------------------------------------------------------------- follow-ups

    def pending_follow_ups(self, limit: int, skip: Sequence[uuid.UUID] = ()
                           ) -> list[AckedCommand]:
        """Acknowledged commands the arbitration must still act on (conflict reports,
        rejections, every decision ack), oldest ack first; `skip`: commands left out (ones
        that could not be followed up just now)."""
        with store_errors():
            rows = self._query(_FOLLOW_UPS, (list(skip), limit))
        return [_acked(row) for row in rows]

    def mark_followed_up(self, command_ids: Sequence[uuid.UUID]) -> None:
        with store_errors():
            self._execute([("UPDATE downlink_command SET followed_up_at = now()"
                            " WHERE command_id = ANY(%s) AND followed_up_at IS NULL",
                            (list(command_ids),))])

    def command(self, command_id: uuid.UUID) -> CommandRow | None:
        """One command as the index holds it (None: no such command)."""
        with store_errors():
            rows = self._query(
                "SELECT command_id, node_id, sequence, kind, source_id, payload, ack_result"
                " FROM downlink_command WHERE command_id = %s", (command_id,))
        return _command_row(rows[0]) if rows else None

    def commands_for(self, node_id: str, after_sequence: int = 0,
                     limit: int = 1000) -> list[CommandRow]:
        """The node's commands in sequence order, with their ack result (status, tests)."""
        with store_errors():
            rows = self._query(
                "SELECT command_id, node_id, sequence, kind, source_id, payload, ack_result"
                " FROM downlink_command WHERE node_id = %s AND sequence > %s"
                " ORDER BY sequence LIMIT %s", (node_id, after_sequence, limit))
        return [_command_row(row) for row in rows]

    # -------------------------------------------------------------------- database

    def _query(self, query: str | sql.Composed, params: Sequence[object]
               ) -> list[DictRow]:
        statement = query.encode() if isinstance(query, str) else query
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()

    def _execute(self, statements: Sequence[Statement]) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for statement, params in statements:
                cursor.execute(statement.encode(), params)


def _insert_statement(command: NewCommand, aggregate: DownlinkCommand) -> Statement:
    return (_INSERT_COMMAND, (
        command.node_id, command.command_id, command.kind.value, command.source_id,
        command.conflict_id, json.dumps(command.payload.to_json(), ensure_ascii=False),
        command.trace_id, aggregate.created_on, command.node_id))


def _ack_statement(command: DownlinkCommand, ack: _Ack) -> Statement:
    recorded = command.ack
    assert recorded is not None
    current = None if recorded.current_row is None else json.dumps(recorded.current_row,
                                                                   ensure_ascii=False)
    return (_RECORD_ACK, (
        ack.result.value, ack.reason_code,
        None if ack.local_revision is None else ack.local_revision.value, ack.row_exists,
        current, ack.processed_at, needs_follow_up(command.kind, ack.result),
        command.id))


def _decode_ack(ack: pb.CommandAck, names: NameTable) -> _Ack:
    """An ack as the shore records it; MalformedPayload for anything unreadable."""
    if len(ack.command_id) != 16:
        raise MalformedPayload("command_id must be 16 bytes")
    if ack.result == pb.COMMAND_RESULT_UNSPECIFIED or ack.result not in pb.CommandResult.values():
        raise MalformedPayload("an ack needs a known result")
    if ack.local_revision and len(ack.local_revision) != 16:
        raise MalformedPayload("local_revision must be 16 bytes")
    current = dict(columns_from_wire(ack.current_row, names)) if ack.current_row else None
    try:
        processed = (_EPOCH + dt.timedelta(microseconds=ack.processed_at_micros)
                     if ack.processed_at_micros else None)
    except OverflowError as error:
        raise MalformedPayload("processed_at out of range") from error
    return _Ack(
        uuid.UUID(bytes=ack.command_id), ack.sequence,
        CommandResult(pb.CommandResult.Name(ack.result)), ack.reason_code[:200],
        ack.detail[:1000], Revision(ack.local_revision) if ack.local_revision else None,
        ack.row_exists or current is not None, current, processed)


def _command_row(row: DictRow) -> CommandRow:
    kind = CommandKind(row["kind"])
    return CommandRow(row["command_id"], row["node_id"], row["sequence"], kind, row["source_id"],
                      payload_from_json(kind, row["payload"]), row["ack_result"])


def _acked(row: DictRow) -> AckedCommand:
    kind = CommandKind(row["kind"])
    current = image_from_json(row["ack_current_row"])
    revision = row["ack_local_revision"]
    return AckedCommand(
        row["command_id"], row["node_id"], kind, row["sequence"], row["source_id"],
        row["conflict_id"], payload_from_json(kind, row["payload"]), row["ack_result"],
        row["ack_reason_code"] or "", None if revision is None else Revision(bytes(revision)),
        bool(row["ack_row_exists"]), None if current is None else dict(current))


# ----------------------------------------------------------------------------- wire


def _payload_to_wire(payload: Payload, names: NameTable, out: pb.DownlinkCommand) -> None:
    if isinstance(payload, ReconcilePayload | SnapshotKeysPayload):
        reconcile_to_wire(payload, names, out)
        return
    if isinstance(payload, ResendPayload):
        out.resend.source_topic_ref = names.ref(payload.topic)
        out.resend.source_partition = payload.partition
        out.resend.replay_epoch = payload.replay_epoch
        out.resend.from_source_sequence = payload.from_sequence
        return
    if isinstance(payload, RowChangePayload):
        change = out.row_change
        record_key_to_wire(payload.record, names, change.record)
        change.operation = _OPERATIONS[payload.operation]
        if payload.values is not None:
            columns_to_wire(payload.values.items(), names, change.values)
        change.expected_local_revision = _bytes(payload.expected_local_revision)
        change.result_revision = _bytes(payload.result_revision)
        change.origin_node_ref = names.ref(payload.origin_node_id)
        change.origin_event_id = payload.origin_event_id.bytes
        if payload.rule_id:
            change.rule_id_ref = names.ref(payload.rule_id)
            change.rule_version = payload.rule_version or 0
        change.by_key = payload.by_key
        return
    decision = out.conflict_decision
    decision.decision_id = payload.decision_id.bytes
    decision.conflict_id = payload.conflict_id.bytes
    decision.rule_id_ref = names.ref(payload.rule_id)
    decision.rule_version = payload.rule_version or 0
    record_key_to_wire(payload.record, names, decision.record)
    decision.expected_local_revision = _bytes(payload.expected_local_revision)
    if payload.decided_value is None:
        decision.tombstone = True
    else:
        columns_to_wire(payload.decided_value.items(), names, decision.decided_value.values)
    decision.decided_revision = payload.decided_revision.value
    decision.reason = payload.reason


_OPERATIONS: dict[Operation, pb.Operation] = {
    Operation.INSERT: pb.INSERT, Operation.UPDATE: pb.UPDATE, Operation.DELETE: pb.DELETE,
    Operation.SNAPSHOT: pb.SNAPSHOT,
}


def _bytes(revision: Revision | None) -> bytes:
    return b"" if revision is None else revision.value


def _micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)


# ----------------------------------------------------------------------------- opening


def open_downlink(env: Mapping[str, str], conninfo: str,
                  max_page_size: int = 500) -> DownlinkService:
    """The service over the PostgreSQL event store `env`, its tables migrated."""
    migrate_postgres(conninfo)
    return DownlinkService(open_application(DownlinkApplication, env), max_page_size)


class LazyDownlink:
    """The service opened on first use, so a server starts while PostgreSQL is down (its
    downlink requests answer 503 until it is back)."""

    def __init__(self, opener: Callable[[], DownlinkService]) -> None:
        self._opener = opener
        self._service: DownlinkService | None = None
        self._lock = threading.Lock()

    def service(self) -> DownlinkService:
        with self._lock:
            if self._service is None:
                try:
                    self._service = self._opener()
                except (PersistenceError, psycopg.Error, MigrationError) as error:
                    raise DownlinkUnavailable(type(error).__name__) from error
            return self._service

    def page(self, node_id: str, cursor: str, limit: int) -> pb.CommandsPage:
        return self.service().page(node_id, cursor, limit)

    def acknowledge(self, node_id: str, acks: pb.CommandAcks) -> pb.CommandAcksResponse:
        return self.service().acknowledge(node_id, acks)

    def close(self) -> None:
        with self._lock:
            if self._service is not None:
                self._service.close()
                self._service = None
