"""The business database a shore process writes: SQLite file or MySQL server."""

from __future__ import annotations

from tidesync.config import TargetConfig
from tidesync.target.contract import TargetApplier
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.sqlite import SQLiteTargetApplier


def build_target_applier(target: TargetConfig) -> TargetApplier:
    """The `[target]` business database: the SQLite file `target.sqlite_path` when set, else
    the MySQL server."""
    if target.sqlite_path:
        return SQLiteTargetApplier(target.sqlite_path, node_id=target.node_id)
    return MySQLTargetApplier.from_config(target)

