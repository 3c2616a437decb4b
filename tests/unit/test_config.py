"""Configuration: defaults, TOML file, TIDESYNC_* overrides, and errors that name every fault."""

from __future__ import annotations

import pytest

from tidesync.config import ConfigError, EventStoreKind, load_config


def test_defaults_are_the_embedded_setup():
    config = load_config(None, env={})
    assert config.event_store.kind is EventStoreKind.EMBEDDED
    assert config.event_store.embedded_dir == "tidesync-data/postgres"
    assert config.shore.listen_host == "127.0.0.1"
    assert config.ship.batch_max_events == 500
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
