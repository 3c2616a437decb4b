"""The `tidesync ship ...` command group: one `ship` parser, its subcommands added by hooks.

Each ship subcommand lives in its own module and is added here through `SHIP_COMMAND_HOOKS`.
"""

from __future__ import annotations

import argparse
import importlib

SHIP_COMMAND_HOOKS = (
    "tidesync.capture.commands:add_capture_command",
    "tidesync.ship.client_commands:add_client_commands",
    "tidesync.ship.blocked_commands:add_blocked_commands",
)
"""`module:function` pairs; each function takes the `ship` subparsers and adds its commands.

Add a line here for every new ship subcommand module (the function is imported lazily)."""


def register_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ship_commands = ship_subparsers(commands)
    for hook in SHIP_COMMAND_HOOKS:
        module_name, _, function_name = hook.partition(":")
        getattr(importlib.import_module(module_name), function_name)(ship_commands)


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
