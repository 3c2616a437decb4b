"""Shore commands applied to the ship's business database (§12): command → event → CAS → ack.

A ShoreRowChange or ConflictDecision becomes a ChangeEvent applied by the same compare-and-set
appliers the shore uses (MySQLTargetApplier / SQLiteTargetApplier with the ship's node id), so
the `_sync_applied` ledger and the revision check make every command idempotent: a command
applied before answers ALREADY_APPLIED however often it is pulled again.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.downlink_command import CommandKind, CommandResult
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.values import Value, canonical_value
from tidesync.target.contract import TargetApplier, TargetOutcome, TargetOutcomeKind
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
    except (codec.WireError, ValueError, OverflowError) as error:
        return PreparedCommand(base.command_id, base.sequence, reject=(
            CommandReason.MALFORMED_COMMAND, f"unreadable command: {type(error).__name__}"))
    return PreparedCommand(base.command_id, base.sequence, reject=(
        CommandReason.UNSUPPORTED_COMMAND, f"command kind {kind or 'none'} is not applied"))


def _revision(raw: bytes) -> Revision | None:
    return Revision(bytes(raw)) if raw else None


def _event(applied_id: uuid.UUID, origin: str, record: RecordKey, operation: Operation,
           values: list[tuple[str, Value]], base: Revision | None, result: Revision | None,
           sequence: int, captured: dt.datetime) -> ChangeEvent:
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
        base_revision=base, result_revision=result)


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
    result = (tombstone_revision(applied_id) if operation is Operation.DELETE
              else _revision(change.result_revision))
    event = _event(applied_id, names.name(change.origin_node_ref), record, operation, values,
                   _revision(change.expected_local_revision), result, base.sequence, captured)
    return PreparedCommand(base.command_id, base.sequence, CommandKind.ROW_CHANGE, applied_id,
                           record, event)


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


class RemoteApplier:
    """Applies prepared commands one at a time (in sequence order, so each sees the last).

    Raises the applier's TransientTargetError / CommitOutcomeUnknown / TargetError: nothing
    is acked then, and the command is applied again later (the ledger makes that safe).
    """

    def __init__(self, target: TargetApplier, node_id: str) -> None:
        self.target = target
        self.node_id = node_id

    def apply(self, command: PreparedCommand, now: dt.datetime) -> CommandAnswer:
        if command.reject is not None:
            return _result(command, CommandResult.COMMAND_REJECTED, now, *command.reject)
        if command.event is None:
            return self._tombstone_without_row(command, now)
        outcome = self.target.apply_chunk([command.event])[0]
        return self._judge(command, command.event, outcome, now)

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
