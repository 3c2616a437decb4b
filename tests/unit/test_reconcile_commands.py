"""Reconciliation commands between the shore's index and the ship: a RECONCILE turn and a
SNAPSHOT_KEYS repair survive their stored JSON and the wire unchanged; an unreadable one is
prepared as REJECTED, never applied."""

from __future__ import annotations

import datetime as dt
import uuid

from tidesync.domain.downlink_command import (
    CommandKind,
    CommandResult,
    ReconcilePayload,
    SnapshotKeysPayload,
    kind_of,
    needs_follow_up,
    payload_from_json,
)
from tidesync.ship.remote_apply import CommandReason, PreparedCommand, prepare
from tidesync.shore.reconcile_wire import reconcile_to_wire
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

NOW = dt.datetime.now(dt.UTC)
TURN = ReconcilePayload(uuid.uuid4(), 3, "fleet.stock", '{"format":"tidesync-reconcile/1"}')
REPAIR = SnapshotKeysPayload(uuid.uuid4(), "fleet.stock", ((1, "a"), (2, "b")), "user:ann",
                             "copy the differing rows")


def _on_the_ship(payload: ReconcilePayload | SnapshotKeysPayload) -> PreparedCommand:
    names = codec.NameTable()
    command = pb.DownlinkCommand(command_id=uuid.uuid4().bytes, sequence=5)
    reconcile_to_wire(payload, names, command)
    return prepare(command, codec.NameTable(names.names), "shore", NOW)


def test_payloads_survive_the_index_and_the_wire() -> None:
    for payload in (TURN, REPAIR):
        kind = kind_of(payload)
        assert payload_from_json(kind, payload.to_json()) == payload
        assert not needs_follow_up(kind, CommandResult.COMMAND_REJECTED)
    turn = _on_the_ship(TURN)
    assert turn.kind is CommandKind.RECONCILE and turn.reconcile == TURN
    repair = _on_the_ship(REPAIR)
    assert repair.kind is CommandKind.SNAPSHOT_KEYS
    assert repair.snapshot == REPAIR


def test_each_round_is_its_own_command() -> None:
    later = ReconcilePayload(TURN.exchange_id, 4, TURN.ship_table, TURN.message)
    assert later.source_id != TURN.source_id
    assert ReconcilePayload(TURN.exchange_id, 3, "", "").source_id == TURN.source_id


def test_an_unreadable_turn_is_rejected() -> None:
    command = pb.DownlinkCommand(command_id=uuid.uuid4().bytes, sequence=6)
    command.reconcile.exchange_id = uuid.uuid4().bytes
    command.reconcile.message = b"not zstd"
    prepared = prepare(command, codec.NameTable([""]), "shore", NOW)
    assert prepared.reject is not None
    assert prepared.reject[0] == CommandReason.MALFORMED_COMMAND
