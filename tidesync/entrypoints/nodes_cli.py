"""`tidesync nodes …`: register, rotate, revoke, profile (groups and tags), uplink (the limit
its ship takes, §13.1), show and list ship nodes (§17.1, §8.1).

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
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
from tidesync.domain.node import NodeError, NodeLink, NodeProfile
from tidesync.entrypoints.operator import actor_of, add_audit_arguments

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add `nodes register|rotate|revoke|profile|uplink|show|list`."""
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

    uplink = node_commands.add_parser(
        "uplink", help="set the node's uplink limit, which its ship takes with its config")
    uplink.add_argument("node_id", metavar="NODE")
    uplink.add_argument("--rate", type=byte_size, required=True, metavar="BYTES",
                        help="compressed bytes per second on the wire, e.g. 131072 or 128KiB"
                             " (0: none; the ship's own [ship] limit, if any, holds)")
    uplink.add_argument("--burst", type=byte_size, default=0, metavar="BYTES",
                        help="bytes the ship may write ahead of the rate (default: an eighth of"
                             " a second of it, at least 16KiB)")
    add_audit_arguments(uplink, default_reason=None)
    uplink.set_defaults(handler=_run_uplink)

    show = node_commands.add_parser(
        "show", help="show one node: status, keys, groups, tags, uplink limit")
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


def _run_uplink(args: argparse.Namespace) -> int:
    def run(service: NodeService, now: dt.datetime) -> None:
        link = service.change_link(args.node_id, NodeLink.of(args.rate, args.burst),
                                   _actor(args), now)
        print(f"node {args.node_id}: uplink {_uplink(link)}; its ship takes it with its next"
              " config (within a heartbeat)")

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
              f"{'GROUPS':<24} {'TAGS':<24} {'UPLINK B/S':>10}  OVERLAP ENDS / REVOKED")
        for s in summaries:
            note = (f"revoked {s.revoked_at.isoformat()} ({s.revoke_reason})" if s.revoked_at
                    else s.credentials_expiring.isoformat() if s.credentials_expiring else "")
            print(f"{s.node_id:<24} {s.status.value:<8} {s.registered_at.isoformat():<32} "
                  f"{s.valid_credentials:>4}  {_names(s.profile.groups):<24} "
                  f"{_names(s.profile.tags):<24} {s.link.uplink_rate or '-':>10}  {note}")

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
        "uplink_rate_bytes_per_sec": summary.link.uplink_rate,
        "uplink_burst_bytes": summary.link.uplink_burst,
    }


def _uplink(link: NodeLink) -> str:
    if not link.limited:
        return "no limit set on the shore"
    return f"{link.uplink_rate} B/s, burst {link.uplink_burst} B"


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024 ** 2, "mib": 1024 ** 2}
_SIZE = re.compile(r"([0-9]{1,12})(b|k|kib|m|mib)?", re.IGNORECASE)


def byte_size(text: str) -> int:
    """A byte count: digits, optionally followed by KiB or MiB (K, M)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text[:32]!r} is not a byte count (e.g. 131072,"
                                         " 128KiB, 1MiB)")
    return int(match[1]) * _UNITS[(match[2] or "").lower()]


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
