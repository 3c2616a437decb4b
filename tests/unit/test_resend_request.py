"""Resend requests: one deterministic command per partition, epoch and missing sequence, the
payload's exact trip over the wire, and the ship's answer on a real SQLite state store (the
queue consumer is a fake that records where it is rewound; the end-to-end test on a real broker
is tests/integration/test_gap_resend.py)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ship_state import KEY, TOPIC, event, event_record, skip_record
from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.downlink_command import (
    CommandKind,
    CommandResult,
    ResendPayload,
    kind_of,
    needs_follow_up,
    payload_from_json,
)
from tidesync.ship.consumer import PartitionProgress
from tidesync.ship.remote_apply import prepare
from tidesync.ship.resend import QueueResender, ResendDeferred, ResendReason
from tidesync.ship.state import (
    EventState,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteShipState,
    TerminalResult,
)
from tidesync.shore.downlink import _payload_to_wire
from tidesync.shore.gap_resend import resend_command
from tidesync.shore.work_queue import SourcePartition
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

NOW = dt.datetime.now(dt.UTC)


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=30), st.integers(0, 2**31 - 1), st.integers(0, 2**40),
       st.integers(1, 2**62))
def test_a_resend_request_crosses_the_wire_exactly(topic: str, partition: int, epoch: int,
                                                   sequence: int) -> None:
    command = resend_command(SourcePartition("ship-1", topic, partition, epoch), sequence)
    assert kind_of(command.payload) is CommandKind.RESEND
    assert payload_from_json(CommandKind.RESEND, command.payload.to_json()) == command.payload
    names = codec.NameTable()
    wire = pb.DownlinkCommand(command_id=command.command_id.bytes, sequence=9)
    _payload_to_wire(command.payload, names, wire)
    prepared = prepare(pb.DownlinkCommand.FromString(wire.SerializeToString()),
                       codec.NameTable(names.names), "shore", NOW)
    assert prepared.reject is None and prepared.kind is CommandKind.RESEND
    assert prepared.resend == ResendPayload(topic, partition, epoch, sequence)
    assert prepared.event is None and prepared.applied_id is None


def test_one_command_per_node_partition_epoch_and_missing_sequence() -> None:
    partition = SourcePartition("ship-1", "sync.cdc.a", 0, 0)
    first = resend_command(partition, 4).command_id
    assert first == resend_command(partition, 4).command_id  # the stalled gap, found again
    others = {resend_command(SourcePartition("ship-2", "sync.cdc.a", 0, 0), 4).command_id,
              resend_command(SourcePartition("ship-1", "sync.cdc.b", 0, 0), 4).command_id,
              resend_command(SourcePartition("ship-1", "sync.cdc.a", 1, 0), 4).command_id,
              resend_command(SourcePartition("ship-1", "sync.cdc.a", 0, 1), 4).command_id,
              resend_command(partition, 5).command_id}
    assert len(others | {first}) == 6
    for result in CommandResult:
        assert not needs_follow_up(CommandKind.RESEND, result)


def test_a_malformed_resend_request_is_rejected_not_raised() -> None:
    wire = pb.DownlinkCommand(command_id=uuid.uuid4().bytes, sequence=1)
    wire.resend.source_topic_ref = 3  # no such name
    wire.resend.from_source_sequence = 1
    prepared = prepare(wire, codec.NameTable(["t"]), "shore", NOW)
    assert prepared.reject is not None and prepared.reject[0] == "MALFORMED_COMMAND"
    wire.resend.source_topic_ref = 0
    wire.resend.from_source_sequence = 0
    assert prepare(wire, codec.NameTable(["t"]), "shore", NOW).reject is not None


# ----------------------------------------------------------------------------- on the ship


@dataclass
class FakeQueue:
    first: int | None = 0

    def first_offset(self, key: PartitionKey) -> int | None:
        return self.first


@dataclass
class FakeConsumer:
    queue: FakeQueue = field(default_factory=FakeQueue)
    partitions: dict[PartitionKey, PartitionProgress] = field(
        default_factory=lambda: {KEY: PartitionProgress()})
    rewound: list[tuple[PartitionKey, int]] = field(default_factory=list)

    def rewind(self, key: PartitionKey, offset: int) -> None:
        self.rewound.append((key, offset))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    """Sequences 1..5 at offsets 0, 1, 3, 4, 5 (offset 2 is skipped): 1 terminal, the rest
    received by the shore."""
    state = SQLiteShipState(tmp_path / "ship.sqlite", "ship-7", "group-1")
    items = [event_record(0, 1), event_record(1, 2), skip_record(2), event_record(3, 3),
             event_record(4, 4), event_record(5, 5)]
    state.record(items, 0)
    ids = [event(offset, key).event_id for offset, key in ((0, 1), (1, 2), (3, 3), (4, 4),
                                                          (5, 5))]
    state.apply_answers([ReceiveAnswer(i, ReceiveOutcome.RECEIVED) for i in ids])
    state.apply_receipts([TerminalResult(ids[0], "APPLIED")], "1")
    yield state
    state.close()


def states(store: SQLiteShipState) -> list[tuple[int, str]]:
    rows = store.conn.execute("SELECT source_sequence, state FROM event_state"
                              " ORDER BY source_sequence").fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def test_the_received_events_from_the_missing_sequence_on_are_sent_again(
        store: SQLiteShipState) -> None:
    consumer = FakeConsumer()
    outcome = QueueResender(store, consumer).resend(  # type: ignore[arg-type]
        ResendPayload(TOPIC, 0, 0, 3))
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_APPLIED,
                                                ResendReason.RESEND_QUEUED)
    assert states(store) == [(1, "TERMINAL"), (2, "RECEIVED"), (3, "READY"), (4, "READY"),
                             (5, "READY")]
    assert consumer.rewound == [(KEY, 3)]  # sequence 3's offset
    watermark = store.watermark(KEY)
    assert watermark is not None  # received up to the skipped record before sequence 3
    assert (watermark.terminal_offset, watermark.received_offset) == (0, 2)


def test_nothing_the_shore_finished_is_sent_again(store: SQLiteShipState) -> None:
    consumer = FakeConsumer()
    outcome = QueueResender(store, consumer).resend(  # type: ignore[arg-type]
        ResendPayload(TOPIC, 0, 0, 1))
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_ALREADY_APPLIED,
                                                ResendReason.ALREADY_TERMINAL)
    assert consumer.rewound == [] and states(store)[0] == (1, "TERMINAL")


def test_an_applied_event_pruned_from_the_state_file_is_not_resent(
        store: SQLiteShipState) -> None:
    store.mark_committed({KEY: 1})
    assert store.prune(store.watermarks(), 0, 100) == 1  # sequence 1 leaves the file
    outcome = QueueResender(store, FakeConsumer()).resend(  # type: ignore[arg-type]
        ResendPayload(TOPIC, 0, 0, 1))
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_ALREADY_APPLIED,
                                                ResendReason.ALREADY_TERMINAL)
    assert states(store)[0] == (2, "RECEIVED")


@pytest.mark.parametrize(("request_", "reason"), [
    (ResendPayload(TOPIC, 0, 1, 3), ResendReason.REPLAY_EPOCH_MISMATCH),
    (ResendPayload(TOPIC, 0, 0, 6), ResendReason.SEQUENCE_UNKNOWN),
    (ResendPayload(TOPIC, 1, 0, 3), ResendReason.PARTITION_NOT_READ),
])
def test_a_request_the_ship_cannot_carry_out_is_rejected_with_its_reason(
        store: SQLiteShipState, request_: ResendPayload, reason: ResendReason) -> None:
    consumer = FakeConsumer()
    before = states(store)
    outcome = QueueResender(store, consumer).resend(request_)  # type: ignore[arg-type]
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_REJECTED, reason)
    assert consumer.rewound == [] and states(store) == before


def test_a_blocked_event_is_not_resent(store: SQLiteShipState) -> None:
    store.apply_answers([ReceiveAnswer(event(3, 3).event_id,
                                       ReceiveOutcome.PERMANENT_REJECTED, "MALFORMED_EVENT")])
    outcome = QueueResender(store, FakeConsumer()).resend(  # type: ignore[arg-type]
        ResendPayload(TOPIC, 0, 0, 3))
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_REJECTED,
                                                ResendReason.EVENT_BLOCKED)


def test_events_the_queue_no_longer_holds_are_refused_never_skipped(
        store: SQLiteShipState) -> None:
    consumer = FakeConsumer(FakeQueue(first=5))
    before = states(store)
    outcome = QueueResender(store, consumer).resend(  # type: ignore[arg-type]
        ResendPayload(TOPIC, 0, 0, 3))
    assert (outcome.result, outcome.reason) == (CommandResult.COMMAND_REJECTED,
                                                ResendReason.QUEUE_OFFSET_GONE)
    assert consumer.rewound == [] and states(store) == before
    with pytest.raises(ResendDeferred):  # the broker cannot say: answered later
        QueueResender(store, FakeConsumer(FakeQueue(first=None))).resend(  # type: ignore[arg-type]
            ResendPayload(TOPIC, 0, 0, 3))
    assert states(store) == before and EventState.READY not in {s for _, s in before}
