"""Configuration: defaults, TOML file, TIDESYNC_* overrides, and errors that name every fault."""

from __future__ import annotations

import json

import pytest

from tidesync.cdc.kafka import QueueSettings
from tidesync.config import ConfigError, EventStoreKind, load_config


def test_defaults_are_the_embedded_setup():
    config = load_config(None, env={})
    assert config.event_store.kind is EventStoreKind.EMBEDDED
    assert config.event_store.embedded_dir == "tidesync-data/postgres"
    assert config.shore.listen_host == "127.0.0.1"
    assert config.ship.batch_max_events == 10_000
    assert config.ship.batch_max_bytes == 4 * 1024 * 1024


def test_file_then_environment_override(tmp_path):
    path = tmp_path / "tidesync.toml"
    path.write_text(
        '[shore]\nlisten_port = 9000\n[event_store]\nkind = "postgres"\n'
        'postgres_password = "s3cret"\n'
    )
    config = load_config(path, env={"TIDESYNC_SHORE__LISTEN_PORT": "9100"})
    assert config.shore.listen_port == 9100
    assert config.event_store.kind is EventStoreKind.POSTGRES
    shown = config.redacted()
    assert shown["event_store"]["postgres_password"] == "***"
    assert "s3cret" not in repr(shown)


def test_config_file_can_come_from_the_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[ship]\nnode_id = \"ship-7\"\n")
    assert load_config(None, env={"TIDESYNC_CONFIG": str(path)}).ship.node_id == "ship-7"


def test_every_problem_is_reported_with_its_origin(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[shore]\nlisten_port = \"eighty\"\n[nonsense]\nx = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={
            "TIDESYNC_EVENT_STORE__KIND": "oracle",
            "TIDESYNC_SHIP__BATCH_MAX_EVENTS": "0",
            "TIDESYNC_SHIP__UNKNOWN": "1",
        })
    text = "\n".join(caught.value.problems)
    assert f"shore.listen_port: expected an integer, got 'eighty' (from {path})" in text
    assert "unknown section 'nonsense'" in text
    assert "event_store.kind: expected one of ['embedded', 'postgres']" in text
    assert "TIDESYNC_EVENT_STORE__KIND" in text
    assert "ship.unknown: unknown setting (from TIDESYNC_SHIP__UNKNOWN)" in text
    # Range checks run even when other fields are broken.
    assert "ship.batch_max_events: must be 1..10000" in text


def test_unreadable_or_invalid_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml", env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[shore\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken, env={})


def test_unrelated_tidesync_variables_are_ignored():
    load_config(None, env={"TIDESYNC_TEST_PG_DSN": "postgresql://x", "TIDESYNC_TANSU_BIN": "/b"})


