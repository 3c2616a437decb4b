"""Replay by range on the ship, on a real SQLite state store with a fake queue: what a request
must name and what it refuses, the new epoch, and how the client's side reader turns a range
into replayed events (new ids naming their first epoch, sequences of their own, throttled,
nothing outside the range, no queue commit). The end-to-end test with a real broker and shore
is tests/integration/test_replay_range.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from tests.integration.ship_support import ItemsCapture
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, PartitionKey, Polled
from tidesync.domain.errors import TidesyncError
from tidesync.domain.replay import REPLAY_OF_EPOCH, ReplayRange, ReplayRangeError, ledger_ids
from tidesync.entrypoints import cli
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.replay import ReplaySettings, ShipReplays
from tidesync.ship.replay_runs import (
    RANGE_REPLAY_EPOCHS,
    ReplayRefused,
    ReplayRun,
    RunState,
    SQLiteReplayRuns,
)
from tidesync.ship.state import Recorded, SQLiteShipState

NODE = "ship-7"
GROUP = "tidesync-ship-7"


@dataclass
class FakeQueue:
    """The broker's side of one partition: records by offset, the consumer's position."""

    records: list[KafkaRecord]
    position: int = 0
    commits: list[Mapping[PartitionKey, int]] = field(default_factory=list)
    closed: bool = False
    settings: Any = None
    consumer: Any = None
    pattern: Any = None

    def partitions(self) -> list[PartitionKey]:
        return sorted({PartitionKey(r.topic, r.partition) for r in self.records})

    def committed(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        return {key: None for key in keys}

    def assign(self, starts: Mapping[PartitionKey, int | None]) -> None:
        (start,) = starts.values()
        self.position = start or 0

    def poll(self, max_records: int, timeout: float) -> Polled:
        taken = self.records[self.position:self.position + max_records]
        self.position += len(taken)
        return Polled(list(taken))

    def first_offset(self, key: PartitionKey) -> int | None:
        return 0

    def end_offset(self, key: PartitionKey) -> int | None:
        return len(self.records)

    def commit(self, offsets: Mapping[PartitionKey, int]) -> None:
        self.commits.append(offsets)

    def pause(self, keys: Iterable[PartitionKey]) -> None:
        pass

    def resume(self, keys: Iterable[PartitionKey]) -> None:
        pass

    def unassign(self, keys: Iterable[PartitionKey]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@dataclass
class Ticks:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def normalizer(epoch: int) -> DebeziumNormalizer:
    return DebeziumNormalizer(NormalizerSettings(NODE, "debezium-mysql", replay_epoch=epoch))


def kafka_records(count: int) -> list[KafkaRecord]:
    capture = ItemsCapture("fleet")
    out = []
    for offset in range(count):
        record = capture.insert(offset + 1, f"part-{offset}", offset, "1.00")
        out.append(KafkaRecord(record.topic, 0, offset, record.key_bytes(),
                               record.value_bytes(), timestamp_ms=1_000 * offset))
    return out


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteShipState]:
    state = SQLiteShipState(tmp_path / "ship.sqlite", NODE, GROUP)
    try:
        yield state
    finally:
        state.close()


def read_all(state: SQLiteShipState, records: list[KafkaRecord]) -> None:
    """The main consumer reads every record; the shore then answers them all (terminal)."""
    consumer = QueueConsumer(cast(KafkaQueue, FakeQueue(records)), normalizer(0), state, 0)
    consumer.refresh()
    recorded = consumer.poll(len(records), 0)
    assert len(recorded.sendable) == len(records)
    state.database.conn.execute("UPDATE event_state SET state = 'TERMINAL', result = 'APPLIED'")
    with state.database.transaction() as conn:
        state.partition_watermarks.recompute(conn, PartitionKey(records[0].topic, 0))


def test_a_request_names_a_closed_range_a_reason_and_gets_a_new_epoch(
        store: SQLiteShipState) -> None:
    records = kafka_records(6)
    topic = records[0].topic
    runs = SQLiteReplayRuns(store.database)
    with pytest.raises(ReplayRefused, match="not read"):
        runs.request(ReplayRange(topic, 0, 0, 3), actor="ops", reason="why")
    read_all(store, records)
    with pytest.raises(ReplayRefused, match="reason"):
        runs.request(ReplayRange(topic, 0, 0, 3), actor="ops", reason="  ")
    with pytest.raises(ReplayRangeError, match="not closed"):
        runs.request(ReplayRange(topic, 0, 0, 6), actor="ops", reason="why")
    with pytest.raises(ReplayRangeError, match="before"):
        runs.request(ReplayRange(topic, 0, 0, 3), actor="ops", reason="why",
                     since=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
                     until=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(TidesyncError):
        runs.request(ReplayRange(topic, 0, 0, 3), actor="", reason="why")
    first = runs.request(ReplayRange(topic, 0, 1, 3), actor="ops", reason="restored backup")
    second = runs.request(ReplayRange(topic, 0, 0, 5), actor="user:ann", reason="again")
    assert (first.replay_epoch, second.replay_epoch) == (RANGE_REPLAY_EPOCHS,
                                                         RANGE_REPLAY_EPOCHS + 1)
    assert (first.actor, first.reason, first.state) == ("user:ops", "restored backup",
                                                        RunState.QUEUED)
    assert first.original_epoch == 0 and second.actor == "user:ann"
    assert runs.next_open() == first
    assert [run.replay_epoch for run in runs.runs()] == [second.replay_epoch,
                                                         first.replay_epoch]


@pytest.mark.parametrize(("since", "until", "wanted"), [
    (None, None, [1, 2, 3]),
    (2_000, None, [2, 3]),
    (None, 3_000, [1, 2]),
    (2_000, 3_000, [2]),
])
def test_a_time_window_narrows_the_offsets(since: int | None, until: int | None,
                                           wanted: list[int]) -> None:
    run = ReplayRun(RANGE_REPLAY_EPOCHS, 0, "t", 0, 1, 3, since, until, "user:a", "r",
                    RunState.QUEUED)
    assert [offset for offset in range(6) if run.wanted(offset, offset * 1_000)] == wanted
    assert run.wanted(2, None) is (since is None and until is None)


def test_the_side_reader_replays_the_range_throttled_without_committing(
        store: SQLiteShipState) -> None:
    records = kafka_records(10)
    read_all(store, records)
    runs = SQLiteReplayRuns(store.database)
    run = runs.request(ReplayRange(records[0].topic, 0, 2, 7), actor="ops", reason="why")
    queues: list[FakeQueue] = []

    def open_queue(group: str) -> KafkaQueue:
        assert group == f"{GROUP}.replay-{run.replay_epoch}"
        queues.append(FakeQueue(records))
        return cast(KafkaQueue, queues[-1])

    ticks = Ticks()
    replays = ShipReplays(store, open_queue, normalizer, settings=ReplaySettings(
        records_per_second=4), monotonic=ticks)
    assert not replays.caught_up()
    first = Recorded()
    replays.poll(first, set())
    assert [e.source_position for e in first.sendable] == [2, 3, 4, 5]  # 4 records a second
    again = Recorded()
    replays.poll(again, set())
    assert again.sendable == []  # no token left at the same moment
    replays.poll(again, {PartitionKey(records[0].topic, 0)})
    ticks.now += 10
    replays.poll(again, {PartitionKey(records[0].topic, 0)})  # its window is full: waits
    assert again.sendable == []
    replays.poll(again, set())
    assert [e.source_position for e in again.sendable] == [6, 7]  # offsets 8, 9 not taken
    events = first.sendable + again.sendable
    assert [e.source_sequence for e in events] == [1, 2, 3, 4, 5, 6]
    originals = store_events(store, 0)
    for event in events:
        assert event.replay_epoch == run.replay_epoch
        assert event.source_details[REPLAY_OF_EPOCH] == 0
        assert event.event_id not in originals
        assert ledger_ids(event)[1] in originals  # the shore finds the original in its ledger
    assert queues[0].commits == [] and queues[0].closed
    done = runs.run(run.replay_epoch)
    assert done is not None and done.state is RunState.READ and done.read_offset >= 7
    progress = runs.progress(done)
    assert progress.states == {"READY": 6} and not progress.done
    assert replays.caught_up()


def test_a_run_read_to_its_end_with_unsent_events_is_read_again_after_a_restart(
        store: SQLiteShipState) -> None:
    records = kafka_records(5)
    read_all(store, records)
    runs = SQLiteReplayRuns(store.database)
    run = runs.request(ReplayRange(records[0].topic, 0, 0, 4), actor="ops", reason="why")

    def open_queue(group: str) -> KafkaQueue:
        return cast(KafkaQueue, FakeQueue(records))

    first = Recorded()
    ShipReplays(store, open_queue, normalizer, monotonic=Ticks()).poll(first, set())
    assert len(first.sendable) == 5
    # The client stopped before sending them; a new one reads the range again and sends the
    # same events with the same sequences.
    restarted = ShipReplays(store, open_queue, normalizer, monotonic=Ticks())
    assert not restarted.caught_up()
    again = Recorded()
    restarted.poll(again, set())
    assert [(e.event_id, e.source_sequence) for e in again.sendable] == [
        (e.event_id, e.source_sequence) for e in first.sendable]
    assert again.new_events == 0 and again.rereads == 5
    found = runs.run(run.replay_epoch)
    assert found is not None and found.state is RunState.READ


def store_events(state: SQLiteShipState, epoch: int) -> set[uuid.UUID]:
    rows = state.database.conn.execute(
        "SELECT event_id FROM event_state WHERE replay_epoch = ?", (epoch,)).fetchall()
    return {uuid.UUID(bytes=row[0]) for row in rows}


def test_the_command_line_queues_a_replay_and_shows_its_progress(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_path = tmp_path / "ship.sqlite"
    config = tmp_path / "tidesync.toml"
    config.write_text(f'[ship]\nnode_id = "{NODE}"\nstate_path = "{state_path}"\n'
                      f'consumer_group = "{GROUP}"\n')
    records = kafka_records(4)
    topic = records[0].topic
    request = ["--config", str(config), "replay", "--topic", topic, "--partition", "0",
               "--from-offset", "1", "--to-offset", "2"]
    assert cli.main([*request]) == 2  # no reason
    assert "--reason" in capsys.readouterr().err
    assert cli.main([*request, "--reason", "why", "--node", "ship-8"]) == 2
    assert cli.main([*request, "--reason", "why"]) == 1  # nothing read yet
    assert "has not read" in capsys.readouterr().err
    state = SQLiteShipState(state_path, NODE, GROUP)
    try:
        read_all(state, records)
    finally:
        state.close()
    assert cli.main([*request, "--reason", "shore restored", "--actor", "ann"]) == 0
    queued = json.loads(capsys.readouterr().out)
    assert (queued["replay_epoch"], queued["state"], queued["actor"]) == (
        RANGE_REPLAY_EPOCHS, "QUEUED", "user:ann")
    assert cli.main(["--config", str(config), "replay", "--status"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["from_offset"], shown["to_offset"], shown["reason"], shown["done"]) == (
        1, 2, "shore restored", False)
