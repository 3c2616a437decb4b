"""Setting up a real ship and shore: `target enable` on a ship's `[ship_target]`, the shore's own
capture in `[shore_capture]`, topic defaults that keep the two sides apart (and warnings when
a pattern does not), a replay epoch change that resumes, and the topic refresh interval."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_ship_state import KEY, NODE, event_record
from tidesync.bootstrap.capture import (
    downlink_topic_warnings,
    shore_capture_config,
    shore_capture_warnings,
)
from tidesync.bootstrap.ship import client_settings, shore_topic_warnings
from tidesync.capture.settings import CaptureSource, sample_topic
from tidesync.cdc.kafka import PartitionKey, QueueUnavailable
from tidesync.config import ConfigError, ShipConfig, load_config
from tidesync.entrypoints.target_cli import node_target
from tidesync.ship.client_settings import PeriodicTimer
from tidesync.ship.state import SQLiteShipState

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "deploy"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- target enable


def test_on_a_ship_target_commands_use_the_ship_target_and_the_ship_s_node_id(tmp_path):
    config = load_config(write(tmp_path, """
[ship]
node_id = "ship-9"
[ship_target]
kind = "mysql"
host = "ship-db"
port = 3307
user = "ts"
database = "fleet"
[target]
revision_key_file = "/etc/tidesync/revision.key"
"""), env={})
    target = node_target(config)
    assert (target.host, target.port, target.user, target.database) == ("ship-db", 3307, "ts",
                                                                        "fleet")
    assert target.node_id == "ship-9"  # local writes are the ship's, not the shore's
    assert target.revision_key_file == "/etc/tidesync/revision.key"


def test_on_the_shore_target_commands_keep_the_target_and_ship_says_so_explicitly(tmp_path):
    shore = load_config(write(tmp_path, '[target]\nhost = "shore-db"\n'), env={})
    assert node_target(shore).host == "shore-db" and node_target(shore).node_id == "shore"
    both = load_config(write(tmp_path, """
[ship]
node_id = "ship-9"
[ship_target]
kind = "sqlite"
sqlite_path = "ship.db"
[target]
sqlite_path = "shore.db"
"""), env={})
    assert node_target(both).sqlite_path == "shore.db"
    assert (node_target(both, ship=True).sqlite_path, node_target(both, ship=True).node_id) == (
        "ship.db", "ship-9")
    with pytest.raises(SystemExit, match="ship_target"):
        node_target(shore, ship=True)


# ----------------------------------------------------------------------------- topics


def test_the_default_patterns_keep_ship_and_shore_topics_apart():
    config = load_config(env={})
    ship_topic = sample_topic("ship-0042")
    shore_topic = sample_topic(shore_capture_config(config).capture.logical_name)
    assert re.search(config.ship.topic_pattern, ship_topic)
    assert not re.search(config.ship.topic_pattern, shore_topic)
    assert re.search(config.downlink.topic_pattern, shore_topic)
    assert not re.search(config.downlink.topic_pattern, ship_topic)
    assert shore_topic_warnings(config.ship, [ship_topic, shore_topic]) == []
    assert shore_capture_warnings(config) == []


def test_a_ship_pattern_that_reads_the_shore_s_topics_is_warned_of():
    ship = ShipConfig(node_id="ship-1", topic_pattern=r"^sync\.cdc\.")
    warnings = shore_topic_warnings(ship, ["sync.cdc.ship-1.fleet.a", "sync.cdc.shore.fleet.a"])
    assert len(warnings) == 2
    assert "sync.cdc.shore.db.table" in warnings[0]
    assert "1 topics of the shore's capture: sync.cdc.shore.fleet.a" in warnings[1]


def test_a_downlink_pattern_that_reads_a_ship_s_topics_is_warned_of():
    config = load_config(env={"TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS": "b:9092",
                              "TIDESYNC_DOWNLINK__NODES": "ship-1,ship-2"})
    assert downlink_topic_warnings(config) == []
    wide = load_config(env={"TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS": "b:9092",
                            "TIDESYNC_DOWNLINK__NODES": "ship-1,ship-2",
                            "TIDESYNC_DOWNLINK__TOPIC_PATTERN": r"^sync\.cdc\."})
    assert [w.split("(")[1] for w in downlink_topic_warnings(wide)] == [
        "'sync.cdc.ship-1.db.table' …)", "'sync.cdc.ship-2.db.table' …)"]
    moved = load_config(env={"TIDESYNC_SHORE_CAPTURE__LOGICAL_NAME": "office"})
    assert "does not match" in shore_capture_warnings(moved)[0]


# ----------------------------------------------------------------------------- shore capture


def test_the_shore_capture_lives_in_the_shore_configuration():
    config = load_config(EXAMPLES / "shore.toml",
                         env={"TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS": "broker:9092"})
    capture = shore_capture_config(config).capture
    assert capture.source is CaptureSource.MYSQL
    assert capture.logical_name == "shore"
    assert capture.kafka_bootstrap_servers == "broker:9092"  # the downlink's broker
    assert capture.databases == ("fleet",)  # from downlink.bidirectional_tables
    assert capture.position_path != config.capture.position_path
    with pytest.raises(ConfigError) as error:
        load_config(env={"TIDESYNC_SHORE_CAPTURE__MYSQL_PORT": "0"})
    assert error.value.problems == ["shore_capture.mysql_port: must be 1..65535"]


# ----------------------------------------------------------------------------- the ship client


def test_new_topics_are_looked_for_every_few_seconds():
    assert client_settings(ShipConfig(node_id="s")).topic_refresh_interval == 5.0
    config = load_config(env={"TIDESYNC_SHIP__TOPIC_REFRESH_SECONDS": "2"})
    assert client_settings(config.ship).topic_refresh_interval == 2.0
    with pytest.raises(ConfigError):
        load_config(env={"TIDESYNC_SHIP__TOPIC_REFRESH_SECONDS": "0"})


def test_receipts_after_an_upload_wait_for_their_timer_or_one_second():
    timer = PeriodicTimer(5.0)
    timer.done(100.0)
    timer.due_within(101.0, 1.0)
    assert not timer.due(101.5) and timer.due(102.0)
    timer.due_within(101.9, 1.0)  # never later than it already was
    assert timer.due(102.0)


def test_a_raised_replay_epoch_reads_the_partition_again_and_survives_a_restart(tmp_path):
    path = tmp_path / "ship.sqlite"
    store = SQLiteShipState(path, NODE, "group-1")
    store.record([event_record(5, 1), event_record(6, 2)], 0)
    store.mark_committed({KEY: 7})
    with pytest.raises(QueueUnavailable):
        store.start_partition(KEY, 1, lambda key: None)  # the broker cannot say: try again
    assert store.watermark(KEY) is not None and store.watermark(KEY).replay_epoch == 0
    starts: list[PartitionKey] = []

    def first_offset(key: PartitionKey) -> int:
        starts.append(key)
        return 5

    resumed = store.start_partition(KEY, 1, first_offset)
    assert resumed is not None and (resumed.replay_epoch, resumed.commit_offset) == (1, 5)
    store.close()
    # A restart before any record of the new epoch resumes the new epoch, not a missing state.
    store = SQLiteShipState(path, NODE, "group-1")
    again = store.start_partition(KEY, 1, first_offset)
    assert again is not None and (again.replay_epoch, again.commit_offset) == (1, 5)
    assert starts == [KEY]
    recorded = store.record([event_record(5, 1, epoch=1)], 1)
    assert [e.source_sequence for e in recorded.sendable] == [1]
    store.close()
