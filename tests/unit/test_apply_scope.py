"""`[apply.node_tables]`: which tables each node may write (issue 13, item 4), read from TOML
and decided per node, with `"*"` for the nodes not named and nothing set meaning no limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidesync.config import ConfigError, load_config


def _config(tmp_path: Path, text: str):
    file = tmp_path / "tidesync.toml"
    file.write_text(text, encoding="utf-8")
    return load_config(file, env={})


def test_named_nodes_write_their_tables_and_the_rest_what_star_allows(tmp_path):
    scope = _config(tmp_path, '[apply.node_tables]\n"ship-1" = ["fleet.items", "stores.*"]\n'
                              '"*" = ["fleet.crew"]\n').apply

    assert scope.allows("ship-1", "fleet", "items")
    assert scope.allows("ship-1", "stores", "anything")
    assert not scope.allows("ship-1", "fleet", "crew")  # a named node gets only its own list
    assert scope.allows("ship-2", "fleet", "crew")
    assert not scope.allows("ship-2", "fleet", "items")


def test_without_a_star_an_unnamed_node_writes_nothing(tmp_path):
    scope = _config(tmp_path, '[apply.node_tables]\n"ship-1" = ["fleet.items"]\n').apply

    assert not scope.allows("ship-2", "fleet", "items")


def test_an_installation_without_the_setting_keeps_writing_every_table(tmp_path):
    scope = _config(tmp_path, "").apply

    assert not scope.restricted
    assert scope.allows("ship-9", "any", "table")


def test_entries_that_name_no_table_are_refused(tmp_path):
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, '[apply.node_tables]\n"ship-1" = ["items", "fleet."]\n')

    assert refused.value.problems == [
        "apply.node_tables.ship-1: 'items' is not database.table or database.*",
        "apply.node_tables.ship-1: 'fleet.' is not database.table or database.*"]
