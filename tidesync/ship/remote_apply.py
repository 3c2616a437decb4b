"""Shore commands applied to the ship's business database (§12): command → event → CAS → ack.

A ShoreRowChange or ConflictDecision becomes a ChangeEvent applied by the same compare-and-set
appliers the shore uses (MySQLTargetApplier / SQLiteTargetApplier with the ship's node id), so
the `_sync_applied` ledger and the revision check make every command idempotent: a command
applied before answers ALREADY_APPLIED however often it is pulled again. A ResendRequest
touches no business row: it is prepared here and carried out by `tidesync.ship.resend`; nor do
a reconciliation's turn and its repair snapshot (carried out by `tidesync.ship.reconcile`).

A row change of a table that carries no sync metadata — the command says `by_key`, or the
ship's active rule for the table is DOWNLINK-only — goes to the one-way applier instead
(`tidesync.target.one_way`): written by key, never compared, made idempotent by the same
ledger and kept in order per key by `_sync_key_position`. Its position there is the command's
sequence: the shore numbers a node's commands in the order it captured the changes, so a
key's later change always has the higher sequence (`ShipTargets`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.downlink_command import (
    CommandKind,
    CommandResult,
    ReconcilePayload,
    ResendPayload,
    SnapshotKeysPayload,
)
from tidesync.domain.rules.sync_rule import Direction, SyncRule
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.values import Value, canonical_value
from tidesync.target.contract import TargetApplier, TargetOutcome, TargetOutcomeKind
from tidesync.target.reconcile_messages import ReconcileError, unpack
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

SOURCE_CONNECTOR = "shore-commands"
SOURCE_TOPIC = "sync.downlink.commands"
_METADATA = frozenset(name.lower() for name in METADATA_COLUMNS)


class CommandReason(enum.StrEnum):
    """Reason codes of acks that the appliers do not give."""

    REVISION_MISMATCH = "REVISION_MISMATCH"
    DECISION_STALE = "DECISION_STALE"
    MALFORMED_COMMAND = "MALFORMED_COMMAND"
    UNSUPPORTED_COMMAND = "UNSUPPORTED_COMMAND"
    ROW_ABSENT = "ROW_ABSENT"


@dataclass(frozen=True)
class PreparedCommand:
    """One command read off a CommandsPage: the event to apply, or why there is none.

    `applied_id` is the id the written row carries in `_sync_event_id` (the row change's
    origin_event_id or the decision's decision_id) and the key of `applied_command`.
    """

    command_id: bytes
    sequence: int
    kind: CommandKind | None = None
    applied_id: uuid.UUID | None = None
    record: RecordKey | None = None
    event: ChangeEvent | None = None
    reject: tuple[str, str] | None = None
    decided: Mapping[str, Value] | None = None
    decided_revision: Revision | None = None
    resend: ResendPayload | None = None
    """A resend request: nothing is applied, the partition's events are uploaded again."""
    by_key: bool = False
    """The shore says the ship's table carries no sync metadata: apply by key."""
    reconcile: ReconcilePayload | None = None
    """A turn of a reconciliation: answered by `tidesync.ship.reconcile`, nothing applied."""
    snapshot: SnapshotKeysPayload | None = None
    """A reconciliation's repair: a snapshot of the listed keys is queued for the capture."""


def prepare(command: pb.DownlinkCommand, names: codec.NameTable, shore_node_id: str,
            now: dt.datetime) -> PreparedCommand:
    """Read a command; never raises (a malformed one is prepared as REJECTED)."""
    base = PreparedCommand(bytes(command.command_id), int(command.sequence))
    kind = command.WhichOneof("kind")
    try:
        captured = (dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
                    + dt.timedelta(microseconds=command.issued_at_micros)
                    if command.issued_at_micros > 0 else now)
        if kind == "row_change":
            return _row_change(base, command.row_change, names, captured)
        if kind == "conflict_decision":
            return _decision(base, command.conflict_decision, names, shore_node_id, captured)
        if kind == "resend":
            return _resend(base, command.resend, names)
        if kind == "reconcile":
            return _reconcile(base, command.reconcile, names)
        if kind == "snapshot_keys":
            return _snapshot_keys(base, command.snapshot_keys, names)
    except (codec.WireError, ValueError, OverflowError, ReconcileError) as error:
        return PreparedCommand(base.command_id, base.sequence, reject=(
            CommandReason.MALFORMED_COMMAND, f"unreadable command: {type(error).__name__}"))
    return PreparedCommand(base.command_id, base.sequence, reject=(
        CommandReason.UNSUPPORTED_COMMAND, f"command kind {kind or 'none'} is not applied"))


def _resend(base: PreparedCommand, request: pb.ResendRequest,
            names: codec.NameTable) -> PreparedCommand:
    if request.from_source_sequence < 1 or request.from_source_sequence >= 1 << 63:
        raise ValueError("a resend starts at a source sequence >= 1")
    if request.replay_epoch >= 1 << 63:
        raise ValueError("replay epoch out of range")
    payload = ResendPayload(names.name(request.source_topic_ref), request.source_partition,
                            request.replay_epoch, request.from_source_sequence)
    return PreparedCommand(base.command_id, base.sequence, CommandKind.RESEND, resend=payload)


def _reconcile(base: PreparedCommand, request: pb.ReconcileRequest,
               names: codec.NameTable) -> PreparedCommand:
    turn = ReconcilePayload(uuid.UUID(bytes=bytes(request.exchange_id)), request.round,
                            names.name(request.ship_table_ref),
                            unpack(bytes(request.message)).decode())
    return PreparedCommand(base.command_id, base.sequence, CommandKind.RECONCILE,
                           reconcile=turn)


def _snapshot_keys(base: PreparedCommand, request: pb.SnapshotKeysRequest,
                   names: codec.NameTable) -> PreparedCommand:
    keys = json.loads(unpack(bytes(request.keys)))
    if not isinstance(keys, list) or not all(isinstance(key, list) for key in keys):
        raise ValueError("keys are a list of key value lists")
    payload = SnapshotKeysPayload(uuid.UUID(bytes=bytes(request.exchange_id)),
                                  names.name(request.ship_table_ref),
                                  tuple(tuple(key) for key in keys), request.actor[:200],
                                  request.reason[:1000])
    return PreparedCommand(base.command_id, base.sequence, CommandKind.SNAPSHOT_KEYS,
                           snapshot=payload)


def _revision(raw: bytes) -> Revision | None:
    return Revision(bytes(raw)) if raw else None


def _event(applied_id: uuid.UUID, origin: str, record: RecordKey, operation: Operation,
           values: list[tuple[str, Value]], base: Revision | None, result: Revision | None,
           sequence: int, captured: dt.datetime, rule: tuple[str, int] | None = None
           ) -> ChangeEvent:
    key = list(record.primary_key)
    key_names = {name for name, _ in key}
    after = None if operation is Operation.DELETE else dict(
        key + [(name, value) for name, value in values if name not in key_names])
    # An UPDATE's before image holds the key only: every value column counts as changed.
    before = None if operation is Operation.INSERT else dict(key)
    return ChangeEvent(
        event_id=applied_id, origin_node_id=origin, source_connector_id=SOURCE_CONNECTOR,
        source_topic=SOURCE_TOPIC, source_partition=0, source_position=sequence,
        record=record, operation=operation, captured_at=captured, before=before, after=after,
        base_revision=base, result_revision=result,
        rule_id=None if rule is None else rule[0], rule_version=None if rule is None else rule[1])


_OPERATIONS = {pb.INSERT: Operation.INSERT, pb.UPDATE: Operation.UPDATE,
               pb.DELETE: Operation.DELETE}


def _row_change(base: PreparedCommand, change: pb.ShoreRowChange, names: codec.NameTable,
                captured: dt.datetime) -> PreparedCommand:
    applied_id = uuid.UUID(bytes=bytes(change.origin_event_id))
    record = codec.record_key_from_wire(change.record, names)
    operation = _OPERATIONS.get(change.operation)
    if operation is None:
        return PreparedCommand(base.command_id, base.sequence, CommandKind.ROW_CHANGE,
                               applied_id, record, reject=(CommandReason.MALFORMED_COMMAND,
                                                           "unknown operation"))
    values = codec.columns_from_wire(change.values, names)
    rule = None
    if change.HasField("rule_id_ref"):
        if not 0 <= change.rule_version < 1 << 63:
            raise ValueError("rule version out of range")
        rule = (names.name(change.rule_id_ref), change.rule_version)
    expected = None if change.by_key else _revision(change.expected_local_revision)
    if change.by_key:
        result = None  # nothing on the ship's row to compare or stamp
    elif operation is Operation.DELETE:
        result = tombstone_revision(applied_id)
    else:
        result = _revision(change.result_revision)
    event = _event(applied_id, names.name(change.origin_node_ref), record, operation, values,
                   expected, result, base.sequence, captured, rule)
    return PreparedCommand(base.command_id, base.sequence, CommandKind.ROW_CHANGE, applied_id,
                           record, event, by_key=change.by_key)


def _decision(base: PreparedCommand, decision: pb.ConflictDecision, names: codec.NameTable,
              shore_node_id: str, captured: dt.datetime) -> PreparedCommand:
    applied_id = uuid.UUID(bytes=bytes(decision.decision_id))
    record = codec.record_key_from_wire(decision.record, names)
    expected = _revision(decision.expected_local_revision)
    tombstone = decision.WhichOneof("decided") == "tombstone" and decision.tombstone
    decided_revision = (tombstone_revision(applied_id) if tombstone
                        else _revision(decision.decided_revision))
    if tombstone:
        if expected is None:  # the ship must have no row, and a tombstone wants none
            return PreparedCommand(base.command_id, base.sequence,
                                   CommandKind.CONFLICT_DECISION, applied_id, record,
                                   decided_revision=decided_revision)
        operation, values = Operation.DELETE, []
    else:
        values = codec.columns_from_wire(decision.decided_value.values, names)
        operation = Operation.INSERT if expected is None else Operation.UPDATE
    event = _event(applied_id, shore_node_id, record, operation, values, expected,
                   decided_revision, base.sequence, captured)
    return PreparedCommand(base.command_id, base.sequence, CommandKind.CONFLICT_DECISION,
                           applied_id, record, event, decided=None if tombstone else dict(values),
                           decided_revision=decided_revision)


@dataclass(frozen=True)
class CommandAnswer:
    """A command's result and its ack (as a one-ack CommandAcks, its name table included)."""

    result: CommandResult
    reason: str
    local_revision: bytes
    acks: pb.CommandAcks

    @property
    def ack(self) -> pb.CommandAck:
        return self.acks.acks[0]


class DownlinkOnlyTables:
    """The ship's tables whose active rule is DOWNLINK-only, from the rules in force now
    (`ShipRules.current`): their rows carry no sync metadata."""

    def __init__(self, active_rules: Callable[[], Iterable[SyncRule]]) -> None:
        self._active_rules = active_rules

    def __call__(self, database: str, table: str) -> bool:
        return any(rule.source == (database, table) and rule.direction is Direction.DOWNLINK
                   for rule in self._active_rules())


class ShipTargets:
    """The ship's business database as the downlink writes it: the compare-and-set applier,
    and the by-key applier for tables without sync metadata. A TargetApplier itself (the
    compare-and-set one's), so whoever is handed it sees one database."""

    def __init__(self, cas: TargetApplier, by_key: TargetApplier,
                 downlink_only: Callable[[str, str], bool] = lambda database, table: False
                 ) -> None:
        self.cas, self.by_key, self.downlink_only = cas, by_key, downlink_only

    def applier_for(self, command: PreparedCommand) -> TargetApplier:
        record = command.record
        if command.kind is CommandKind.ROW_CHANGE and record is not None and (
                command.by_key or self.downlink_only(record.database, record.table)):
            return self.by_key
        return self.cas

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        return self.cas.apply_chunk(events)

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        return self.cas.applied_event_ids(event_ids)

    def current_row(self, database: str, table: str, primary_key: Mapping[str, Value]
                    ) -> tuple[Mapping[str, Value] | None, Revision | None]:
        return self.cas.current_row(database, table, primary_key)

    def close(self) -> None:
        try:
            self.cas.close()
        finally:
            self.by_key.close()


class RemoteApplier:
    """Applies prepared commands one at a time (in sequence order, so each sees the last).

    Raises the applier's TransientTargetError / CommitOutcomeUnknown / TargetError: nothing
    is acked then, and the command is applied again later (the ledger makes that safe).
    `target` may be `ShipTargets`: row changes of tables without metadata then go by key.
    """

    def __init__(self, target: TargetApplier, node_id: str) -> None:
        self.target = target
        self.node_id = node_id

    def apply(self, command: PreparedCommand, now: dt.datetime) -> CommandAnswer:
        if command.reject is not None:
            return _result(command, CommandResult.COMMAND_REJECTED, now, *command.reject)
        if command.event is None:
            return self._tombstone_without_row(command, now)
        event, target = command.event, self.target
        if isinstance(self.target, ShipTargets):
            target = self.target.applier_for(command)
            if target is self.target.by_key and event.result_revision is not None:
                # By key nothing is compared or stamped: no revision to report either.
                event = dataclasses.replace(event, base_revision=None, result_revision=None)
        outcome = target.apply_chunk([event])[0]
        return self._judge(command, event, outcome, now)

    def _tombstone_without_row(self, command: PreparedCommand, now: dt.datetime
                               ) -> CommandAnswer:
        """A tombstone decision for a row the ship should not have: absent is the decision."""
        assert command.record is not None
        row, revision = self.target.current_row(command.record.database, command.record.table,
                                                command.record.as_dict())
        if row is None:
            return _result(command, CommandResult.COMMAND_ALREADY_APPLIED, now,
                           CommandReason.ROW_ABSENT, "the row does not exist, as decided")
        return _conflict(command, CommandReason.DECISION_STALE, "the ship has the row",
                         row, revision, now)

    def _judge(self, command: PreparedCommand, event: ChangeEvent, outcome: TargetOutcome,
               now: dt.datetime) -> CommandAnswer:
        resulting = (event.result_revision.value
                     if event.result_revision is not None else b"")
        if outcome.kind is TargetOutcomeKind.APPLIED:
            return _result(command, CommandResult.COMMAND_APPLIED, now, local_revision=resulting,
                           row_exists=event.operation is not Operation.DELETE)
        if outcome.kind is TargetOutcomeKind.ALREADY_APPLIED:
            return _result(command, CommandResult.COMMAND_ALREADY_APPLIED, now, outcome.reason_code,
                           local_revision=resulting,
                           row_exists=event.operation is not Operation.DELETE)
        if outcome.kind is TargetOutcomeKind.REJECTED:
            return _result(command, CommandResult.COMMAND_REJECTED, now, outcome.reason_code,
                           outcome.detail)
        if command.kind is CommandKind.CONFLICT_DECISION:
            if _holds_decision(command, outcome):
                return _result(command, CommandResult.COMMAND_ALREADY_APPLIED, now, "SAME_REVISION",
                               local_revision=resulting, row_exists=True)
            return _conflict(command, CommandReason.DECISION_STALE, outcome.reason_code,
                             outcome.current_row, outcome.current_revision, now)
        return _conflict(command, CommandReason.REVISION_MISMATCH, outcome.reason_code,
                         outcome.current_row, outcome.current_revision, now)


def _holds_decision(command: PreparedCommand, outcome: TargetOutcome) -> bool:
    """The row already has the decided revision and the decided values."""
    row = outcome.current_row
    if (row is None or command.decided is None or command.decided_revision is None
            or outcome.current_revision != command.decided_revision):
        return False
    by_lower = {name.lower(): value for name, value in row.items()}
    return all(name.lower() in by_lower
               and canonical_value(by_lower[name.lower()]) == canonical_value(value)
               for name, value in command.decided.items())


def _micros(moment: dt.datetime) -> int:
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def command_answer(command: PreparedCommand, result: CommandResult, now: dt.datetime,
                   reason: str = "", detail: str = "") -> CommandAnswer:
    """The answer to a command that wrote no row (a resend request's)."""
    return _result(command, result, now, reason, detail)


def _result(command: PreparedCommand, result: CommandResult, now: dt.datetime, reason: str = "",
            detail: str = "", *, local_revision: bytes = b"",
            row_exists: bool = False) -> CommandAnswer:
    acks = pb.CommandAcks(protocol_version=codec.PROTOCOL_VERSION)
    # The wire carries sync.proto's CommandResult number; the domain's names are the same.
    acks.acks.add(command_id=command.command_id, sequence=command.sequence,
                  result=pb.CommandResult.Value(result.value),
                  reason_code=str(reason), detail=detail[:500], local_revision=local_revision,
                  row_exists=row_exists, processed_at_micros=_micros(now))
    return CommandAnswer(result, str(reason), local_revision, acks)


def _conflict(command: PreparedCommand, reason: str, detail: str,
              row: Mapping[str, Value] | None, revision: Revision | None,
              now: dt.datetime) -> CommandAnswer:
    """CONFLICT_REPORTED with the ship's row as evidence: its non-key business columns."""
    result = _result(command, CommandResult.COMMAND_CONFLICT_REPORTED, now, reason,
                     f"the ship's row does not match the expected revision ({detail})",
                     local_revision=revision.value if revision is not None else b"",
                     row_exists=row is not None)
    if row is not None:
        key = ({name.lower() for name, _ in command.record.primary_key}
               if command.record is not None else set())
        names = codec.NameTable()
        codec.columns_to_wire(
            [(name, value) for name, value in row.items()
             if name.lower() not in key and name.lower() not in _METADATA],
            names, result.ack.current_row)
        result.acks.strings.extend(names.names)
    return result


def merge_acks(node_id: str, parts: list[pb.CommandAcks]) -> pb.CommandAcks:
    """One CommandAcks of several stored one-ack messages, their name refs re-interned."""
    names = codec.NameTable()
    out = pb.CommandAcks(protocol_version=codec.PROTOCOL_VERSION, node_id=node_id)
    for part in parts:
        for ack in part.acks:
            added = out.acks.add()
            added.CopyFrom(ack)
            for column in added.current_row:
                column.name_ref = names.ref(part.strings[column.name_ref])
    out.strings.extend(names.names)
    return out
