"""`tidesync ship capture`: built-in change capture into the queue (binlog or SQLite changelog).

`ship capture` runs the configured capture ([capture] section); `ship capture enable TABLE...`
adds the changelog triggers to SQLite tables; `ship capture status` shows the saved position.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sqlite3
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.errors import CaptureError
from tidesync.capture.positions import SQLitePositionStore
from tidesync.config import Config, load_config

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def add_capture_command(ship_commands: Commands) -> None:
    capture = ship_commands.add_parser(
        "capture", help="capture row changes into the queue as Debezium records",
        description="Capture row changes of the ship database (MySQL/MariaDB binlog or SQLite "
                    "changelog, see [capture]) into the queue, as Debezium's MySQL connector "
                    "writes them. Delivery is at-least-once: after a crash the changes since "
                    "the last saved position are published again with the same source "
                    "coordinates.",
    )
    capture.add_argument("--until-caught-up", action="store_true",
                         help="stop at the end of the binlog or changelog instead of waiting")
    capture.set_defaults(handler=_run_capture)
    actions = capture.add_subparsers(dest="capture_command", metavar="SUBCOMMAND")
    enable = actions.add_parser("enable", help="add changelog triggers to SQLite tables")
    enable.add_argument("tables", nargs="+", metavar="TABLE")
    enable.add_argument("--sqlite", metavar="FILE",
                        help="the SQLite database (default: capture.sqlite_path)")
    enable.set_defaults(handler=_run_enable)
    status = actions.add_parser("status", help="show where capture will resume")
    status.set_defaults(handler=_run_status)


def add_shore_capture_command(shore_commands: Commands) -> None:
    """`tidesync shore capture [status]`: the shore MySQL's own capture, from
    `[shore_capture]` of the shore's configuration."""
    capture = shore_commands.add_parser(
        "capture", help="capture the shore database's row changes for the ships",
        description="Capture the shore MySQL's row changes ([shore_capture]; topics"
                    " sync.cdc.shore.<db>.<table> by default) for `shore work` to send to the"
                    " ships. Delivery is at-least-once, as for `ship capture`.")
    capture.add_argument("--until-caught-up", action="store_true",
                         help="stop at the end of the binlog instead of waiting")
    capture.set_defaults(handler=_run_shore_capture, for_shore=True)
    actions = capture.add_subparsers(dest="capture_command", metavar="SUBCOMMAND")
    status = actions.add_parser("status", help="show where the shore capture will resume")
    status.set_defaults(handler=_run_status, for_shore=True)


def _load(args: argparse.Namespace) -> Config:
    from tidesync.bootstrap.capture import shore_capture_config  # the capture, when it runs

    config = load_config(args.config)
    return shore_capture_config(config) if getattr(args, "for_shore", False) else config


def _run_shore_capture(args: argparse.Namespace) -> int:
    from tidesync.bootstrap.capture import shore_capture_warnings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for warning in shore_capture_warnings(load_config(args.config)):
        logging.getLogger(__name__).warning("%s", warning)
    return _run_capture(args)


def _run_capture(args: argparse.Namespace) -> int:
    from tidesync.bootstrap.capture import run_capture

    config = _load(args)
    if not config.capture.kafka_bootstrap_servers and not config.ship.kafka_bootstrap_servers:
        print("tidesync: no broker: set kafka_bootstrap_servers", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    try:
        stats = run_capture(config, until_caught_up=args.until_caught_up, stop=stop)
    except CaptureError as error:
        print(f"tidesync: capture stopped: {error}", file=sys.stderr)
        return 1
    position = stats.position.describe() if stats.position else "(none)"
    print(f"capture published {stats.row_changes} row changes as {stats.records} records in "
          f"{stats.checkpoints} checkpoints; saved position: {position}")
    return 0


def _run_enable(args: argparse.Namespace) -> int:
    from tidesync.capture.sqlite import enable_sqlite_capture

    path = args.sqlite or _load(args).capture.sqlite_path
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        for table in args.tables:
            try:
                actions = enable_sqlite_capture(connection, table)
            except CaptureError as error:
                print(f"tidesync: {table}: {error}", file=sys.stderr)
                return 1
            for action in actions:
                print(f"{table}: {action}")
    return 0


def _run_status(args: argparse.Namespace) -> int:
    config = _load(args)
    try:
        name = topic_prefix(config)
    except CaptureError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1
    store = SQLitePositionStore(config.capture.position_path)
    try:
        saved = store.saved(name)
    finally:
        store.close()
    if saved is None:
        print(f"capture {name}: no saved position (a first run starts at the "
              f"{'changelog start' if config.capture.source.value == 'sqlite' else 'binlog end'})")
        return 0
    source, position, saved_at = saved
    print(f"capture {name} ({source}): resumes after {position.describe()} (saved {saved_at})")
    return 0
