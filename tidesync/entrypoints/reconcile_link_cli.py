"""`tidesync reconcile link|status|show|repair`: reconciliation over the link, run on the shore.

`link` starts an exchange with a ship as downlink commands (audited: actor and reason) and can
wait for it, carrying it forward itself; `show` lists the consistency sentinel (the last
exchange of every node and subject); `repair` sends the differing rows of an exchange.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import TYPE_CHECKING

from tidesync.bootstrap.reconcile import reconcile_link
from tidesync.bootstrap.rules import open_rule_releases
from tidesync.config import Config, load_config
from tidesync.domain.errors import TidesyncError
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.table_names import bad_table_names
from tidesync.entrypoints.operator import actor_of, add_audit_arguments
from tidesync.shore.reconcile_link import ExchangeRow, ReconcileLink, ReconcileState, Subject
from tidesync.shore.reconcile_repair import repair, rule_subject, table_subject

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

_POLL_SECONDS = 1.0
_EXIT_CODES = {ReconcileState.EQUAL: 0, ReconcileState.DIFFERENT: 3}
"""As `reconcile answer`: 0 equal, 3 differing keys; 1 failed or timed out."""


def register_link_commands(subcommands: Commands) -> None:
    link = subcommands.add_parser(
        "link", help="compare a table or rule with a ship over the link (on the shore)",
        description="Start a reconciliation with --node as downlink commands; the ship"
                    " answers each one. `tidesync shore work` carries it forward, or --wait.")
    link.add_argument("subject", metavar="RULE|DB.TABLE",
                      help="a released rule's id, or a table (the same name on both sides)")
    link.add_argument("--node", required=True, help="the ship to compare with")
    link.add_argument("--ship-table", default="", metavar="DB.TABLE",
                      help="the table's name on the ship, when it differs (tables only)")
    link.add_argument("--wait", action="store_true",
                      help="wait until the exchange ends, showing its progress")
    link.add_argument("--timeout", type=float, default=0.0,
                      help="with --wait: give up waiting after this many seconds (0: never)")
    add_audit_arguments(link, "operator reconciliation", "starts it")
    link.set_defaults(handler=_run_link)

    status = subcommands.add_parser("status", help="one exchange over the link")
    status.add_argument("exchange", metavar="EXCHANGE_ID")
    status.add_argument("--wait", action="store_true", help="until it ends")
    status.set_defaults(handler=_run_status)

    repair_ = subcommands.add_parser(
        "repair", help="send the rows an exchange found different (keys the ship holds:"
                       " a snapshot on the ship; keys only the shore holds: from the shore)")
    repair_.add_argument("exchange", metavar="EXCHANGE_ID")
    add_audit_arguments(repair_, None, "repairs")
    repair_.set_defaults(handler=_run_repair)


def add_show_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument("--node", default=None, help="only this ship")


def run_show_sentinel(args: argparse.Namespace) -> int:
    """The consistency sentinel: the last exchange over the link of each node and subject."""
    with reconcile_link(load_config(args.config)) as link:
        rows = link.store.sentinel(args.node)
    if not rows:
        print("no reconciliation over the link has started yet")
    for row in rows:
        print(describe(row))
    return 0


def describe(row: ExchangeRow) -> str:
    ended = "running" if row.ended_at is None else (
        f"ended {row.ended_at.isoformat()} after {row.seconds or 0:.0f} s")
    differing = "" if row.differing_count is None else f", {row.differing_count} differing"
    failed = f" ({row.error})" if row.error else ""
    repaired = "" if row.repaired_at is None else ", repaired"
    return (f"{row.node_id} {row.subject}: {row.state}{failed}{differing} of"
            f" {row.rows_compared} rows, {row.messages} messages, {row.link_bytes} bytes;"
            f" {ended}{repaired} [{row.exchange_id}]")


def _run_link(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        subject = _subject(config, args.subject, args.ship_table)
        with reconcile_link(config) as link:
            exchange_id = link.start(args.node, subject, actor_of(args), args.reason)
            print(f"reconciliation {exchange_id} of {subject.name} with {args.node} started")
            if not args.wait:
                return 0
            return _wait(link, exchange_id, args.timeout)
    except TidesyncError as error:
        print(f"tidesync: cannot reconcile {args.subject}: {error}", file=sys.stderr)
        return 1


def _subject(config: Config, text: str, ship_table: str) -> Subject:
    if "." in text:
        problems = bad_table_names("table", [text, *([ship_table] if ship_table else [])])
        if problems:
            raise SystemExit(f"tidesync: {problems[0]}")
        return table_subject(text, ship_table)
    releases = open_rule_releases(config)
    try:
        for rule, _ in releases.offered():
            if rule.rule_id == text:
                return rule_subject(rule)
    finally:
        releases.close()
    raise SystemExit(f"tidesync: no released rule {text!r} (or name a table as DB.TABLE)")


def _offered_rules(config: Config) -> list[SyncRule]:
    releases = open_rule_releases(config)
    try:
        return [rule for rule, _ in releases.offered()]
    finally:
        releases.close()


def _wait(link: ReconcileLink, exchange_id: uuid.UUID, timeout: float) -> int:
    """Carry the exchange forward here too (the worker may not run) until it ends."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    shown = ""
    while True:
        link.advance()
        row = link.store.exchange(exchange_id)
        assert row is not None
        line = describe(row)
        if line != shown:
            print(line, flush=True)
            shown = line
        if row.state != ReconcileState.RUNNING:
            return _EXIT_CODES.get(ReconcileState(row.state), 1)
        if deadline is not None and time.monotonic() > deadline:
            print("tidesync: still running; `tidesync reconcile status` shows it later",
                  file=sys.stderr)
            return 4
        time.sleep(_POLL_SECONDS)


def _run_status(args: argparse.Namespace) -> int:
    exchange_id = _exchange_id(args.exchange)
    with reconcile_link(load_config(args.config)) as link:
        if args.wait:
            return _wait(link, exchange_id, 0)
        row = link.store.exchange(exchange_id)
    if row is None:
        print(f"tidesync: no exchange {exchange_id}", file=sys.stderr)
        return 1
    print(describe(row))
    return 0


def _run_repair(args: argparse.Namespace) -> int:
    exchange_id = _exchange_id(args.exchange)
    config = load_config(args.config)
    try:
        with reconcile_link(config) as link:
            done = repair(link, exchange_id, actor_of(args), args.reason,
                          config.target.node_id or "shore", _offered_rules(config))
    except TidesyncError as error:
        print(f"tidesync: cannot repair {exchange_id}: {error}", file=sys.stderr)
        return 1
    print(f"repair of {exchange_id} sent: {done.snapshot_keys} keys for the ship to send as"
          f" snapshot records, {done.row_changes} rows from the shore; reconcile again to"
          " check")
    return 0


def _exchange_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise SystemExit(f"tidesync: {text!r} is not an exchange id") from None
