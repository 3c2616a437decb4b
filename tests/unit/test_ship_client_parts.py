"""Ship client parts that need no service: configuration, the `ship run|status` commands,
health and heartbeat assembly, and the benchmark's record templates."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from benchmarks.ship import _Templates
from tests.clocks import rounded_now
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.kafka import PartitionKey
from tidesync.cdc.outcomes import Normalized, Skip
from tidesync.config import ConfigError, ShipConfig, load_config
from tidesync.entrypoints.cli import build_parser, main
from tidesync.ship.state import PartitionBacklog, SQLiteShipState, Watermark
from tidesync.ship.telemetry import (
    HealthBoard,
    HealthState,
    Subsystem,
    build_heartbeat,
    partition_backlog,
)
from tidesync.wire import sync_pb2 as pb

NOW = rounded_now()


def test_ship_settings_are_validated_and_read_from_the_environment() -> None:
    config = load_config(env={"TIDESYNC_SHIP__NODE_ID": "ship-7",
                              "TIDESYNC_SHIP__REPLAY_EPOCH": "2",
                              "TIDESYNC_SHIP__BIDIRECTIONAL_TABLES": "fleet.items, fleet.parts"})
    assert (config.ship.replay_epoch, config.ship.group_id) == (2, "tidesync-ship-ship-7")
    with pytest.raises(ConfigError) as error:
        load_config(env={"TIDESYNC_SHIP__TOPIC_PATTERN": "(",
                         "TIDESYNC_SHIP__BIDIRECTIONAL_TABLES": "items",
                         "TIDESYNC_SHIP__SEND_WINDOW_EVENTS": "0"})
    assert len(error.value.problems) == 3
    assert ShipConfig(consumer_group="g").group_id == "g"


def test_the_ship_group_has_run_and_status() -> None:
    args = build_parser().parse_args(["ship", "run", "--until-idle", "--timeout", "5"])
    assert (args.until_idle, args.timeout) == (True, 5.0)
    assert build_parser().parse_args(["ship", "status"]).handler is not None


def test_status_prints_watermarks_without_business_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "ship.sqlite"
    monkeypatch.setenv("TIDESYNC_SHIP__STATE_PATH", str(path))
    monkeypatch.setenv("TIDESYNC_SHIP__NODE_ID", "ship-7")
    assert main(["ship", "status"]) == 1  # nothing yet
    SQLiteShipState(path, "ship-7", "tidesync-ship-ship-7").close()
    capsys.readouterr()
    assert main(["ship", "status"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["node_id"] == "ship-7" and report["partitions"] == []


def test_health_keeps_its_since_until_it_changes_and_the_worst_wins() -> None:
    board = HealthBoard()
    assert board.set(Subsystem.QUEUE, HealthState.HEALTHY, NOW)
    later = NOW + dt.timedelta(minutes=1)
    assert not board.set(Subsystem.QUEUE, HealthState.HEALTHY, later, detail="still")
    entry = board.get(Subsystem.QUEUE)
    assert entry is not None and entry.since == NOW
    board.set(Subsystem.TRANSPORT, HealthState.OFFLINE, later, "NETWORK_ERROR")
    assert board.overall() is HealthState.OFFLINE
    board.set(Subsystem.DISK, HealthState.BLOCKED, later, "DISK_FULL")
    assert board.overall() is HealthState.BLOCKED


def test_the_heartbeat_carries_health_backlog_and_throughput() -> None:
    board = HealthBoard()
    board.set(Subsystem.TRANSPORT, HealthState.DEGRADED, NOW, "RATE_LIMITED", "429")
    watermark = Watermark("sync.cdc.fleet.items", 0, 0, -1, 99, 79, 49, 50, None, 81)
    open_events = PartitionBacklog(PartitionKey("sync.cdc.fleet.items", 0), 50, 5000,
                                   1_000_000, "table:fleet.items")
    backlog = partition_backlog(watermark, open_events, end_offset=150, average_bytes=100.0)
    assert (backlog.end_offset, backlog.terminal_offset, backlog.received_offset) == (150, 49, 79)
    assert backlog.bytes == 5000 + 50 * 100
    message = build_heartbeat("ship-7", NOW, board.entries.values(), [backlog],
                              [pb.ThroughputSample(direction=pb.UPLINK, window_seconds=60)])
    assert message.node_id == "ship-7" and message.protocol_version == "1.0"
    assert [(h.subsystem, h.state, h.reason_code) for h in message.health] == [
        (pb.TRANSPORT, pb.DEGRADED, "RATE_LIMITED")]
    assert message.backlog[0].rule_id == "table:fleet.items"
    fresh = partition_backlog(Watermark("t", 1, 0, -1, -1, -1, -1, None, None, 1),
                              PartitionBacklog(PartitionKey("t", 1), 0, 0, None, None), None,
                              0.0)
    assert not fresh.HasField("terminal_offset") and fresh.end_offset == 0


def test_benchmark_records_are_distinct_debezium_changes() -> None:
    templates = _Templates("sync.cdc.bench")
    normalizer = DebeziumNormalizer(NormalizerSettings(
        "bench", "dbz", bidirectional_tables=frozenset({("bench", "orders")})))
    outcomes = [normalizer.normalize(KafkaRecord(templates.topic, 0, offset, key, value))
                for offset, (key, value) in enumerate(templates.records(200))]
    events = [o.event for o in outcomes if isinstance(o, Normalized)]
    assert len(events) + sum(isinstance(o, Skip) for o in outcomes) == 200
    assert len({e.event_id for e in events}) == len(events) > 150
    assert len({e.source_details["binlog_position"] for e in events}) == len(events)
