"""Subcommands of `tidesync` for the target databases: `target enable` and `target status`.

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

from tidesync.config import TargetConfig, load_config
from tidesync.target import mysql_schema, sqlite_schema, table_state

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add `tidesync target enable|status`."""
    target = commands.add_parser(
        "target", help="prepare business tables for two-way sync (metadata, ledger, triggers)",
    )
    target_commands = target.add_subparsers(dest="target_command", metavar="SUBCOMMAND")
    target_commands.required = True
    enable = target_commands.add_parser(
        "enable", help="add the sync metadata columns, ledger and triggers to a table",
        description="Idempotent: re-running it changes nothing and says so.",
    )
    _add_table_arguments(enable)
    enable.add_argument("--node-id", help="origin stamped on local writes (default: [target]"
                                          " node_id)")
    enable.set_defaults(handler=_run_enable)
    status = target_commands.add_parser(
        "status", help="show whether a table's columns, triggers and ledger are in place",
    )
    _add_table_arguments(status)
    status.set_defaults(handler=_run_status)


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="DB.TABLE",
                        help="the table (with --sqlite, TABLE or main.TABLE)")
    parser.add_argument("--sqlite", metavar="FILE",
                        help="a SQLite database file instead of the [target] MySQL server"
                             " (default: [target] sqlite_path when set)")


def _split_name(text: str, sqlite: bool) -> tuple[str, str]:
    database, dot, table = text.rpartition(".")
    if sqlite and not dot:
        return "main", table
    if not (dot and database and table) or (sqlite and database != "main"):
        raise SystemExit(f"tidesync: expected {'[main.]TABLE' if sqlite else 'DB.TABLE'},"
                         f" got {text!r}")
    return database, table


def _run_enable(args: argparse.Namespace) -> int:
    target = load_config(args.config).target
    node_id = args.node_id or target.node_id
    sqlite_path = args.sqlite or target.sqlite_path
    database, table = _split_name(args.table, bool(sqlite_path))
    try:
        if sqlite_path:
            with _sqlite(sqlite_path) as connection:
                report = sqlite_schema.enable_sqlite_table(connection, table, node_id)
        else:
            connection = _mysql(target)
            try:
                report = mysql_schema.enable_mysql_table(connection, database, table, node_id)
            finally:
                connection.close()
    except table_state.SchemaError as error:
        print(f"tidesync: cannot enable {args.table}: {error}", file=sys.stderr)
        return 1
    print(f"{report.database}.{report.table}: "
          f"{'enabled' if report.changed else 'already enabled, nothing changed'}")
    for action in report.actions:
        print(f"  {action}")
    return 0


def _run_status(args: argparse.Namespace) -> int:
    target = load_config(args.config).target
    sqlite_path = args.sqlite or target.sqlite_path
    database, table = _split_name(args.table, bool(sqlite_path))
    if sqlite_path:
        with _sqlite(sqlite_path) as connection:
            state = sqlite_schema.inspect_sqlite_table(connection, table)
    else:
        connection = _mysql(target)
        try:
            with connection.cursor() as cursor:
                state = mysql_schema.inspect_mysql_table(cursor, database, table)
        finally:
            connection.close()
    for line in table_state.status_lines(state, target.node_id):
        print(line)
    return 0 if state.enabled else 1


def _sqlite(path: str) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


def _mysql(target: TargetConfig) -> Any:
    import pymysql

    try:
        return pymysql.connect(host=target.host, port=target.port, user=target.user,
                               password=target.password, database=target.database or None,
                               charset="utf8mb4", connect_timeout=10)
    except pymysql.MySQLError as error:
        code = error.args[0] if error.args else "?"
        raise SystemExit(f"tidesync: cannot connect to the target MySQL at"
                         f" {target.host}:{target.port} (MySQL error {code})") from error
