"""Subcommands of `tidesync` for the read side: `projections list|status|rebuild` and
`audit history`. `register_commands` is called by `tidesync.entrypoints.cli` while it builds
the parser.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from tidesync.bootstrap.event_store import event_store_env
from tidesync.bootstrap.shore import open_pool, view_settings
from tidesync.config import Config, load_config
from tidesync.domain.operator_action import OperatorActionError
from tidesync.domain.user import UNSTORABLE_TEXT
from tidesync.entrypoints.operator import actor_of
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import Pool
from tidesync.projections.history import HistoryError, aggregate_events, diff_versions, state_at
from tidesync.projections.rebuild import RebuildError, RebuildProgress, rebuild_view
from tidesync.projections.registry import Catalogue, OpenApplications, RegistryError
from tidesync.projections.views import list_views, view_status

if TYPE_CHECKING:
    from eventsourcing.application import Application

    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add `projections list|status|rebuild` and `audit history`."""
    projections = commands.add_parser("projections", help="list, inspect and rebuild views")
    subcommands = projections.add_subparsers(dest="projections_command", metavar="SUBCOMMAND")
    subcommands.required = True
    listing = subcommands.add_parser("list", help="the views, their tables and sources")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_run_list)
    status = subcommands.add_parser(
        "status", help="position, head, events behind and rate of each view")
    status.add_argument("name", nargs="?", metavar="NAME", help="only this view")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_run_status)
    rebuild = subcommands.add_parser(
        "rebuild", help="rebuild a view from position 0 side by side, then switch it in")
    rebuild.add_argument("name", metavar="NAME")
    rebuild.add_argument("--reason", required=True, help="why, for the audit trail")
    rebuild.add_argument("--actor", default=None,
                         help="who asks, for the audit trail (default: the OS user)")
    rebuild.add_argument("--batch-size", type=int, default=None,
                         help="notifications per batch (default: the view setting)")
    rebuild.set_defaults(handler=_run_rebuild)

    audit = commands.add_parser("audit", help="replay the history of any aggregate")
    audit_commands = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    audit_commands.required = True
    history = audit_commands.add_parser(
        "history", help="an aggregate's events, its state as of a version or time, or a diff"
                        " (JSON)")
    history.add_argument("kind", metavar="KIND",
                         help="apply_job, conflict_case, node, operator_action, …")
    history.add_argument("aggregate_id", metavar="ID", help="the aggregate id (a UUID)")
    when = history.add_mutually_exclusive_group()
    when.add_argument("--version", type=int, help="the state as of this version")
    when.add_argument("--at", help="the state as of this time (ISO 8601 with offset)")
    when.add_argument("--diff", nargs=2, type=int, metavar=("A", "B"),
                      help="what changed from version A to version B")
    history.set_defaults(handler=_run_history)


# ----------------------------------------------------------------------------- plumbing


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config)


def _fail(message: str, code: int = 1) -> int:
    print(f"tidesync: {message}", file=sys.stderr)
    return code




def _catalogue(config: Config) -> Catalogue:
    return default_catalogue(view_settings(config))


@contextmanager
def _read_side(config: Config, *, pool_needed: bool = True,
               ) -> Iterator[tuple[Catalogue, OpenApplications, Pool | None]]:
    catalogue = _catalogue(config)
    pool = None
    if pool_needed:
        pool = open_pool(config)
    try:
        apps = catalogue.open_applications(event_store_env(config.event_store))
        try:
            yield catalogue, apps, pool
        finally:
            apps.close()
    finally:
        if pool is not None:
            pool.close()




# ----------------------------------------------------------------------------- projections


def _run_list(args: argparse.Namespace) -> int:
    views = list_views(default_catalogue())
    if args.json:
        print(json.dumps([{"name": v.name, "description": v.description,
                           "tables": list(v.tables), "applications": list(v.applications)}
                          for v in views], indent=2))
        return 0
    for view in views:
        print(f"{view.name:<16} {view.description}")
        print(f"{'':<16} tables: {', '.join(view.tables)};"
              f" follows: {', '.join(view.applications)}")
    return 0


