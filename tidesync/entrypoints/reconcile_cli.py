"""`tidesync reconcile`: compare a table (or a rule's rows) on a ship and on the shore by key-range
digests, list the keys that differ, and keep the last result.

Over the link (`reconcile link`, `tidesync.entrypoints.reconcile_link_cli`) the messages travel
as downlink commands and the ship's answers; for air-gapped use the two sides exchange small
message files: one side runs `reconcile start`, each side then runs `reconcile answer` on the
other's latest file until an answer says the exchange has ended (see
`tidesync.target.reconciliation` and docs/onboarding.md for the link cost).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
import zstandard

from tidesync.bootstrap.business_db import business_connection
from tidesync.config import Config, TargetConfig, load_config
from tidesync.domain.clock import utc_now
from tidesync.domain.errors import TidesyncError
from tidesync.domain.rules.filter import parse_filter
from tidesync.domain.values import value_to_json
from tidesync.entrypoints.reconcile_link_cli import (
    add_show_arguments,
    register_link_commands,
    run_show_sentinel,
)
from tidesync.target import digests, reconciliation

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAX_FILTER = 10_000


def register_commands(commands: Commands) -> None:
    """Add `tidesync reconcile link|status|repair|start|answer|show|keys`."""
    reconcile = commands.add_parser(
        "reconcile", help="compare a table on a ship and on the shore by key-range digests",
        description="`link` reconciles with a ship over the link; without a link both sides"
                    " exchange small message files: `start` on one side, then `answer` on"
                    " each side in turn until the exchange ends.")
    subcommands = reconcile.add_subparsers(dest="reconcile_command", metavar="SUBCOMMAND")
    subcommands.required = True
    register_link_commands(subcommands)

    start = subcommands.add_parser("start", help="write the first message: the digest of"
                                                 " every row of the table")
    start.add_argument("table", metavar="DB.TABLE", help="the table (with --sqlite: TABLE)")
    start.add_argument("--out", required=True, metavar="FILE",
                       help="the message to send to the other side (.zst: compressed)")
    start.add_argument("--filter", default="", metavar="EXPR",
                       help="compare only the rows this row filter keeps (a rule's filter)")
    start.add_argument("--rule", default="", metavar="RULE",
                       help="name the result after this rule instead of the table")
    start.add_argument("--fan-out", type=int, default=reconciliation.DEFAULT_FAN_OUT,
                       help="ranges a differing range is cut into (default %(default)s)")
    start.add_argument("--leaf-rows", type=int, default=reconciliation.DEFAULT_LEAF_ROWS,
                       help="a side sends keys and row hashes of a differing range holding"
                            " at most this many rows (default %(default)s)")
    _add_database_arguments(start)
    start.set_defaults(handler=_run_start)

    answer = subcommands.add_parser("answer", help="answer the other side's message")
    answer.add_argument("message", metavar="FILE", help="the other side's latest message")
    answer.add_argument("--out", required=True, metavar="FILE",
                        help="this side's answer (.zst: compressed)")
    answer.add_argument("--table", default="", metavar="DB.TABLE",
                        help="the table's name on this side (default: the message's)")
    _add_database_arguments(answer)
    answer.set_defaults(handler=_run_answer)

    keys = subcommands.add_parser("keys", help="list the differing keys a message holds"
                                               " (keys only, one JSON array a line)")
    keys.add_argument("message", metavar="FILE")
    keys.set_defaults(handler=_run_keys)

    show = subcommands.add_parser(
        "show", help="the last result of each node and table or rule (over the link; with"
                     " --files: of the file exchanges this database took part in)")
    show.add_argument("database", nargs="?", default="", metavar="DB",
                      help="with --files: the MySQL database the tables are in (default:"
                           " [target] database)")
    show.add_argument("--files", action="store_true",
                      help="the results of file exchanges, kept in the business database"
                           " (also with DB, --sqlite or --ship-target)")
    add_show_arguments(show)
    _add_database_arguments(show)
    show.set_defaults(handler=_run_show)


def _add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sqlite", metavar="FILE",
                        help="a SQLite database file instead of the [target] MySQL server")
    parser.add_argument("--ship-target", action="store_true",
                        help="use the ship's business database ([ship_target]) instead of"
                             " [target]")


# --- the subcommands ---------------------------------------------------------------------------


def _run_start(args: argparse.Namespace) -> int:
    if len(args.filter) > _MAX_FILTER:
        raise SystemExit(f"tidesync: --filter is at most {_MAX_FILTER} characters")
    config = load_config(args.config)
    sqlite_path, target = _database(args, config)
    database, table = _split_name(args.table, bool(sqlite_path))
    subject = f"rule:{args.rule}" if args.rule else f"table:{database}.{table}"
    try:
        with _connected(sqlite_path, target) as connection:
            source = _source(connection, sqlite_path, database, table, args.filter)
            message = reconciliation.start(
                connection, source, subject, utc_now(), fan_out=args.fan_out,
                leaf_rows=args.leaf_rows, row_filter=args.filter)
            message = _with_own_size(message)
    except TidesyncError as error:
        print(f"tidesync: cannot reconcile {args.table}: {error}", file=sys.stderr)
        return 1
    written = _write(Path(args.out), message)
    print(f"{subject}: {message.rows_compared} rows here; wrote {args.out} ({written} bytes):"
          " run `tidesync reconcile answer` on the other side with it")
    return 0


def _run_answer(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    sqlite_path, target = _database(args, config)
    try:
        message = _read(Path(args.message))
        database, table = _split_name(args.table or message.table, bool(sqlite_path))
        with _connected(sqlite_path, target) as connection:
            source = _source(connection, sqlite_path, database, table, message.row_filter)
            reply = message if message.done else reconciliation.answer(
                connection, source, message)
            if not message.done:
                reply = _with_own_size(reply)
            if reply.done:
                result = reconciliation.record_result(
                    connection, None if sqlite_path else database, reply,
                    utc_now())
    except (TidesyncError, OSError) as error:
        print(f"tidesync: cannot answer {args.message}: {error}", file=sys.stderr)
        return 1
    written = _write(Path(args.out), reply)
    if not reply.done:
        print(f"{reply.subject}: round {reply.round}: {len(reply.ranges)} ranges and"
              f" {len(reply.leaves)} row lists to compare, {len(reply.differing)} differing"
              f" keys so far; wrote {args.out} ({written} bytes): send it to the other side")
        return 0
    print(f"{reply.subject}: {result.differing} differing keys in {result.rows_compared} rows,"
          f" {result.rounds} messages, {result.link_bytes} bytes over the link,"
          f" {result.seconds:.0f} s; wrote {args.out} (send it to the other side too)")
    return 0 if not result.differing else 3


def _run_keys(args: argparse.Namespace) -> int:
    try:
        message = _read(Path(args.message))
    except (TidesyncError, OSError) as error:
        print(f"tidesync: cannot read {args.message}: {error}", file=sys.stderr)
        return 1
    for key in message.differing:
        print(json.dumps([value_to_json(value) for value in key], ensure_ascii=False))
    if not message.done:
        print("tidesync: the exchange has not ended: these are the keys found so far",
              file=sys.stderr)
    return 0


def _run_show(args: argparse.Namespace) -> int:
    if not (args.files or args.sqlite or args.ship_target or args.database):
        return run_show_sentinel(args)
    config = load_config(args.config)
    sqlite_path, target = _database(args, config)
    with _connected(sqlite_path, target) as connection:
        results = reconciliation.last_results(
            connection, None if sqlite_path else args.database or target.database or None)
    if not results:
        print("no reconciliation has ended here yet")
    for result in results:
        print(f"{result.subject}: {result.differing} differing of {result.rows_compared} rows,"
              f" at {result.finished_at.isoformat()} after {result.seconds:.0f} s"
              f" ({result.rounds} messages, {result.link_bytes} bytes)")
    return 0


# --- helpers ----------------------------------------------------------------------------------


def _database(args: argparse.Namespace, config: Config) -> tuple[str, TargetConfig]:
    target = (config.ship_target.as_target(config.ship.node_id or "ship") if args.ship_target
              else config.target)
    return args.sqlite or target.sqlite_path, target


def _split_name(text: str, sqlite: bool) -> tuple[str, str]:
    database, dot, table = text.rpartition(".")
    if sqlite:
        return "main", table
    if not (dot and database and table):
        raise SystemExit(f"tidesync: expected DB.TABLE, got {text!r}")
    return database, table


def _source(connection: sa.Connection, sqlite_path: str, database: str, table: str,
            row_filter: str) -> digests.DigestTable:
    return digests.digest_table(connection, table, database=None if sqlite_path else database,
                                row_filter=parse_filter(row_filter) if row_filter else None)


@contextlib.contextmanager
def _connected(sqlite_path: str, target: TargetConfig) -> Iterator[sa.Connection]:
    connect = business_connection(dataclasses.replace(target, sqlite_path=sqlite_path))
    try:
        with connect() as connection:
            yield connection
    except sa.exc.OperationalError as error:
        raise SystemExit(f"tidesync: cannot reach the business database"
                         f" ({type(error.orig).__name__})") from error


def _with_own_size(message: reconciliation.Exchange) -> reconciliation.Exchange:
    size = len(reconciliation.encode(message))
    return dataclasses.replace(message, link_bytes=message.link_bytes + size)


def _write(path: Path, message: reconciliation.Exchange) -> int:
    data = reconciliation.encode(message)
    if path.suffix == ".zst":
        data = zstandard.ZstdCompressor(level=3).compress(data)
    path.write_bytes(data)
    return len(data)


def _read(path: Path) -> reconciliation.Exchange:
    with path.open("rb") as handle:
        data = handle.read(reconciliation.MAX_MESSAGE_BYTES + 1)
    if data.startswith(_ZSTD_MAGIC):
        try:
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
                data = reader.read(reconciliation.MAX_MESSAGE_BYTES + 1)
        except zstandard.ZstdError as error:
            raise reconciliation.ReconcileError("not a zstd-compressed message") from error
        if len(data) > reconciliation.MAX_MESSAGE_BYTES:
            raise reconciliation.ReconcileError("the message is too large")
    return reconciliation.decode(data)
