"""The `tidesync ship ...` command group: one `ship` parser; each ship subcommand lives in its
own module, which adds itself to the group's subparsers.
"""

from __future__ import annotations

import argparse

from tidesync.entrypoints.capture_cli import add_capture_command
from tidesync.entrypoints.ship_blocked_cli import add_blocked_commands
from tidesync.entrypoints.ship_client_cli import add_client_commands


def register_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ship_commands = ship_subparsers(commands)
    for add in (add_capture_command, add_client_commands, add_blocked_commands):
        add(ship_commands)


def ship_subparsers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The subparsers of the `ship` group, creating the group the first time it is asked for."""
    ship = commands.choices.get("ship")
    if ship is None:
        ship = commands.add_parser("ship", help="the ship side: capture, queue and uplink")
    for action in ship._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    ship_commands = ship.add_subparsers(dest="ship_command", metavar="SUBCOMMAND")
    ship_commands.required = True
    return ship_commands
