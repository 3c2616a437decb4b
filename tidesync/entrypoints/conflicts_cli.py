"""`tidesync conflicts list|show|decide|refresh|cancel|redispatch`: operator access to
conflicts from a shell, through the same ConflictService the console calls. Needs the
PostgreSQL event store."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import TYPE_CHECKING, Any

from tidesync.apps.conflicts import (
    ConflictCommandError,
    ConflictService,
    Decision,
    replacement_from_text,
)
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.bootstrap.shore import open_pool
from tidesync.bootstrap.target import build_target_applier
from tidesync.config import Config, load_config
from tidesync.domain.conflict_case import ConflictCase, ConflictRefused, DecisionSide
from tidesync.domain.downlink_command import DownlinkUnavailable
from tidesync.entrypoints.operator import actor_of
from tidesync.shore.conflicts import PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.downlink import open_downlink
from tidesync.shore.worker import ShoreApps

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    conflicts = commands.add_parser(
        "conflicts", help="inspect, decide, cancel and redispatch conflicts")
    sub = conflicts.add_subparsers(dest="conflicts_command", metavar="SUBCOMMAND")
    sub.required = True
    listing = sub.add_parser("list", help="active conflicts, oldest first")
    listing.add_argument("--state", help="only this state (e.g. PENDING_MANUAL)")
    listing.add_argument("--node", help="only conflicts with evidence from this node")
    listing.add_argument("--table", help="only this db.table")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    listing.set_defaults(handler=_run_list)
    show = sub.add_parser("show", help="one conflict: lifecycle, evidence and decision")
    show.add_argument("conflict_id")
    show.add_argument("--values", action="store_true",
                      help="print row values (default: column names and revisions only)")
    show.set_defaults(handler=_run_show)
    decide = sub.add_parser("decide", help="decide a conflict: keep the shore's row, the ship's,"
                                           " or a full replacement")
    decide.add_argument("conflict_id")
    decide.add_argument("--side", required=True, choices=["SHORE", "SHIP", "REPLACEMENT"])
    decide.add_argument("--reason", required=True, help="why (recorded on the case)")
    decide.add_argument("--set", action="append", default=[], metavar="COLUMN=TEXT",
                        help="REPLACEMENT: a column's new value as text (repeat per column)")
    decide.add_argument("--null", action="append", default=[], metavar="COLUMN",
                        help="REPLACEMENT: a column set to NULL")
    decide.add_argument("--expected-version", type=int,
                        help="refuse if the case moved past this version")
    decide.add_argument("--actor", help="who decides (default: the OS user)")
    decide.set_defaults(handler=_run_decide)
    refresh = sub.add_parser(
        "refresh", help="read the shore's row again into the conflict's evidence (after a"
                        " decision was refused as EVIDENCE_STALE)")
    refresh.add_argument("conflict_id")
    refresh.add_argument("--reason", required=True, help="why (recorded on the case)")
    refresh.add_argument("--expected-version", type=int,
                         help="refuse if the case moved past this version")
    refresh.add_argument("--actor", help="who asks (default: the OS user)")
    refresh.set_defaults(handler=_run_refresh)
    cancel = sub.add_parser("cancel", help="cancel a conflict that has no business effect yet")
    cancel.add_argument("conflict_id")
    cancel.add_argument("--reason", required=True)
    cancel.add_argument("--actor", help="who cancels (default: the OS user)")
    cancel.set_defaults(handler=_run_cancel)
    redispatch = sub.add_parser(
        "redispatch", help="send a decision again to a node that rejected it (after fixing"
                           " the cause there)")
    redispatch.add_argument("conflict_id")
    redispatch.add_argument("--node", required=True, help="the node that rejected it")
    redispatch.add_argument("--reason", required=True, help="why (recorded on the case)")
    redispatch.add_argument("--expected-version", type=int,
                            help="refuse if the case moved past this version")
    redispatch.add_argument("--actor", help="who asks (default: the OS user)")
    redispatch.set_defaults(handler=_run_redispatch)


def _config(args: argparse.Namespace) -> Config:
    return load_config(args.config)


class _Session:
    """The conflict applications and, when a command needs it, the shore target."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.apps = ShoreApps.open(event_store_env(config.event_store))
        self.pool = open_pool(config)
        self._readers: list[Any] = []

    def service(self) -> Any:
        reader = TargetRevisionReader(lambda: build_target_applier(self.config.target),
                                      PostgresRecordKeys(self.pool))
        self._readers.append(reader)
        return ConflictService(self.apps.conflicts, reader)

    def close(self) -> None:
        for reader in self._readers:
            reader.close()
        self.apps.close()
        self.pool.close()


def _case_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise SystemExit(f"tidesync: {text[:40]!r} is not a conflict id") from None


def _nodes(case: ConflictCase) -> list[str]:
    return sorted({str(e.get("origin_node_id")) for e in case.evidence})


