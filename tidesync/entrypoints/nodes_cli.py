"""`tidesync nodes …`: register, rotate, revoke, profile (groups and tags), show and list ship
nodes (§17.1, §8.1).

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from tidesync.apps.master_key import MasterKeyError
from tidesync.apps.nodes import Actor, NodeService, NodeSummary
from tidesync.bootstrap.ingress import open_node_service
from tidesync.config import Config, load_config
from tidesync.domain.clock import utc_now
from tidesync.domain.node import NodeError, NodeProfile
from tidesync.entrypoints.operator import actor_of, add_audit_arguments

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add `nodes register|rotate|revoke|profile|show|list`."""
    nodes = commands.add_parser("nodes", help="register, rotate, revoke and list ship nodes")
    node_commands = nodes.add_subparsers(dest="nodes_command", metavar="SUBCOMMAND")
    node_commands.required = True

    register = node_commands.add_parser(
        "register", help="register a node and print its signing secret (shown once)")
    register.add_argument("node_id", metavar="NAME",
                          help="the node id: 1-63 of a-z, 0-9 and '-', starting alphanumeric")
    add_audit_arguments(register, default_reason="register node")
    register.set_defaults(handler=_run_register)

    rotate = node_commands.add_parser(
        "rotate", help="issue a new signing secret; the old one stays valid for the overlap")
    rotate.add_argument("node_id", metavar="NODE")
    rotate.add_argument("--overlap-hours", type=float, default=24.0,
                        help="hours the previous secret stays valid (default: %(default)s)")
    add_audit_arguments(rotate, default_reason="rotate credential")
    rotate.set_defaults(handler=_run_rotate)

    revoke = node_commands.add_parser(
        "revoke", help="refuse the node's requests from now on (its received data stays)")
    revoke.add_argument("node_id", metavar="NODE")
    add_audit_arguments(revoke, default_reason=None)
    revoke.set_defaults(handler=_run_revoke)

    profile = node_commands.add_parser(
        "profile", help="set the groups and tags sync rules select the node by (replaces them)")
    profile.add_argument("node_id", metavar="NODE")
    profile.add_argument("--group", action="append", default=[], metavar="GROUP",
                         help="a group of the node (repeat for more; none: no groups)")
    profile.add_argument("--tag", action="append", default=[], metavar="TAG",
                         help="a tag of the node (repeat for more; none: no tags)")
    add_audit_arguments(profile, default_reason=None)
    profile.set_defaults(handler=_run_profile)

    show = node_commands.add_parser("show", help="show one node: status, keys, groups, tags")
    show.add_argument("node_id", metavar="NODE")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_run_show)

    listing = node_commands.add_parser("list", help="list registered nodes")
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    listing.set_defaults(handler=_run_list)


# ----------------------------------------------------------------------------- handlers


def _run_register(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        issued = service.register(args.node_id, _actor(args), now)
        print(f"node: {issued.node_id}")
        print(f"secret: {issued.text}")
        print("The secret is shown only now: put it into the ship's configuration.",
              file=sys.stderr)

    return _with_service(args, run, needs_key=True)


def _run_rotate(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        if args.overlap_hours < 0:
            raise ValueError("--overlap-hours cannot be negative")
        overlap = dt.timedelta(hours=args.overlap_hours)
        issued = service.rotate(args.node_id, overlap, _actor(args), now)
        print(f"node: {issued.node_id}")
        print(f"secret: {issued.text}")
        print(f"previous secrets stay valid until {(now + overlap).isoformat()}",
              file=sys.stderr)

    return _with_service(args, run, needs_key=True)


def _run_revoke(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        service.revoke(args.node_id, _actor(args), now)
        print(f"node {args.node_id} revoked; its received events are kept")

    return _with_service(args, run, needs_key=False)


def _run_profile(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        wanted = NodeProfile.of(args.group, args.tag)
        profile = service.change_profile(args.node_id, wanted, _actor(args), now)
        print(f"node {args.node_id}: groups {_names(profile.groups)}, tags {_names(profile.tags)}")

    return _with_service(args, run, needs_key=False)


def _run_show(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        summary = service.show(args.node_id, now)
        if args.json:
            print(json.dumps(_summary_json(summary)))
            return
        for name, value in _summary_json(summary).items():
            shown = _names(value) if isinstance(value, list) else value
            print(f"{name}: {'' if shown is None else shown}")

    return _with_service(args, run, needs_key=False)


def _run_list(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        summaries = service.list(now)
        if args.json:
            for summary in summaries:
                print(json.dumps(_summary_json(summary)))
            return
        print(f"{'NODE':<24} {'STATUS':<8} {'REGISTERED':<32} {'KEYS':>4}  "
              f"{'GROUPS':<24} {'TAGS':<24} OVERLAP ENDS / REVOKED")
        for s in summaries:
            note = (f"revoked {s.revoked_at.isoformat()} ({s.revoke_reason})" if s.revoked_at
                    else s.credentials_expiring.isoformat() if s.credentials_expiring else "")
            print(f"{s.node_id:<24} {s.status.value:<8} {s.registered_at.isoformat():<32} "
                  f"{s.valid_credentials:>4}  {_names(s.profile.groups):<24} "
                  f"{_names(s.profile.tags):<24} {note}")

    return _with_service(args, run, needs_key=False)


def _summary_json(summary: NodeSummary) -> dict[str, object]:
    def text(moment: dt.datetime | None) -> str | None:
        return None if moment is None else moment.isoformat()

    return {
        "node_id": summary.node_id, "status": summary.status.value,
        "registered_at": text(summary.registered_at),
        "valid_credentials": summary.valid_credentials,
        "credentials_expiring": text(summary.credentials_expiring),
        "revoked_at": text(summary.revoked_at), "revoke_reason": summary.revoke_reason,
        "groups": sorted(summary.profile.groups), "tags": sorted(summary.profile.tags),
    }


def _names(names: Iterable[str]) -> str:
    return ",".join(sorted(names)) or "-"


# ----------------------------------------------------------------------------- plumbing


def _actor(args: argparse.Namespace) -> Actor:
    return Actor(actor_of(args), args.reason, uuid.uuid4().hex)


def _with_service(args: argparse.Namespace,
                  run: Callable[[NodeService, dt.datetime], None], needs_key: bool) -> int:
    """Run a node command; expected failures print one line and exit 1."""
    from eventsourcing.persistence import PersistenceError

    config = load_config(args.config)
    try:
        with _service(config, needs_key) as service:
            run(service, utc_now())
    except (NodeError, MasterKeyError, ValueError) as error:
        print(f"tidesync nodes: {error}", file=sys.stderr)
        return 1
    except PersistenceError as error:
        print(f"tidesync nodes: event store unavailable ({type(error).__name__})",
              file=sys.stderr)
        return 1
    return 0


def _service(config: Config, needs_key: bool) -> AbstractContextManager[NodeService]:
    return open_node_service(config, sealing=needs_key)