def test_a_configuration_of_the_retired_sqlite_event_store_says_what_to_use(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text('[event_store]\nkind = "sqlite"\nsqlite_path = "data/shore-events.sqlite"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    text = "\n".join(caught.value.problems)
    assert ('event_store.kind: the SQLite event store was retired; use "embedded"' in text
            and f"(from {path})" in text)
    assert "event_store.sqlite_path: retired with the SQLite event store" in text
    with pytest.raises(ConfigError) as caught:
        load_config(None, env={"TIDESYNC_EVENT_STORE__KIND": "sqlite"})
    assert caught.value.problems == [
        'event_store.kind: the SQLite event store was retired; use "embedded" (a private'
        " PostgreSQL server in event_store.embedded_dir, the default) or \"postgres\""
        " (from TIDESYNC_EVENT_STORE__KIND)"]


def test_lists_and_maps_are_toml_arrays_and_tables(tmp_path) -> None:
    path = tmp_path / "tidesync.toml"
    path.write_text(
        '[shore]\ntrusted_proxies = ["10.0.0.5", "127.0.0.1"]\n'
        '[ship]\nbidirectional_tables = ["fleet.items", "fleet.parts"]\n'
        '[ship.kafka_consumer_options]\n"fetch.max.bytes" = 1048576\n"check.crcs" = true\n'
        '[capture]\ndatabases = ["fleet"]\ntables = ["fleet.items"]\n'
        '[console]\nsensitive_columns = ["crew.*.passport_no"]\n'
        '[conflicts.policies]\n"fleet.items" = "SHORE_WINS"\n'
        '"fleet.parts" = "LAST_WRITER_WINS:updated_at"\n'
        '[downlink]\nnodes = ["ship-1", "ship-2"]\n', encoding="utf-8")
    config = load_config(path, env={})
    assert config.shore.trusted_proxies == ("10.0.0.5", "127.0.0.1")
    assert config.ship.table_set() == {("fleet", "items"), ("fleet", "parts")}
    assert config.ship.kafka_consumer_options == {"fetch.max.bytes": "1048576",
                                                  "check.crcs": "true"}
    assert config.capture.databases == ("fleet",) and config.capture.tables == ("fleet.items",)
    assert config.console.sensitive_columns == ("crew.*.passport_no",)
    assert config.conflicts.policy_for("fleet", "parts").time_column == "updated_at"
    assert config.conflicts.policy_for("fleet", "items").policy.value == "SHORE_WINS"
    assert config.downlink.nodes == ("ship-1", "ship-2")
    # An environment variable carries the same as text: comma-separated, key=value.
    from_env = load_config(env={
        "TIDESYNC_SHIP__BIDIRECTIONAL_TABLES": "fleet.items, fleet.parts",
        "TIDESYNC_SHIP__KAFKA_CONSUMER_OPTIONS": "fetch.max.bytes=1048576,check.crcs=true",
        "TIDESYNC_CONFLICTS__POLICIES": "fleet.parts=LAST_WRITER_WINS:updated_at"})
    assert from_env.ship.bidirectional_tables == config.ship.bidirectional_tables
    assert from_env.ship.kafka_consumer_options == config.ship.kafka_consumer_options
    assert from_env.conflicts.policies == {"fleet.parts": "LAST_WRITER_WINS:updated_at"}


@pytest.mark.parametrize(("toml", "problem"), [
    ('[ship]\nbidirectional_tables = [1, 2]\n', "ship.bidirectional_tables: expected an array"),
    ('[ship]\nbidirectional_tables = ["items"]\n', "'items' is not db.table"),
    ('[downlink]\nnodes = "a"\n[downlink.kafka_consumer_options]\nx = [1]\n',
     "x: expected a string, number or boolean"),
    ('[conflicts.policies]\n"fleet.items" = "SOMETIMES"\n', "'SOMETIMES' is not one of"),
    ('[conflicts.policies]\nitems = "MANUAL"\n', "'items' is not db.table"),
    ('[conflicts]\npolicies = ["fleet.items"]\n', "conflicts.policies: expected a table"),
])
def test_a_wrong_list_or_map_says_which_setting_and_why(tmp_path, toml, problem) -> None:
    path = tmp_path / "tidesync.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert problem in str(refused.value)


def test_client_options_cannot_turn_on_auto_commit_and_are_not_shown() -> None:
    env = {"TIDESYNC_SHIP__KAFKA_CONSUMER_OPTIONS":
           "enable.auto.commit=true,sasl.password=hunter2-secret"}
    with pytest.raises(ConfigError) as refused:
        load_config(env=env)
    assert "'enable.auto.commit' is set by tidesync" in str(refused.value)
    config = load_config(env={"TIDESYNC_SHIP__KAFKA_CONSUMER_OPTIONS":
                              "sasl.password=hunter2-secret,fetch.wait.max.ms=50"})
    shown = json.dumps(config.redacted())
    assert "hunter2-secret" not in shown and "sasl.password" in shown
    consumer = QueueSettings("broker:9092", "group", ".*",
                             {"enable.auto.commit": "true", "fetch.wait.max.ms": "50"})
    settings = consumer.consumer_config()
    assert settings["enable.auto.commit"] is False and settings["fetch.wait.max.ms"] == "50"


def test_a_number_setting_takes_fractions_from_the_file_and_the_environment(tmp_path):
    path = tmp_path / "ship.toml"
    path.write_text("[ship]\nprobe_interval_seconds = 0.25\nprobe_max_interval_seconds = 20\n")
    config = load_config(path, env={})
    assert config.ship.probe_interval_seconds == 0.25
    assert config.ship.probe_max_interval_seconds == 20.0
    overridden = load_config(path, env={"TIDESYNC_SHIP__PROBE_INTERVAL_SECONDS": "2.5"})
    assert overridden.ship.probe_interval_seconds == 2.5


@pytest.mark.parametrize(("text", "problem"), [
    ('"soon"', "ship.probe_interval_seconds: expected a number, got 'soon'"),
    ("true", "ship.probe_interval_seconds: expected a number, got True"),
    ("nan", "ship.probe_interval_seconds: expected a finite number, got nan"),
    ("0.01", "ship.probe_interval_seconds: must be 0.1..60"),
])
def test_a_bad_number_setting_is_named(tmp_path, text, problem):
    path = tmp_path / "ship.toml"
    path.write_text(f"[ship]\nprobe_interval_seconds = {text}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert problem in "\n".join(caught.value.problems)


def test_the_measured_uplink_pace_is_on_by_default_and_can_be_turned_off(tmp_path):
    from tidesync.bootstrap.ship import uplink_pacer

    assert uplink_pacer(load_config(None, env={}).ship).measured is not None
    path = tmp_path / "tidesync.toml"
    path.write_text("[ship]\nuplink_measured_pace = false\n")
    assert uplink_pacer(load_config(path, env={}).ship).measured is None
    env = {"TIDESYNC_SHIP__UPLINK_MEASURED_PACE": "false"}
    assert uplink_pacer(load_config(None, env=env).ship).measured is None
    with pytest.raises(ConfigError, match="uplink_measured_pace"):
        load_config(None, env={"TIDESYNC_SHIP__UPLINK_MEASURED_PACE": "sometimes"})
