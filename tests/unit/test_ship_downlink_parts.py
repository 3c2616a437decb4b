"""Ship downlink parts without services: the [ship_target] section and its validation, the
platform-write test of §12 on change events, and acks merged under one name table."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from tidesync.config import ConfigError, ShipTargetKind, load_config
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.values import Value
from tidesync.ship.remote_apply import merge_acks
from tidesync.ship.state import platform_write_id
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _event(operation: Operation, before: dict[str, Value] | None,
           after: dict[str, Value] | None) -> ChangeEvent:
    return ChangeEvent(event_id=uuid.uuid4(), origin_node_id="ship-1", source_connector_id="c",
                       source_topic="t", source_partition=0, source_position=1,
                       record=RecordKey.of("db", "items", {"id": 1}), operation=operation,
                       captured_at=AT, before=before, after=after)


def test_ship_target_is_off_by_default_and_validated() -> None:
    config = load_config(env={})
    assert not config.ship_target.enabled
    assert config.ship.shore_node_id == "shore"
    assert config.ship.commands_interval_seconds == 5
    config = load_config(env={"TIDESYNC_SHIP_TARGET__KIND": "sqlite",
                              "TIDESYNC_SHIP_TARGET__SQLITE_PATH": "ship.db",
                              "TIDESYNC_SHIP__COMMANDS_PAGE_SIZE": "50"})
    assert config.ship_target.kind is ShipTargetKind.SQLITE and config.ship_target.enabled
    assert config.ship_target.as_target("ship-1").node_id == "ship-1"
    assert config.ship.commands_page_size == 50
    with pytest.raises(ConfigError) as refused:
        load_config(env={"TIDESYNC_SHIP_TARGET__KIND": "sqlite",
                         "TIDESYNC_SHIP__COMMANDS_PAGE_SIZE": "0",
                         "TIDESYNC_SHIP__SHORE_NODE_ID": ""})
    problems = refused.value.problems
    assert "ship_target.sqlite_path: required when kind = sqlite" in problems
    assert "ship.commands_page_size: must be 1..1000" in problems
    assert "ship.shore_node_id: must not be empty" in problems


def test_platform_writes_are_told_apart_from_local_ones() -> None:
    x = uuid.uuid4()
    row: dict[str, Value] = {"id": 1, "qty": 2, "_sync_revision": str(uuid.uuid4())}
    remote = _event(Operation.INSERT, None, {**row, "_sync_event_id": str(x)})
    local = _event(Operation.UPDATE, {**row, "_sync_event_id": str(x)},
                   {**row, "_sync_event_id": None})
    assert platform_write_id(remote) == x.bytes
    assert platform_write_id(local) is None
    marked = {**row, "_sync_event_id": str(x), "_sync_revision": tombstone_revision(x).text}
    assert platform_write_id(_event(Operation.DELETE, marked, None)) == x.bytes
    # A local DELETE of a row last written remotely keeps the id but not the tombstone.
    assert platform_write_id(_event(Operation.DELETE, {**row, "_sync_event_id": str(x)},
                                    None)) is None
    unreadable = _event(Operation.INSERT, None, {**row, "_sync_event_id": "garbage"})
    assert platform_write_id(unreadable) == b""
    binary = _event(Operation.INSERT, None, {**row, "_sync_event_id": x.bytes})
    assert platform_write_id(binary) == x.bytes
    assert Revision.parse(marked["_sync_revision"]) == tombstone_revision(x)  # type: ignore[arg-type]


def test_stored_acks_merge_under_one_name_table() -> None:
    parts = []
    for names_in_order in (["qty", "name"], ["name", "note"]):
        names = codec.NameTable()
        acks = pb.CommandAcks()
        ack = acks.acks.add(command_id=uuid.uuid4().bytes, result=pb.COMMAND_CONFLICT_REPORTED)
        codec.columns_to_wire([(n, n.upper()) for n in names_in_order], names, ack.current_row)
        acks.strings.extend(names.names)
        parts.append(acks)
    merged = merge_acks("ship-1", parts)
    assert merged.node_id == "ship-1" and len(merged.acks) == 2
    table = codec.NameTable(merged.strings)
    assert [codec.columns_from_wire(a.current_row, table) for a in merged.acks] == [
        [("qty", "QTY"), ("name", "NAME")], [("name", "NAME"), ("note", "NOTE")]]
