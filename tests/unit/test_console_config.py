"""The [console] section: defaults, overrides, and every invalid value reported."""

from __future__ import annotations

import pytest

from tidesync.apps.master_key import MasterKeyError
from tidesync.bootstrap.console import build_console
from tidesync.config import ConfigError, load_config


def test_console_defaults_are_closed_and_bounded():
    console = load_config(None, env={}).console
    assert console.introspection is False
    assert (console.max_depth, console.max_aliases, console.max_cost) == (10, 15, 20_000)
    assert (console.default_page_size, console.max_page_size) == (50, 200)
    assert console.max_body_bytes == 64 * 1024 and console.max_tokens == 2_000


def test_console_settings_from_file_and_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[console]\nintrospection = true\n'
                    'sensitive_columns = ["crew.*.passport", "shop.items.price"]\n')
    console = load_config(path, env={"TIDESYNC_CONSOLE__MAX_PAGE_SIZE": "500"}).console
    assert console.introspection is True and console.max_page_size == 500
    assert console.sensitive_columns == ("crew.*.passport", "shop.items.price")
    # A file written before lists were arrays still reads: comma-separated text.
    path.write_text('[console]\nsensitive_columns = "crew.*.passport, shop.items.price"\n')
    assert load_config(path, env={}).console.sensitive_columns == console.sensitive_columns


def test_invalid_console_settings_are_all_reported():
    env = {"TIDESYNC_CONSOLE__MAX_DEPTH": "0", "TIDESYNC_CONSOLE__MAX_PAGE_SIZE": "5000",
           "TIDESYNC_CONSOLE__DEFAULT_PAGE_SIZE": "6000",
           "TIDESYNC_CONSOLE__SENSITIVE_COLUMNS": "just_a_table",
           "TIDESYNC_CONSOLE__WAIT_TIMEOUT_MS": "-1"}
    with pytest.raises(ConfigError) as error:
        load_config(None, env=env)
    problems = "\n".join(error.value.problems)
    for name in ("max_depth", "max_page_size", "default_page_size", "sensitive_columns",
                 "wait_timeout_ms"):
        assert f"console.{name}" in problems


def test_a_console_never_creates_a_master_key(tmp_path):
    """A console started in another directory must not make a new key beside it: node secrets
    sealed with the real key would no longer open."""
    missing = tmp_path / "elsewhere" / "master.key"
    config = load_config(env={"TIDESYNC_EVENT_STORE__KIND": "postgres",
                              "TIDESYNC_SHORE__MASTER_KEY_FILE": str(missing)})
    console = build_console(config)
    with pytest.raises(MasterKeyError, match="does not exist"):
        console.stores.open_box()
    with pytest.raises(MasterKeyError):
        console.stores.digest_key()
    assert not missing.exists() and not missing.parent.exists()
