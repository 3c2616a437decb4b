"""Subcommands of `tidesync` for the shore: `shore serve`, `shore work`, `shore cdc`,
`jobs list|replay|skip`.

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from tidesync.apps.jobs import ReplayRefused, replay, replay_event, skip_event, summarize
from tidesync.bootstrap.capture import downlink_topic_warnings
from tidesync.bootstrap.event_store import (
    STORE_ERRORS,
    command_budget,
    event_store_env,
    name_process,
    probe_store,
    serve_budget,
    store_problem,
    work_budget,
)
from tidesync.bootstrap.shore import build_worker, open_work_queue
from tidesync.bootstrap.target import build_target_applier
from tidesync.config import Config, load_config
from tidesync.domain.apply_job import ErrorClass
from tidesync.entrypoints.capture_cli import add_shore_capture_command
from tidesync.entrypoints.http import serve_and_report
from tidesync.entrypoints.operator import actor_of
from tidesync.entrypoints.shore_cdc_cli import add_cdc_commands
from tidesync.shore.processor import ProcessorSettings
from tidesync.shore.worker import ShoreApps, ShoreWorker, settle_startup_heap

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

log = logging.getLogger(__name__)
T = TypeVar("T")
_START_RETRY_MAX_SECONDS = 30.0
COMMAND_ATTEMPTS = 3
"""How often a one-shot command tries to reach the event store (pauses of 1 s, 2 s)."""


def register_commands(commands: Commands) -> None:
    shore = commands.add_parser("shore", help="shore server and workers")
    shore_commands = shore.add_subparsers(dest="shore_command", metavar="SUBCOMMAND")
    shore_commands.required = True
    serve = shore_commands.add_parser("serve", help="serve the shore HTTP API")
    serve.add_argument("--duration", type=float, default=None,
                       help="stop after this many seconds (default: run until stopped)")
    serve.set_defaults(handler=_run_serve)
    work = shore_commands.add_parser(
        "work", help="apply received events to the target and keep projections current")
    work.add_argument("--worker-id", help="name of this worker in leases and job streams")
    work.add_argument("--once", action="store_true",
                      help="process what is there, then exit (default: run until stopped)")
    work.set_defaults(handler=_run_work)
    add_cdc_commands(shore_commands)
    add_shore_capture_command(shore_commands)

    jobs = commands.add_parser("jobs", help="inspect and replay apply work")
    jobs_commands = jobs.add_subparsers(dest="jobs_command", metavar="SUBCOMMAND")
    jobs_commands.required = True
    listing = jobs_commands.add_parser(
        "list", help="events not applied: waiting, dead or rejected, by class and reason")
    listing.add_argument("--node", help="only this node's events")
    listing.set_defaults(handler=_run_jobs_list)
    replay = jobs_commands.add_parser(
        "replay", help="send dead or rejected events of one error class back to apply")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--class", dest="error_class",
                       help="TARGET_SCHEMA, DATA, UNSUPPORTED, INFRA or EXHAUSTED"
                            " (MALFORMED is never replayed)")
    which.add_argument("--event", type=uuid.UUID,
                       help="only this dead or rejected event (needs --node)")
    replay.add_argument("--reason", required=True, help="why (recorded on the job streams)")
    replay.add_argument("--node", help="only this node's events")
    replay.add_argument("--actor", default=None, help="who asks (default: the OS user)")
    replay.set_defaults(handler=_run_jobs_replay)
    skip = jobs_commands.add_parser(
        "skip", help="give up on one dead or rejected event: it ends REJECTED"
                     " (SKIPPED_BY_OPERATOR) and its partition moves on")
    skip.add_argument("--node", required=True, help="the node the event came from")
    skip.add_argument("--event", required=True, type=uuid.UUID, help="the event id")
    skip.add_argument("--reason", required=True, help="why (recorded on the job stream)")
    skip.add_argument("--actor", default=None, help="who asks (default: the OS user)")
    skip.set_defaults(handler=_run_jobs_skip)


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config)


def _command_config(args: argparse.Namespace, command: str) -> Config:
    """The configuration of a one-shot command, its connections named and counted."""
    config = _config(args)
    name_process(command.replace(" ", "-"))
    log.debug("%s", command_budget(config, command).describe())
    until_connected(lambda: probe_store(config), command, attempts=COMMAND_ATTEMPTS)
    return config


def _run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = _config(args)
    name_process("shore-serve")
    log.info("%s", serve_budget(config).describe())
    return serve_and_report(config, args.duration)


def until_connected(open_store: Callable[[], T], what: str, attempts: int | None = None,
                    sleep: Callable[[float], None] = time.sleep) -> T:
    """`open_store()`, tried again with a growing pause while PostgreSQL cannot take the
    connection (down, or "too many clients"): a service waits for its store, it does not die;
    a command gives up after `attempts` (the last error goes to its caller)."""
    delay = 1.0
    for attempt in itertools.count(1):
        try:
            return open_store()
        except STORE_ERRORS as error:
            if attempts is not None and attempt >= attempts:
                raise
            # A service says so each time; a command's one line comes if it gives up.
            log.log(logging.WARNING if attempts is None else logging.INFO,
                    "%s: the event store is unavailable (%s); trying again in %.0f s",
                    what, store_problem(error), delay)
        sleep(delay)
        delay = min(delay * 2, _START_RETRY_MAX_SECONDS)
    raise AssertionError("unreachable")  # itertools.count never ends


def _run_work(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = _config(args)
    name_process("shore-work")
    log.info("%s", work_budget(config).describe())
    applier = build_target_applier(config.target)
    settings = ProcessorSettings(max_events_per_job=config.shore.apply_max_events_per_job,
                                 chunk_size=config.shore.apply_chunk_size,
                                 lease_seconds=config.shore.apply_lease_seconds,
                                 scope=config.apply)
    for warning in downlink_topic_warnings(config):
        log.warning("%s", warning)
    if not config.apply.restricted:
        logging.getLogger(__name__).warning(
            "apply.node_tables is not set: every node may write every enabled table")
    if args.worker_id:
        settings.worker_id = args.worker_id
    until_connected(lambda: probe_store(config), "shore work")
    worker, close = build_worker(config, applier, settings=settings)
    settle_startup_heap()
    try:
        if args.once:
            while worker.run_once() > 0:
                pass
        else:
            print(f"tidesync shore worker {worker.processor.settings.worker_id} running",
                  flush=True)
            keep_working(worker)
    finally:
        close()
    return 0


def keep_working(worker: ShoreWorker) -> None:
    """Run the worker until a signal stops it; while the event store cannot take a
    connection or a statement, log one line and carry on after a growing pause (its pools
    reconnect by themselves, an unfinished job's lease expires and is taken over)."""
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("stopping after the current job (signal %d)", signum)
        stopping.set()
        worker.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delay = 1.0
    while not stopping.is_set():
        worker.stop_event.clear()
        try:
            worker.run()
        except STORE_ERRORS as error:
            log.warning("the event store is unavailable (%s); working again in %.0f s",
                        store_problem(error), delay)
            stopping.wait(delay)
            delay = min(delay * 2, _START_RETRY_MAX_SECONDS)
        else:
            return


def _run_jobs_list(args: argparse.Namespace) -> int:
    queue = open_work_queue(_command_config(args, "jobs list"))
    try:
        rows = summarize(queue, args.node)
    finally:
        queue.close()
    if not rows:
        print("every received event is applied")
        return 0
    print(f"{'node':<24} {'state':<9} {'result':<18} {'class':<14} {'reason':<24} events")
    for row in rows:
        print(f"{row.origin_node_id:<24} {row.state:<9} {row.result or '-':<18}"
              f" {row.error_class or '-':<14} {row.reason_code or '-':<24} {row.events}")
    return 0


def _run_jobs_replay(args: argparse.Namespace) -> int:
    if args.event is not None:
        if not args.node:
            print("tidesync: --event needs --node", file=sys.stderr)
            return 2
        return _one_event(args, replay_event, "sent back to apply")
    try:
        error_class = ErrorClass(args.error_class.upper())
    except ValueError:
        print(f"tidesync: unknown class {args.error_class!r}", file=sys.stderr)
        return 2
    config = _command_config(args, "jobs replay")
    queue = open_work_queue(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    try:
        count = replay(queue, apps.apply_jobs, error_class, actor_of(args),
                       args.reason, args.node)
    except ReplayRefused as refused:
        print(f"tidesync: {refused}", file=sys.stderr)
        return 2
    finally:
        apps.close()
        queue.close()
    print(f"{count} event(s) sent back to apply")
    return 0


def _run_jobs_skip(args: argparse.Namespace) -> int:
    return _one_event(args, skip_event, "skipped: it ends REJECTED (SKIPPED_BY_OPERATOR)")


def _one_event(args: argparse.Namespace, command: Callable[..., None], done: str) -> int:
    """Replay or skip one event, recorded on its job stream with actor and reason."""
    config = _command_config(args, f"jobs {args.jobs_command}")
    queue = open_work_queue(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    try:
        command(queue, apps.apply_jobs, args.node, args.event, actor_of(args), args.reason)
    except ReplayRefused as refused:
        print(f"tidesync: {refused}", file=sys.stderr)
        return 2
    finally:
        apps.close()
        queue.close()
    print(f"event {args.event} {done}")
    return 0