def _run_list(args: argparse.Namespace) -> int:
    session = _Session(_config(args))
    try:
        with session.pool.connection() as conn:
            rows = conn.execute("SELECT conflict_id FROM active_conflict ORDER BY opened_at"
                                ).fetchall()
        shown = 0
        print(f"{'conflict':<36} {'state':<15} {'table':<30} {'nodes':<20} evidence")
        for (conflict_id,) in rows:
            case = session.apps.conflicts.get_case(uuid.UUID(str(conflict_id)))
            table = f"{case.database}.{case.table}"
            if ((args.state and case.state.value != args.state.upper())
                    or (args.node and args.node not in _nodes(case))
                    or (args.table and args.table != table)):
                continue
            print(f"{case.id!s:<36} {case.state.value:<15} {table:<30}"
                  f" {','.join(_nodes(case)):<20} {len(case.evidence)}")
            shown += 1
            if shown >= args.limit:
                break
        if not shown:
            print("no active conflicts match")
    finally:
        session.close()
    return 0


def _run_show(args: argparse.Namespace) -> int:
    from eventsourcing.application import AggregateNotFoundError

    session = _Session(_config(args))
    try:
        try:
            case = session.apps.conflicts.get_case(_case_id(args.conflict_id))
        except AggregateNotFoundError:
            print("tidesync: no such conflict", file=sys.stderr)
            return 1
        print(json.dumps(_describe(case, args.values), indent=2, default=str))
    finally:
        session.close()
    return 0


def _describe(case: ConflictCase, values: bool) -> dict[str, object]:
    def image(raw: object) -> object:
        if raw is None or values:
            return raw
        return [pair[0] for pair in raw] if isinstance(raw, list) else None

    evidence = []
    for item in case.evidence:
        shown = dict(item)
        for name in ("incoming_before", "incoming_after", "current_row"):
            shown[name] = image(item.get(name))
        evidence.append(shown)
    decision = None if case.decision is None else {
        **case.decision, "decided_value": image(case.decision.get("decided_value"))}
    return {"conflict_id": str(case.id), "state": case.state.value, "version": case.version,
            "rule_id": case.rule_id, "table": f"{case.database}.{case.table}",
            "key_digest": case.key_digest, "lease": case.lease, "manual": case.manual,
            "decision": decision,
            "dispatch": case.dispatch_info or None, "acks": case.acks or None,
            "expiry": case.expiry, "cancellation": case.cancellation, "evidence": evidence}


def _run_decide(args: argparse.Namespace) -> int:
    session = _Session(_config(args))
    try:
        service = session.service()
        conflict_id = _case_id(args.conflict_id)
        replacement = None
        if args.side == "REPLACEMENT":
            entries: list[tuple[str, str | None]] = []
            for item in args.set:
                column, sep, text = item.partition("=")
                if not sep:
                    print(f"tidesync: --set {item[:40]!r} is not COLUMN=TEXT", file=sys.stderr)
                    return 2
                entries.append((column, text))
            entries += [(column, None) for column in args.null]
            replacement = replacement_from_text(service.case(conflict_id), entries)
        outcome = service.decide(Decision(
            conflict_id=conflict_id, side=DecisionSide(args.side), reason=args.reason,
            actor=actor_of(args), replacement=replacement,
            expected_version=args.expected_version))
    except (ConflictRefused, ConflictCommandError) as error:
        print(f"tidesync: refused ({error.code}): {error.message}", file=sys.stderr)
        return 1
    finally:
        session.close()
    print(f"conflict {outcome.conflict_id} {outcome.state} (decision {outcome.decision_id});"
          " `tidesync shore work` applies and dispatches it")
    return 0


def _run_refresh(args: argparse.Namespace) -> int:
    session = _Session(_config(args))
    try:
        outcome = session.service().refresh(_case_id(args.conflict_id), actor_of(args),
                                            args.reason, args.expected_version)
    except (ConflictRefused, ConflictCommandError) as error:
        print(f"tidesync: refused ({error.code}): {error.message}", file=sys.stderr)
        return 1
    finally:
        session.close()
    if outcome.recorded:
        print(f"conflict {outcome.conflict_id} {outcome.state}: the shore's current row is its"
              f" newest evidence (version {outcome.version}); decide it again")
    else:
        print(f"conflict {outcome.conflict_id} {outcome.state}: the evidence already shows the"
              " shore's current row")
    return 0


def _run_cancel(args: argparse.Namespace) -> int:
    session = _Session(_config(args))
    try:
        outcome = session.service().cancel(_case_id(args.conflict_id),
                                           actor_of(args),
                                           args.reason)
    except (ConflictRefused, ConflictCommandError) as error:
        print(f"tidesync: refused ({error.code}): {error.message}", file=sys.stderr)
        return 1
    finally:
        session.close()
    print(f"conflict {outcome.conflict_id} {outcome.state}")
    return 0


def _run_redispatch(args: argparse.Namespace) -> int:
    config = _config(args)
    session = _Session(config)
    downlink = open_downlink(event_store_env(config.event_store),
                             postgres_conninfo(config.event_store))
    try:
        outcome = session.service().redispatch(
            _case_id(args.conflict_id), args.node, actor_of(args),
            args.reason, downlink, expected_version=args.expected_version)
    except (ConflictRefused, ConflictCommandError) as error:
        print(f"tidesync: refused ({error.code}): {error.message}", file=sys.stderr)
        return 1
    except DownlinkUnavailable as error:
        print(f"tidesync: the downlink store is unavailable: {error}", file=sys.stderr)
        return 1
    finally:
        downlink.close()
        session.close()
    print(f"conflict {outcome.conflict_id} {outcome.state}: decision sent to {args.node} again")
    return 0
