"""The business database a shore process writes: SQLite file or MySQL server."""

from __future__ import annotations

from tidesync.config import TargetConfig
from tidesync.target.contract import Route, TargetApplier, same_names
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.sqlite import SQLiteTargetApplier


def build_target_applier(target: TargetConfig) -> TargetApplier:
    """The `[target]` business database: the SQLite file `target.sqlite_path` when set, else
    the MySQL server."""
    if target.sqlite_path:
        return SQLiteTargetApplier(target.sqlite_path, node_id=target.node_id)
    return mysql_target_applier(target)


def mysql_target_applier(target: TargetConfig, route: Route = same_names) -> MySQLTargetApplier:
    """The MySQL applier of a `[target]`-shaped section (`route` maps a change's database and
    table to the target's)."""
    return MySQLTargetApplier(host=target.host, port=target.port, user=target.user,
                              password=target.password, database=target.database or None,
                              node_id=target.node_id, route=route,
                              connect_timeout=target.connect_timeout_seconds,
                              read_timeout=target.read_timeout_seconds,
                              write_timeout=target.write_timeout_seconds,
                              lock_wait_timeout=target.lock_wait_timeout_seconds)
