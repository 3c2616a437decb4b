"""`tidesync shore cdc list|release`: shore CDC partitions held at a record, and letting one
pass (PostgreSQL event store only, as the shore CDC consumer itself)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tidesync.apps.operations import OperationsApplication
from tidesync.bootstrap.event_store import event_store_env
from tidesync.bootstrap.shore import open_pool
from tidesync.config import load_config
from tidesync.domain.clock import utc_now
from tidesync.entrypoints.operator import actor_of
from tidesync.shore.shore_cdc_holds import HoldRefused, ShoreCdcHolds

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def add_cdc_commands(shore_commands: Commands) -> None:
    cdc = shore_commands.add_parser(
        "cdc", help="shore CDC partitions held at a record, and releasing one")
    actions = cdc.add_subparsers(dest="cdc_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="held partitions: position, reason, since")
    listing.set_defaults(handler=_list)
    release = actions.add_parser(
        "release", help="let the held record at a position pass (recorded SKIPPED); the"
                        " running `shore work` reads the partition on within seconds")
    release.add_argument("--topic", required=True)
    release.add_argument("--partition", type=int, required=True)
    release.add_argument("--offset", type=int, required=True)
    release.add_argument("--reason", required=True, help="why (recorded, in the audit view)")
    release.add_argument("--actor", default=None, help="who (default: the OS user)")
    release.set_defaults(handler=_release)


def _list(args: argparse.Namespace) -> int:
    pool = open_pool(load_config(args.config))
    try:
        holds = ShoreCdcHolds(pool).holds()
    finally:
        pool.close()
    print(json.dumps({"holds": [
        {"topic": h.topic, "partition": h.partition, "offset": h.offset,
         "reason": h.reason_code, "event_id": None if h.event_id is None else str(h.event_id),
         "since": h.blocked_at.isoformat()} for h in holds]}, indent=2))
    return 0


def _release(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    pool = open_pool(config)
    operations = OperationsApplication(env=event_store_env(config.event_store))
    try:
        action_id = ShoreCdcHolds(pool).release(
            operations, args.topic, args.partition, args.offset,
            actor=actor_of(args), reason=args.reason,
            now=utc_now())
    except HoldRefused as refused:
        print(f"tidesync: refused ({refused.code}): {refused}", file=sys.stderr)
        return 1
    finally:
        operations.close()
        pool.close()
    print(json.dumps({"released": {"topic": args.topic, "partition": args.partition,
                                   "offset": args.offset},
                      "operator_action": str(action_id)}, indent=2))
    return 0
