"""`tidesync ship blocked list|expire|confirm-origin`: the operator's view and disposition of
BLOCKED records.

A blocked record holds its partition's checkpoint and the later records of its queue key until
someone decides. `expire` approves that a one-way rule's record (or one the normalizer could
not read) is never delivered (EXPIRED_APPROVED, §7.6); `confirm-origin` states that a platform
write of unproven origin is the shore's (TERMINAL, as if proven). Either way the records of its
key that waited behind it are uploaded by the next `ship run`. Both need `ship run` stopped
(they take the state store's lock) and are recorded with actor and reason.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tidesync.config import load_config
from tidesync.ship.run_lock import StateInUse, exclusive
from tidesync.ship.state import DispositionRefused, SQLiteShipState, StateStoreError


def add_blocked_commands(
    ship_commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    blocked = ship_commands.add_parser(
        "blocked", help="list blocked records, or approve that one is never delivered")
    actions = blocked.add_subparsers(dest="blocked_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="blocked records and the operator actions taken")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.set_defaults(handler=_list)
    expire = actions.add_parser(
        "expire", help="approve that a one-way rule's blocked record is never uploaded; the"
                       " records of its key behind it go on (stop `ship run` first)")
    confirm = actions.add_parser(
        "confirm-origin", help="confirm that an ORIGIN_UNPROVEN record is the shore's write"
                               " (not uploaded); the records of its key behind it go on")
    for action, handler in ((expire, _expire), (confirm, _confirm_origin)):
        action.add_argument("--topic", required=True)
        action.add_argument("--partition", type=int, required=True)
        action.add_argument("--offset", type=int, required=True)
        action.add_argument("--reason", required=True, help="why (recorded)")
        action.add_argument("--actor", required=True, help="who decides (recorded)")
        action.set_defaults(handler=handler)


def _list(args: argparse.Namespace) -> int:
    ship = load_config(args.config).ship
    if not Path(ship.state_path).exists():
        print(f"tidesync: no ship state at {ship.state_path}", file=sys.stderr)
        return 1
    limit = max(1, min(args.limit, 10_000))
    try:
        state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id, read_only=True)
        try:
            report: dict[str, Any] = {
                "blocked_reasons": dict(state.blocked_reasons()),
                "blocked": [{"topic": r.topic, "partition": r.partition, "offset": r.offset,
                             "replay_epoch": r.replay_epoch, "rule": r.rule_id,
                             "reason": r.reason,
                             "detail": r.detail, "event_id": str(r.event_id)}
                            for r in state.blocked_records(limit)],
            }
            try:
                report["operator_actions"] = state.operator_actions(limit)
            except sqlite3.OperationalError:  # opened read-only: a file older than the table
                report["operator_actions"] = []
        finally:
            state.close()
    except StateStoreError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


def _expire(args: argparse.Namespace) -> int:
    return _dispose(args, "expire")


def _confirm_origin(args: argparse.Namespace) -> int:
    return _dispose(args, "confirm_origin")


def _dispose(args: argparse.Namespace, how: str) -> int:
    ship = load_config(args.config).ship
    if not Path(ship.state_path).exists():
        print(f"tidesync: no ship state at {ship.state_path}", file=sys.stderr)
        return 1
    position = (args.topic, args.partition, args.offset)
    try:
        with exclusive(ship.state_path, f"ship blocked {how.replace('_', '-')}"):
            state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id)
            try:
                if how == "expire":
                    done = state.expire_blocked(*position, actor=args.actor, reason=args.reason,
                                                two_way_rules=ship.two_way_rules())
                else:
                    done = state.confirm_origin(*position, actor=args.actor, reason=args.reason)
            finally:
                state.close()
    except StateInUse as error:
        print(f"tidesync: {error}; stop `ship run` first", file=sys.stderr)
        return 1
    except DispositionRefused as error:
        print(f"tidesync: refused ({error.code}): {error}", file=sys.stderr)
        return 1
    except StateStoreError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1
    record = done.record
    print(json.dumps({
        "expired" if how == "expire" else "confirmed": {
            "topic": record.topic, "partition": record.partition, "offset": record.offset,
            "reason": record.reason, "event_id": str(record.event_id)},
        "released_behind_it": done.released,
        "still_held_at_offset": done.still_held_at,
    }, indent=2))
    return 0
