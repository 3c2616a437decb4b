"""Subcommands of `tidesync` for the target databases: `target enable` and `target status`.

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

from tidesync.config import Config, ShipTargetKind, TargetConfig, load_config
from tidesync.domain.content_revision import RevisionKeyError, read_revision_key
from tidesync.target import (
    backfill,
    mysql_schema,
    one_way_mysql,
    one_way_sqlite,
    sqlite_schema,
    table_state,
)

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add `tidesync target enable|status|revision-key`."""
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
    enable.add_argument("--allow-visible-metadata", action="store_true",
                        help="enable on a server that cannot hide the metadata columns"
                             " (MariaDB before 10.3.3, MySQL before 8.0.23): they stay visible"
                             " to SELECT * and INSERT must name its columns")
    enable.add_argument("--direction", choices=("BIDIRECTIONAL", "UPLINK", "DOWNLINK"),
                        default="BIDIRECTIONAL",
                        help="UPLINK: a table a one-way rule writes on the shore; DOWNLINK: a"
                             " ship's table a DOWNLINK-only rule writes; for both only the"
                             " ledger and the key-position table are created (no metadata"
                             " columns, no triggers)")
    revisions = enable.add_mutually_exclusive_group()
    revisions.add_argument("--revision-key-file", metavar="FILE",
                           help="the fleet revision key: rows the table already holds get"
                                " revisions derived from their content under it, the same on"
                                " ships and shore (default: [target] revision_key_file)")
    revisions.add_argument("--random-revisions", action="store_true",
                           help="give rows the table already holds random revisions instead"
                                " (only for a table that exists on one side)")
    enable.add_argument("--chunk-rows", type=int, default=backfill.DEFAULT_CHUNK_ROWS,
                        metavar="N", help="rows stamped per transaction (default %(default)s)")
    enable.set_defaults(handler=_run_enable)
    key = target_commands.add_parser(
        "revision-key", help="write a new fleet revision key file (copy it to every node)")
    key.add_argument("file", metavar="FILE", help="the file to create (refused if it exists)")
    key.set_defaults(handler=_run_revision_key)
    status = target_commands.add_parser(
        "status", help="show whether a table's columns, triggers and ledger are in place,"
                  " and its business triggers",
    )
    _add_table_arguments(status)
    status.set_defaults(handler=_run_status)


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="DB.TABLE",
                        help="the table (with --sqlite, TABLE or main.TABLE)")
    parser.add_argument("--sqlite", metavar="FILE",
                        help="a SQLite database file instead of the [target] MySQL server"
                             " (default: [target] sqlite_path when set)")
    parser.add_argument("--ship", action="store_true",
                        help="the ship's business database ([ship_target], node id"
                             " ship.node_id); the default when [ship_target] is set and"
                             " [target] names no database")


def _split_name(text: str, sqlite: bool) -> tuple[str, str]:
    database, dot, table = text.rpartition(".")
    if sqlite and not dot:
        return "main", table
    if not (dot and database and table) or (sqlite and database != "main"):
        raise SystemExit(f"tidesync: expected {'[main.]TABLE' if sqlite else 'DB.TABLE'},"
                         f" got {text!r}")
    return database, table


_CONNECTION_FIELDS = ("host", "port", "user", "password", "database", "sqlite_path")


def node_target(config: Config, ship: bool = False) -> TargetConfig:
    """The business database `target` commands work on: `[target]` on the shore; on a ship
    (`--ship`, or `[ship_target]` set while `[target]` names no database) `[ship_target]`
    with the ship's node id, keeping `[target]`'s other settings (the revision key file)."""
    default = TargetConfig()
    target = config.target
    configured = any(getattr(target, name) != getattr(default, name)
                     for name in _CONNECTION_FIELDS)
    if not ship and (configured or not config.ship_target.enabled):
        return target
    if not config.ship_target.enabled:
        raise SystemExit("tidesync: --ship needs a [ship_target] section (kind = \"mysql\" or"
                         " \"sqlite\")")
    if not config.ship.node_id:
        raise SystemExit("tidesync: ship.node_id must be set to enable the ship's tables")
    ship_target = config.ship_target
    return dataclasses.replace(
        target, host=ship_target.host, port=ship_target.port, user=ship_target.user,
        password=ship_target.password, database=ship_target.database,
        node_id=config.ship.node_id,
        sqlite_path=ship_target.sqlite_path if ship_target.kind is ShipTargetKind.SQLITE else "")


def _run_enable(args: argparse.Namespace) -> int:
    target = node_target(load_config(args.config), args.ship)
    node_id = args.node_id or target.node_id
    sqlite_path = args.sqlite or target.sqlite_path
    database, table = _split_name(args.table, bool(sqlite_path))
    try:
        if args.direction in ("UPLINK", "DOWNLINK"):
            report = _enable_one_way(target, sqlite_path, database, table, args.direction)
        elif sqlite_path:
            options = _backfill_options(args, target)
            with _sqlite(sqlite_path) as connection:
                report = sqlite_schema.enable_sqlite_table(connection, table, node_id,
                                                           backfill=options)
        else:
            options = _backfill_options(args, target)
            connection = _mysql(target)
            try:
                report = mysql_schema.enable_mysql_table(
                    connection, database, table, node_id,
                    allow_visible_metadata=args.allow_visible_metadata, backfill=options)
            finally:
                connection.close()
    except (table_state.SchemaError, RevisionKeyError, backfill.RevisionKeyRequired) as error:
        print(f"tidesync: cannot enable {args.table}: {error}", file=sys.stderr)
        return 1
    print(f"{report.database}.{report.table}: "
          f"{'enabled' if report.changed else 'already enabled, nothing changed'}")
    for action in report.actions:
        print(f"  {action}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0


def _backfill_options(args: argparse.Namespace,
                      target: TargetConfig) -> backfill.BackfillOptions:
    """Where the revisions of rows the table already holds come from, and progress on stderr."""
    if not 1 <= args.chunk_rows <= backfill.MAX_CHUNK_ROWS:
        raise SystemExit(f"tidesync: --chunk-rows must be 1..{backfill.MAX_CHUNK_ROWS}")
    key_file = args.revision_key_file or target.revision_key_file
    key = read_revision_key(key_file) if key_file and not args.random_revisions else None
    return backfill.BackfillOptions(revision_key=key, chunk_rows=args.chunk_rows,
                                    progress=_print_progress,
                                    random_allowed=args.random_revisions)


def _print_progress(done: int, total: int) -> None:
    print(f"back-fill: {done}/{total} rows ({100 * done // max(total, 1)}%)",
          file=sys.stderr, flush=True)


def _run_revision_key(args: argparse.Namespace) -> int:
    try:
        descriptor = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        print(f"tidesync: cannot create {args.file}: {error.strerror}", file=sys.stderr)
        return 1
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    print(f"wrote a new fleet revision key to {os.path.abspath(args.file)}: copy it to the"
          " shore and every ship ([target] revision_key_file) before enabling tables")
    return 0


def _enable_one_way(target: TargetConfig, sqlite_path: str, database: str,
                    table: str, direction: str) -> table_state.EnableReport:
    if sqlite_path:
        with _sqlite(sqlite_path) as connection:
            return one_way_sqlite.enable_one_way_sqlite(connection, table, direction)
    connection = _mysql(target)
    try:
        return one_way_mysql.enable_one_way_mysql(connection, database, table, direction)
    finally:
        connection.close()


def _run_status(args: argparse.Namespace) -> int:
    target = node_target(load_config(args.config), args.ship)
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
