"""Helpers (no tests) for the ship downlink tests: shore commands as the contract puts them on
the wire, and an in-test shore that serves a CommandsPage and records CommandAcks."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidesync.domain.change_event import RecordKey, Revision, tombstone_revision
from tidesync.domain.values import Value
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.transport import LinkDown, ShoreRefused
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

SHORE = "shore"


def new_revision() -> Revision:
    return Revision(uuid.uuid4().bytes)


@dataclass
class CommandLog:
    """The shore's commands for one node, numbered from 1 as the shore would."""

    commands: list[pb.DownlinkCommand] = field(default_factory=list)
    names: codec.NameTable = field(default_factory=codec.NameTable)

    def _add(self, fill: str, message: object) -> pb.DownlinkCommand:
        command = pb.DownlinkCommand(command_id=uuid.uuid4().bytes,
                                     sequence=len(self.commands) + 1,
                                     issued_at_micros=1_700_000_000_000_000)
        getattr(command, fill).CopyFrom(message)
        self.commands.append(command)
        return command

    def row_change(self, database: str, table: str, key: Mapping[str, Value],
                   operation: int, values: Mapping[str, Value] | None = None, *,
                   expected: Revision | None = None, result: Revision | None = None,
                   event_id: uuid.UUID | None = None) -> tuple[pb.DownlinkCommand, uuid.UUID]:
        names = self.names
        event_id = event_id or uuid.uuid4()
        change = pb.ShoreRowChange(operation=operation,  # type: ignore[arg-type]
                                   origin_node_ref=names.ref(SHORE),
                                   origin_event_id=event_id.bytes)
        codec.record_key_to_wire(RecordKey.of(database, table, key), names, change.record)
        codec.columns_to_wire((values or {}).items(), names, change.values)
        if expected is not None:
            change.expected_local_revision = expected.value
        if operation == pb.DELETE:
            result = tombstone_revision(event_id)
        change.result_revision = (result or new_revision()).value
        return self._add("row_change", change), event_id

    def decision(self, database: str, table: str, key: Mapping[str, Value],
                 values: Mapping[str, Value] | None, *, expected: Revision | None,
                 decided: Revision | None = None, decision_id: uuid.UUID | None = None
                 ) -> tuple[pb.DownlinkCommand, uuid.UUID, Revision]:
        names = self.names
        decision_id = decision_id or uuid.uuid4()
        message = pb.ConflictDecision(decision_id=decision_id.bytes,
                                      conflict_id=uuid.uuid4().bytes,
                                      rule_id_ref=names.ref("rule:items"), rule_version=1,
                                      reason="test decision")
        codec.record_key_to_wire(RecordKey.of(database, table, key), names, message.record)
        if expected is not None:
            message.expected_local_revision = expected.value
        if values is None:
            message.tombstone = True
            decided = tombstone_revision(decision_id)
        else:
            codec.columns_to_wire(values.items(), names, message.decided_value.values)
            decided = decided or new_revision()
        message.decided_revision = decided.value
        return self._add("conflict_decision", message), decision_id, decided


def page_of(log: CommandLog, entries: Sequence[pb.DownlinkCommand], next_cursor: str,
            has_more: bool) -> pb.CommandsPage:
    """One CommandsPage; its name table is the log's (a superset of the page's refs)."""
    page = pb.CommandsPage(next_cursor=next_cursor, has_more=has_more)
    page.commands.extend(entries)
    page.strings.extend(log.names.names)
    return page


@dataclass
class FakeShore:
    """Serves the commands after the cursor (cursor = last sequence) and records every ack;
    `down` makes every request fail as a lost link would."""

    log: CommandLog
    page_size_cap: int = 100
    down: bool = False
    refuse: ShoreRefused | None = None
    accept: bool = True
    acks: list[pb.CommandAck] = field(default_factory=list)
    ack_strings: list[list[str]] = field(default_factory=list)
    cursors_asked: list[str] = field(default_factory=list)

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        if self.down:
            raise LinkDown("NETWORK_ERROR", "down")
        if self.refuse is not None:
            raise self.refuse
        self.cursors_asked.append(cursor)
        after = int(cursor) if cursor else 0
        wanted = [c for c in self.log.commands if c.sequence > after]
        taken = wanted[:min(limit, self.page_size_cap)]
        last = taken[-1].sequence if taken else after
        return page_of(self.log, taken, str(last) if last else cursor,
                       len(wanted) > len(taken))

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        if self.down:
            raise LinkDown("NETWORK_ERROR", "down")
        self.acks.extend(message.acks)
        self.ack_strings.extend([list(message.strings)] * len(message.acks))
        if not self.accept:
            return pb.CommandAcksResponse()
        return pb.CommandAcksResponse(accepted_command_ids=[a.command_id for a in message.acks])

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        raise LinkDown("NETWORK_ERROR", "no uplink in this test")

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        return pb.ReceiptsPage(next_cursor=cursor)

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()

    def ack_of(self, command: pb.DownlinkCommand) -> list[pb.CommandAck]:
        return [a for a in self.acks if a.command_id == command.command_id]
