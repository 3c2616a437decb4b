"""`tidesync ship run` (the uplink client loop) and `tidesync ship status` (its state store).

Both read the `[ship]` section of the configuration; `status` only reads the SQLite file.
`run` holds the state store's lock while it runs (one client per state store).
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tidesync.bootstrap.ship import activation_snapshots, build_client
from tidesync.bootstrap.ship_reconcile import ship_reconciler
from tidesync.config import Config, load_config
from tidesync.ship.heap import settle_startup_heap
from tidesync.ship.rules import rules_report
from tidesync.ship.run_lock import StateInUse, exclusive
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState, StateReason, StateStoreError
from tidesync.ship.state.reporting import ShoreVerdicts
from tidesync.ship.state.rules import SQLiteRules
from tidesync.ship.telemetry import HealthState

SHORE_APPLY = "SHORE_APPLY"
"""The health line `status` derives from the shore's verdicts (not a heartbeat subsystem)."""
REJECTED_ON_SHORE = "REJECTED_ON_SHORE"
_TOP_REASONS = 10


def add_client_commands(
    ship_commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    run = ship_commands.add_parser(
        "run", help="consume the CDC queue, upload to the shore, pull receipts, commit")
    run.add_argument("--until-idle", action="store_true",
                     help="exit once caught up and every event is terminal (exit 0), or when"
                          " nothing more can progress without an operator (exit 3)")
    run.add_argument("--timeout", type=float, default=None,
                     help="give up after this many seconds (exit 4)")
    run.set_defaults(handler=_run)
    status = ship_commands.add_parser(
        "status", help="watermarks, backlog, health and blocked reasons from the state store")
    status.set_defaults(handler=_status)


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = load_config(args.config)
    try:
        with exclusive(config.ship.state_path, "ship run"):
            return _run_client(args, config)
    except StateInUse as error:
        print(f"tidesync: {error}; one `ship run` per state store", file=sys.stderr)
        return 1


def _run_client(args: argparse.Namespace, config: Config) -> int:
    client = build_client(config.ship, ship_target=config.ship_target,
                          activated=activation_snapshots(config))
    if client.downlink is not None:  # the HTTP link, under any dictionary wrapper
        http = getattr(client.link, "link", client.link)
        client.downlink.reconciler = ship_reconciler(config, http)
    if not config.ship_target.enabled:
        logging.getLogger(__name__).info(
            "shore commands are not applied: no [ship_target] configured (downlink off)")
    client.stop_on_signals()
    settle_startup_heap()
    try:
        code = client.run(until_idle=args.until_idle, timeout=args.timeout)
    finally:
        client.close()
    return int(code)


def _status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    ship = config.ship
    if not Path(ship.state_path).exists():
        print(f"tidesync: no ship state at {ship.state_path}", file=sys.stderr)
        return 1
    try:
        state = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id, read_only=True)
        try:
            print(json.dumps(status_report(state, downlink=config.ship_target.enabled),
                             indent=2))
        finally:
            state.close()
    except StateStoreError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 1
    return 0


def status_report(state: SQLiteShipState, *, downlink: bool = False) -> dict[str, Any]:
    """The state store's view for an operator: no business values, offsets and reasons."""
    partitions = []
    for wm in state.watermarks():
        end = wm.end_offset if wm.end_offset is not None else wm.read_offset + 1
        partitions.append({
            "topic": wm.topic, "partition": wm.partition, "replay_epoch": wm.replay_epoch,
            "read_offset": _offset(wm.read_offset), "received_offset": _offset(wm.received_offset),
            "terminal_offset": _offset(wm.terminal_offset), "committed_offset": wm.committed_offset,
            "end_offset": end, "backlog": max(0, end - wm.commit_offset),
            "next_source_sequence": wm.next_source_sequence,
        })
    verdicts = state.reports.shore_verdicts()
    health = [{"subsystem": h.subsystem, "state": h.state, "reason": h.reason_code,
               "detail": h.detail, "since": h.since.isoformat()} for h in state.health()]
    health += _verdict_health(verdicts)
    return {
        "node_id": state.origin_node_id,
        "consumer_group": state.consumer_group,
        "overall": max((h["state"] for h in health), key=_severity, default="HEALTHY"),
        "health": health,
        "partitions": partitions,
        "events_by_state": state.state_counts(),
        "shore_verdicts": _verdicts_report(verdicts),
        "blocked_reasons": dict(state.blocked_reasons()),
        "blocked": [{"topic": r.topic, "partition": r.partition, "offset": r.offset,
                     "reason": r.reason, "detail": r.detail}
                    for r in state.blocked_records(limit=20)],
        "receipts_cursor": state.cursor(),
        "downlink": _downlink_report(state, downlink),
        "rules": _rules_report(state),
    }


def _verdicts_report(verdicts: ShoreVerdicts) -> dict[str, Any]:
    """Terminal events by result, and how many the shore rejected, by reason (top first)."""
    return {"by_result": verdicts.by_result, "rejected": verdicts.rejected,
            "rejected_by_reason": dict(verdicts.rejected_by_reason[:_TOP_REASONS]),
            "other_rejection_reasons": max(0, len(verdicts.rejected_by_reason) - _TOP_REASONS)}


def _verdict_health(verdicts: ShoreVerdicts) -> list[dict[str, Any]]:
    """While the shore holds events rejected, the ship is not healthy: its data is not all
    on the shore (an operator there fixes the cause and replays them, or skips them)."""
    if not verdicts.rejected:
        return []
    since = verdicts.rejected_since.isoformat() if verdicts.rejected_since else None
    return [{"subsystem": SHORE_APPLY, "state": HealthState.DEGRADED.value,
             "reason": REJECTED_ON_SHORE, "detail": verdicts.summary(), "since": since}]


def _severity(state: str) -> int:
    order = (HealthState.HEALTHY, HealthState.DEGRADED, HealthState.OFFLINE, HealthState.BLOCKED)
    return next((rank for rank, known in enumerate(order) if known == state), len(order))


def _rules_report(state: SQLiteShipState) -> dict[str, Any]:
    try:
        return rules_report(SQLiteRules(state.database))
    except sqlite3.OperationalError:
        return {"note": "state file predates sync rules (run `ship run` once)"}


def _downlink_report(state: SQLiteShipState, enabled: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"apply_enabled": enabled}
    try:
        report.update({
            "commands_cursor": state.cursor(COMMANDS_CURSOR),
            "pending_acks": state.pending_ack_count(),
            # COMMAND_APPLIED, COMMAND_ALREADY_APPLIED, COMMAND_CONFLICT_REPORTED,
            # COMMAND_REJECTED → how many were recorded.
            "commands_by_result": state.command_counts(),
            "origin_unproven": state.blocked_reasons().get(StateReason.ORIGIN_UNPROVEN, 0),
        })
    except sqlite3.OperationalError:
        # `status` opens read-only and migrates nothing: a file older than the downlink.
        report["note"] = "state file predates the downlink tables (run `ship run` once)"
    return report


def _offset(value: int) -> int | None:
    return value if value >= 0 else None
