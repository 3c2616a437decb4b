"""`tidesync replay`, run on a ship: send a closed range of a queue partition again under a new
replay epoch (the shore applies nothing twice), and show how far replays got.

    tidesync replay --topic T --partition P --from-offset A --to-offset B --reason WHY
    tidesync replay --status [--epoch E]

The request is stored in the ship state store with who asked and why; the running `ship run`
reads the range (throttled by `[ship] replay_rate_records_per_sec`) and sends its events.
`--follow` prints the progress until the shore has answered every event.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tidesync.config import ShipConfig, load_config
from tidesync.domain.errors import TidesyncError
from tidesync.domain.replay import ReplayRange
from tidesync.entrypoints.operator import actor_of, add_audit_arguments
from tidesync.ship.replay_runs import ReplayProgress, SQLiteReplayRuns
from tidesync.ship.state import SQLiteShipState

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

FOLLOW_SECONDS = 2.0


def register_commands(commands: Commands) -> None:
    replay = commands.add_parser(
        "replay", help="send a closed range of a ship's queue again (run on the ship)",
        description="Reads offsets FROM..TO (both included) of one queue partition again under"
                    " a new replay epoch; the shore recognises what it applied before and"
                    " applies nothing twice. The running `ship run` carries it out.")
    replay.add_argument("--status", action="store_true",
                        help="show the replays of this ship and their progress instead")
    replay.add_argument("--epoch", type=int, default=None,
                        help="with --status or --follow: only this replay epoch")
    replay.add_argument("--node", default="", metavar="N",
                        help="the ship's node id, checked against [ship] node_id")
    replay.add_argument("--topic", default="")
    replay.add_argument("--partition", type=int, default=None)
    replay.add_argument("--from-offset", type=int, default=None, metavar="A")
    replay.add_argument("--to-offset", type=int, default=None, metavar="B")
    replay.add_argument("--since", type=_aware_time, default=None, metavar="TIME",
                        help="only records written at or after this time (with a zone)")
    replay.add_argument("--until", type=_aware_time, default=None, metavar="TIME",
                        help="only records written before this time (with a zone)")
    replay.add_argument("--follow", action="store_true",
                        help="print the progress until the shore has answered every event")
    add_audit_arguments(replay, "", "asks for the replay")
    replay.set_defaults(handler=_run)


def _aware_time(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r}") from error
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError("give the time with a zone (e.g. 2026-01-02T03:04Z)")
    return moment


def _run(args: argparse.Namespace) -> int:
    ship = load_config(args.config).ship
    if args.node and args.node != ship.node_id:
        print(f"tidesync: this ship is {ship.node_id!r}, not {args.node!r}", file=sys.stderr)
        return 2
    try:
        if args.status:
            return _status(ship, args.epoch)
        missing = [name for name in ("topic", "partition", "from_offset", "to_offset")
                   if getattr(args, name) in (None, "")]
        if missing or not args.reason.strip():
            wanted = ", ".join("--" + name.replace("_", "-") for name in missing)
            print(f"tidesync: a replay needs {wanted or '--reason'}", file=sys.stderr)
            return 2
        return _request(ship, args)
    except TidesyncError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1


def _request(ship: ShipConfig, args: argparse.Namespace) -> int:
    state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id)
    try:
        runs = SQLiteReplayRuns(state.database)
        run = runs.request(
            ReplayRange(args.topic, args.partition, args.from_offset, args.to_offset),
            actor=actor_of(args), reason=args.reason, since=args.since, until=args.until)
        print(f"replay epoch {run.replay_epoch} queued: {run.topic}/{run.partition} offsets"
              f" {run.first}..{run.last}; `ship run` reads it", file=sys.stderr)
        print(json.dumps(runs.progress(run).as_json()))
        if args.follow:
            return _follow(runs, run.replay_epoch)
    finally:
        state.close()
    return 0


def _status(ship: ShipConfig, epoch: int | None) -> int:
    if not Path(ship.state_path).exists():
        print(f"tidesync: no ship state at {ship.state_path}", file=sys.stderr)
        return 1
    state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id)
    try:
        runs = SQLiteReplayRuns(state.database)
        found = [run for run in runs.runs(1000) if epoch is None or run.replay_epoch == epoch]
        print(json.dumps([runs.progress(run).as_json() for run in found], indent=2))
    finally:
        state.close()
    return 0


def _follow(runs: SQLiteReplayRuns, epoch: int) -> int:
    """Print one progress line whenever it changes, until every event is answered."""
    last = ""
    while True:
        run = runs.run(epoch)
        if run is None:
            return 1
        progress = runs.progress(run)
        line = progress_line(progress)
        if line != last:
            print(line, file=sys.stderr)
            last = line
        if progress.done or run.state.value == "FAILED":
            return 0 if progress.done else 1
        time.sleep(FOLLOW_SECONDS)


def progress_line(progress: ReplayProgress) -> str:
    run = progress.run
    results = ", ".join(f"{name} {count}" for name, count in sorted(progress.results.items()))
    return (f"replay {run.replay_epoch}: {run.state.value.lower()}, read"
            f" {run.read_fraction:.0%} of {run.first}..{run.last}; {progress.answered}/"
            f"{progress.events} events answered" + (f" ({results})" if results else ""))