def _run_status(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
        with _read_side(config) as (catalogue, apps, pool):
            assert pool is not None
            statuses = view_status(apps, pool, args.name, catalogue)
    except NotImplementedError as error:
        return _fail(str(error), 2)
    except RegistryError as error:
        return _fail(error.message, 2)
    if args.json:
        print(json.dumps([{"view": s.name, "state": s.state,
                           "failed_reason": s.failure.reason if s.failure else None,
                           "behind": s.behind, "feeds": [
            _feed_json(feed) for feed in s.feeds], "rebuilding": [
            _feed_json(feed) for feed in s.rebuilding]} for s in statuses], indent=2))
        return 0
    print(f"{'view':<16} {'feed':<28} {'position':>10} {'head':>10} {'behind':>9}"
          f" {'rate/s':>9} {'eta':>8}  updated")
    for status in statuses:
        for feed in status.feeds:
            print(_feed_line(status.name, feed))
        if status.failure is not None:
            print(f"{status.name:<16} FAILED: {status.failure.reason}"
                  f" ({status.failure.error_type}); rebuild it to resume")
        for feed in status.rebuilding:
            print(_feed_line(status.name, feed, " (rebuilding)"))
    return 0




def _feed_json(feed: Any) -> dict[str, object]:
    return {"feed": feed.name, "application": feed.application, "position": feed.position,
            "head": feed.head, "behind": feed.behind, "rate_per_second": feed.rate_per_second,
            "eta_seconds": feed.eta_seconds, "processed": feed.processed,
            "updated_at": None if feed.updated_at is None else feed.updated_at.isoformat()}


def _feed_line(view: str, feed: Any, note: str = "") -> str:
    eta = feed.eta_seconds
    eta_text = "-" if eta is None else _duration(eta)
    updated = "never" if feed.updated_at is None else feed.updated_at.strftime(
        "%Y-%m-%d %H:%M:%S%z")
    return (f"{view:<16} {feed.name + note:<28} {feed.position:>10,} {feed.head:>10,}"
            f" {feed.behind:>9,} {feed.rate_per_second:>9,.0f} {eta_text:>8}  {updated}")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _run_rebuild(args: argparse.Namespace) -> int:
    if UNSTORABLE_TEXT.search(args.reason) or UNSTORABLE_TEXT.search(args.actor or ""):
        return _fail("the reason and actor may not contain NUL characters or lone"
                     " surrogates (UNSTORABLE_TEXT)", 2)
    progress = ProgressPrinter(sys.stderr)
    try:
        config = _config(args)
        with _read_side(config) as (catalogue, apps, pool):
            assert pool is not None
            result = rebuild_view(args.name, apps=apps, pool=pool,
                                  actor=actor_of(args),
                                  reason=args.reason, catalogue=catalogue,
                                  batch_size=args.batch_size, on_progress=progress)
    except NotImplementedError as error:
        return _fail(str(error), 2)
    except (RegistryError, RebuildError) as error:
        progress.finish()
        return _fail(error.message, 2)
    except OperatorActionError as error:
        return _fail(str(error), 2)
    progress.finish()
    rows = ", ".join(f"{table}={count:,}" for table, count in result.rows.items())
    print(f"rebuilt {result.view}: {result.processed:,} notifications in"
          f" {result.seconds:.1f}s; rows {rows}; action {result.action_id}")
    return 0




class ProgressPrinter:
    """Rebuild progress on a stream: a bar redrawn in place on a terminal, otherwise a plain
    line every `interval` seconds and at each phase change."""

    def __init__(self, stream: IO[str], interval: float = 5.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 tty: bool | None = None) -> None:
        self.stream = stream
        self.interval = interval
        self.monotonic = monotonic
        self.tty = stream.isatty() if tty is None else tty
        self._printed_at: float | None = None
        self._phase = ""
        self._drawn = False

    def __call__(self, progress: RebuildProgress) -> None:
        text = (f"{progress.view}: {progress.phase.lower()} {progress.fraction:6.1%}"
                f" position {progress.position:,}/{progress.head:,},"
                f" {progress.rate_per_second:,.0f} notifications/s")
        if self.tty:
            filled = int(progress.fraction * 30)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}\x1b[K")
            self.stream.flush()
            self._drawn = True
            return
        now = self.monotonic()
        if (progress.phase != self._phase or self._printed_at is None
                or now - self._printed_at >= self.interval):
            self.stream.write(f"rebuild {text}\n")
            self.stream.flush()
            self._printed_at, self._phase = now, progress.phase

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


# ----------------------------------------------------------------------------- audit


def _run_history(args: argparse.Namespace) -> int:
    at = None
    if args.at is not None:
        try:
            at = dt.datetime.fromisoformat(args.at)
        except ValueError:
            return _fail(f"--at {args.at!r} is not an ISO 8601 time", 2)
    try:
        with _read_side(_config(args), pool_needed=False) as (catalogue, apps, _):
            output = _history(apps, catalogue, args, at)
    except HistoryError as error:
        return _fail(error.message, 2 if error.code in ("UNKNOWN_KIND", "BAD_REQUEST") else 1)
    print(json.dumps(output, indent=2, default=str, ensure_ascii=False))
    return 0


def _history(apps: dict[str, Application[Any]] | OpenApplications, catalogue: Catalogue,
             args: argparse.Namespace, at: dt.datetime | None) -> dict[str, object]:
    if args.diff is not None:
        changes = diff_versions(apps, args.kind, args.aggregate_id, args.diff[0], args.diff[1],
                                catalogue)
        return {"kind": args.kind, "aggregate_id": args.aggregate_id, "from": args.diff[0],
                "to": args.diff[1], "changes": [change.as_dict() for change in changes]}
    if args.version is not None or at is not None:
        return state_at(apps, args.kind, args.aggregate_id, version=args.version, at=at,
                        catalogue=catalogue).as_dict()
    events = aggregate_events(apps, args.kind, args.aggregate_id, catalogue)
    return {"kind": args.kind, "aggregate_id": args.aggregate_id,
            "events": [event.as_dict() for event in events]}
