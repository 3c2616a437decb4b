"""`tidesync snapshot`, run on a ship with the binlog capture: send a table's rows (or chosen
keys) as snapshot records, and show how far snapshots got.

    tidesync snapshot start DB.TABLE [--keys FILE] [--chunk-rows N] --reason WHY
    tidesync snapshot status [--id N]

The request is stored beside the capture's position; the running `ship capture` carries it out
chunk by chunk between binlog events (`tidesync.capture.snapshot`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tidesync.bootstrap.capture import binlog_settings
from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.settings import CaptureSource
from tidesync.capture.snapshot_store import (
    MAX_KEYS,
    Key,
    SnapshotRequest,
    SnapshotStore,
    decode_key,
    snapshot_phase,
)
from tidesync.cdc.kafka import PartitionKey
from tidesync.config import Config, load_config
from tidesync.domain.clock import utc_now
from tidesync.domain.errors import TidesyncError
from tidesync.domain.table_names import bad_table_names
from tidesync.entrypoints.operator import actor_of, add_audit_arguments
from tidesync.ship.state import SQLiteShipState

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

MAX_KEYS_FILE_BYTES = 256 * 1024 * 1024
DEFAULT_CHUNK_ROWS = 1000


def register_commands(commands: Commands) -> None:
    snapshot = commands.add_parser(
        "snapshot", help="send a table's rows as snapshot records (run on the ship)",
        description="The running binlog capture reads the table chunk by chunk between binlog"
                    " events and publishes the rows as snapshot records (op=r) in the table's"
                    " topic; the shore inserts missing rows and updates rows it last had from"
                    " this ship.")
    actions = snapshot.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND")
    actions.required = True
    start = actions.add_parser("start", help="ask the capture for a snapshot of a table")
    start.add_argument("table", metavar="DB.TABLE")
    start.add_argument("--keys", metavar="FILE", default=None,
                       help="only these keys: one JSON array a line (`tidesync reconcile keys`)")
    start.add_argument("--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS, metavar="N",
                       help="rows per chunk (default %(default)s)")
    add_audit_arguments(start, None, "asks for the snapshot")
    start.set_defaults(handler=_run_start)
    status = actions.add_parser("status", help="show the snapshots and their phase")
    status.add_argument("--id", type=int, default=None, help="only this snapshot")
    status.set_defaults(handler=_run_status)


def _run_start(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    problems = bad_table_names("table", [args.table])
    if problems:
        print(f"tidesync: {problems[0]}", file=sys.stderr)
        return 2
    database, _, table = args.table.partition(".")
    if config.capture.source is not CaptureSource.MYSQL:
        print("tidesync: snapshots need the binlog capture ([capture] source = \"mysql\")",
              file=sys.stderr)
        return 2
    try:
        if not binlog_settings(config).captures(database, table):
            print(f"tidesync: {database}.{table} is not captured (capture.databases,"
                  " capture.tables)", file=sys.stderr)
            return 2
        keys = None if args.keys is None else read_keys(Path(args.keys))
        store = SnapshotStore(config.capture.position_path)
        try:
            snapshot_id = store.request(topic_prefix(config), database, table, keys=keys,
                                        chunk_rows=args.chunk_rows, reason=args.reason,
                                        actor=actor_of(args), now=utc_now())
        finally:
            store.close()
    except (TidesyncError, OSError, ValueError) as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1
    what = "every row" if keys is None else f"{len(keys)} keys"
    print(f"snapshot {snapshot_id} of {database}.{table} queued ({what}); the running"
          " `ship capture` carries it out")
    return 0


def read_keys(path: Path) -> list[Key]:
    """Keys from a file of one JSON array (or one JSON value) a line."""
    if path.stat().st_size > MAX_KEYS_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_KEYS_FILE_BYTES} bytes")
    keys: list[Key] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if len(keys) >= MAX_KEYS:
                raise ValueError(f"{path} lists more than {MAX_KEYS} keys")
            try:
                keys.append(decode_key(json.loads(line)))
            except (ValueError, TidesyncError) as error:
                raise ValueError(f"{path}:{number}: not a key ({error})") from None
    return keys


def _run_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if not Path(config.capture.position_path).exists():
        print("no snapshot has been asked for here")
        return 0
    store = SnapshotStore(config.capture.position_path)
    try:
        requests = [request for request in store.requests()
                    if args.id is None or request.id == args.id]
    finally:
        store.close()
    terminal = _terminal_offsets(config, requests)
    print(json.dumps([status_json(request, terminal) for request in requests], indent=2))
    return 0


def status_json(request: SnapshotRequest,
                terminal: Mapping[tuple[str, int], int] | None) -> dict[str, object]:
    phase, lag = snapshot_phase(request, terminal)
    return {
        "id": request.id, "table": f"{request.database}.{request.table}",
        "phase": phase.value, "chunks": f"{request.chunks_done}/{request.chunks_total}",
        "rows_emitted": request.rows_emitted, "rows_total": request.rows_total,
        "keys": None if request.keys is None else len(request.keys),
        "lag_records": lag, "requested_at": request.requested_at,
        "started_at": request.started_at or None, "finished_at": request.finished_at or None,
        "actor": request.actor,
        "reason": request.reason, "error": request.error or None,
        "rule": f"{request.rule_id}@{request.rule_version}" if request.rule_id else None,
    }


def _terminal_offsets(config: Config,
                      requests: list[SnapshotRequest]) -> dict[tuple[str, int], int] | None:
    """Per partition a snapshot wrote to, the offset the ship holds answers up to."""
    ship = config.ship
    if not Path(ship.state_path).exists():
        return None
    state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id, read_only=True)
    try:
        found: dict[tuple[str, int], int] = {}
        for request in requests:
            for topic, partition in request.barrier:
                watermark = state.watermark(PartitionKey(topic, partition))
                found[(topic, partition)] = -1 if watermark is None else (
                    watermark.terminal_offset)
        return found
    finally:
        state.close()
