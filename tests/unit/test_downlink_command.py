"""The DownlinkCommand domain: stable command ids, exact payload round trips, one ack only,
and the shore CDC's pure decisions (platform-write test, command payload of a change)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.cdc.platform_writes import UNREADABLE, platform_event_id
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.downlink_command import (
    BadCursor,
    CommandKind,
    CommandResult,
    DecisionPayload,
    DownlinkCommand,
    RowChangePayload,
    command_id_for,
    needs_follow_up,
    parse_cursor,
    payload_from_json,
)
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.shore.shore_cdc import row_change_payload

UTC = dt.UTC
KEY = RecordKey.of("fleet", "parts", {"id": 7, "site": "B"})
ALL_TYPES: dict[str, Value] = {
    "n": None, "flag": True, "count": -(2**70), "ratio": 0.1, "price": Decimal("10.50"),
    "name": "héllo ✓", "blob": b"\x00\xff", "at": dt.datetime(2024, 2, 29, 1, 2, 3, 4, UTC),
    "day": dt.date(1969, 7, 20), "span": dt.time(13, 14, 15, 16),
    "doc": JsonText('{"k": [1, 2.5]}'), "bits": BitString(10, 513),
}


def revision() -> Revision:
    return Revision(uuid.uuid4().bytes)


def test_command_ids_are_stable_and_distinct() -> None:
    source = uuid.uuid4()
    first = command_id_for("ship-1", CommandKind.ROW_CHANGE, source)
    assert first == command_id_for("ship-1", CommandKind.ROW_CHANGE, source)
    assert len({first, command_id_for("ship-2", CommandKind.ROW_CHANGE, source),
                command_id_for("ship-1", CommandKind.CONFLICT_DECISION, source),
                command_id_for("ship-1", CommandKind.ROW_CHANGE, uuid.uuid4())}) == 4


@given(st.text(min_size=1, max_size=30), st.uuids())
def test_command_ids_depend_only_on_their_inputs(node_id: str, source: uuid.UUID) -> None:
    assert (command_id_for(node_id, CommandKind.ROW_CHANGE, source)
            == command_id_for(node_id, CommandKind.ROW_CHANGE, source))


@pytest.mark.parametrize("operation", [Operation.INSERT, Operation.UPDATE, Operation.DELETE])
def test_row_change_payload_round_trips_exactly(operation: Operation) -> None:
    payload = RowChangePayload(
        KEY, operation, None if operation is Operation.DELETE else ALL_TYPES,
        None if operation is Operation.INSERT else revision(), revision(), "shore-hq",
        uuid.uuid4())
    stored = json.loads(json.dumps(payload.to_json()))
    back = payload_from_json(CommandKind.ROW_CHANGE, stored)
    assert back == payload
    if back.values is not None:
        assert [type(v) for v in back.values.values()] == [type(v) for v in ALL_TYPES.values()]


@pytest.mark.parametrize("decided", [ALL_TYPES, None])
def test_decision_payload_round_trips_exactly(decided: dict[str, Value] | None) -> None:
    decision_id = uuid.uuid4()
    payload = DecisionPayload(
        decision_id, uuid.uuid4(), "table:fleet.parts", None, KEY, None, decided,
        tombstone_revision(decision_id) if decided is None else revision(), "kept shore")
    stored = json.loads(json.dumps(payload.to_json()))
    assert payload_from_json(CommandKind.CONFLICT_DECISION, stored) == payload


def issued_command() -> DownlinkCommand:
    payload = RowChangePayload(KEY, Operation.UPDATE, {"qty": 1}, revision(), revision(),
                               "shore-hq", uuid.uuid4())
    return DownlinkCommand(node_id="ship-1", kind=CommandKind.ROW_CHANGE.value,
                           source_id=str(payload.origin_event_id), payload=payload.to_json(),
                           conflict_id=None, actor="shore-cdc", reason="shore change",
                           trace_id="t-1")


def test_a_command_is_acknowledged_once() -> None:
    command = issued_command()
    assert command.id == command_id_for("ship-1", CommandKind.ROW_CHANGE, command.source_id)
    current = revision()
    assert command.acknowledge(CommandResult.COMMAND_CONFLICT_REPORTED, "REVISION_MISMATCH",
                               "", current, True, {"qty": 5}, None, "ship-1")
    assert not command.acknowledge(CommandResult.COMMAND_APPLIED, "", "", None, False, None,
                                   None, "ship-1")
    assert command.version == 2 and command.ack is not None
    assert command.ack.result is CommandResult.COMMAND_CONFLICT_REPORTED
    assert command.ack.local_revision == current.text
    events = command.collect_events()
    assert [(e.actor, bool(e.reason)) for e in events] == [  # type: ignore[attr-defined]
        ("shore-cdc", True), ("ship-1", True)]
    assert isinstance(command.payload, RowChangePayload)


def test_follow_ups_are_decision_acks_and_unapplied_row_changes() -> None:
    row, decision = CommandKind.ROW_CHANGE, CommandKind.CONFLICT_DECISION
    assert not needs_follow_up(row, CommandResult.COMMAND_APPLIED)
    assert not needs_follow_up(row, CommandResult.COMMAND_ALREADY_APPLIED)
    assert needs_follow_up(row, CommandResult.COMMAND_CONFLICT_REPORTED)
    assert needs_follow_up(row, CommandResult.COMMAND_REJECTED)
    assert all(needs_follow_up(decision, result) for result in CommandResult)


# ----------------------------------------------------------------------------- shore CDC


def change(operation: Operation, before: dict[str, Value] | None,
           after: dict[str, Value] | None) -> ChangeEvent:
    return ChangeEvent(
        event_id=uuid.uuid4(), origin_node_id="shore-hq", source_connector_id="c",
        source_topic="t", source_partition=0, source_position=1,
        record=RecordKey.of("fleet", "parts", {"id": 1}), operation=operation,
        captured_at=dt.datetime(2026, 1, 1, tzinfo=UTC), before=before, after=after,
        base_revision=None, result_revision=revision())


def test_platform_writes_are_recognised_by_event_id_and_tombstone() -> None:
    applied = uuid.uuid4()
    local = {"id": 1, "_sync_event_id": None, "_sync_revision": revision().text}
    remote = {"id": 1, "_sync_event_id": str(applied), "_sync_revision": revision().text}
    marked = {**remote, "_sync_revision": tombstone_revision(applied).text}
    assert platform_event_id(change(Operation.INSERT, None, local)) is None
    assert platform_event_id(change(Operation.UPDATE, local, remote)) == applied
    assert platform_event_id(change(Operation.DELETE, marked, None)) == applied
    # A local delete of a row last written remotely is a local change.
    assert platform_event_id(change(Operation.DELETE, remote, None)) is None
    binary = {**remote, "_sync_event_id": applied.bytes}
    assert platform_event_id(change(Operation.UPDATE, local, binary)) == applied
    forged = {**remote, "_sync_event_id": "not-a-uuid"}
    assert platform_event_id(change(Operation.UPDATE, local, forged)) is UNREADABLE


def test_the_command_payload_carries_business_columns_only() -> None:
    after = {"id": 1, "name": "pump", "qty": 2, "_sync_revision": "r", "_sync_origin": "o",
             "_sync_event_id": None, "_sync_updated_at": None}
    event = change(Operation.UPDATE, {**after, "qty": 1}, after)
    payload = row_change_payload(event, "shore-hq")
    assert dict(payload.values or {}) == {"name": "pump", "qty": 2}
    assert payload.result_revision == event.result_revision
    assert payload.origin_event_id == event.event_id and payload.origin_node_id == "shore-hq"
    deleted = row_change_payload(change(Operation.DELETE, after, None), "shore-hq")
    assert deleted.values is None


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_a_page_cursor_is_the_decimal_last_sequence(sequence: int) -> None:
    assert parse_cursor(str(sequence)) == sequence


@pytest.mark.parametrize("cursor", ["-1", "01", "1.0", "abc", " 1", str(2**63), "1e3"])
def test_cursors_the_server_did_not_issue_are_refused(cursor: str) -> None:
    with pytest.raises(BadCursor):
        parse_cursor(cursor)
    assert parse_cursor("") == 0
