"""The one command-line entry point, `tidesync`, and its subcommands (one module per area,
each with `register_commands(commands)`).

A command loads only its own area's module: `tidesync rules list` does not import the shore's
server, the console's schema or the demo, which would triple its start-up time. `tidesync
--help` (or a command it does not know) loads every area to list them all.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from tidesync.config import Config, ConfigError, load_config
from tidesync.entrypoints.inspect_cli import add_inspect_debezium_arguments

if TYPE_CHECKING:
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

COMMAND_MODULES = {
    "tidesync.entrypoints.shore_cli": ("shore", "jobs"),
    "tidesync.entrypoints.conflicts_cli": ("conflicts",),
    "tidesync.entrypoints.nodes_cli": ("nodes",),
    "tidesync.entrypoints.rules_cli": ("rules",),
    "tidesync.entrypoints.target_cli": ("target",),
    "tidesync.entrypoints.reconcile_cli": ("reconcile",),
    "tidesync.entrypoints.replay_cli": ("replay",),
    "tidesync.entrypoints.snapshot_cli": ("snapshot",),
    "tidesync.entrypoints.ship_cli": ("ship",),
    "tidesync.entrypoints.projections_cli": ("projections", "audit"),
    "tidesync.entrypoints.console_cli": ("users", "console"),
}
"""The modules that add subcommands, in the order `tidesync --help` lists them, and the
top-level commands each adds (a unit test holds this to what the modules register)."""
DEMO_MODULE = "tidesync.entrypoints.demo"
STORE_UNAVAILABLE = 75
"""Exit status when the event store cannot take a connection now (EX_TEMPFAIL: try again)."""


def command_module(name: str) -> ModuleType:
    """The area module `name` (a key of COMMAND_MODULES), imported on first use."""
    return importlib.import_module(name)


def modules_for(argv: Sequence[str]) -> list[str]:
    """The area modules the parser needs for `argv`: the command's own, or every one."""
    command = _command_word(argv)
    for name, commands in COMMAND_MODULES.items():
        if command in commands:
            return [name]
    if command in ("demo", "config", "inspect"):
        return []
    return list(COMMAND_MODULES)


def _command_word(argv: Sequence[str]) -> str | None:
    """The first word of `argv` that is not a global option or its value."""
    words = iter(argv)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return word
        elif not word.startswith("--config="):
            return None  # --help and the like: every command is listed
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the areas that command needs (None: every area)."""
    parser = argparse.ArgumentParser(
        prog="tidesync", description="Keeps ship and shore MySQL databases in sync.",
    )
    parser.add_argument("--config", metavar="FILE",
                        help="TOML configuration file (default: $TIDESYNC_CONFIG)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    _add_demo(commands)
    _add_config(commands)
    _add_inspect(commands)
    for name in (COMMAND_MODULES if argv is None else modules_for(argv)):
        command_module(name).register_commands(commands)
    return parser


def _add_demo(commands: _Commands) -> None:
    demo = commands.add_parser(
        "demo", help="run tidesync both ways on its embedded default (private PostgreSQL,"
                " SQLite business databases, local broker)",
    )
    demo.add_argument("--data-dir", default="tidesync-demo",
                      help="where the embedded default keeps its files (default: %(default)s)")
    demo.add_argument("--port", type=int, default=8470,
                      help="shore listen port, 0 for any free port (default: %(default)s)")
    demo.add_argument("--duration", type=float, default=None,
                      help="stop after this many seconds (default: run until Ctrl-C)")
    demo.add_argument("--exit-when-synced", action="store_true",
                      help="stop once ship and shore agree and the two conflicts are shown")
    demo.add_argument("--shore-url", default=None,
                      help="where the demo's ship sends (e.g. a link simulator in front of the"
                           " demo's shore; default: [ship] shore_url when set, else the shore)")
    demo.set_defaults(handler=_run_demo)


def _add_config(commands: _Commands) -> None:
    config = commands.add_parser("config", help="show or check the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    config_commands.required = True
    show = config_commands.add_parser("show", help="print the effective configuration")
    show.set_defaults(handler=_run_config_show)
    check = config_commands.add_parser("check", help="validate the configuration")
    check.set_defaults(handler=_run_config_check)


def _add_inspect(commands: _Commands) -> None:
    inspect = commands.add_parser("inspect", help="explain how tidesync reads an input")
    kinds = inspect.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True
    debezium = kinds.add_parser(
        "debezium", help="normalize one Debezium MySQL record and print the outcome as JSON",
    )
    add_inspect_debezium_arguments(debezium)


def _load(args: argparse.Namespace) -> Config:
    return load_config(args.config)


def _run_config_show(args: argparse.Namespace) -> int:
    print(json.dumps(_load(args).redacted(), indent=2))
    return 0


def _run_config_check(args: argparse.Namespace) -> int:
    _load(args)
    print("configuration is valid")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    """The embedded default: everything local, state under one data directory."""
    config = _load(args)
    demo = importlib.import_module(DEMO_MODULE)
    result: int = demo.main_entry(args, config)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    try:
        result: int = args.handler(args)
    except ConfigError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        problem = _store_problem(error)
        if problem is None:
            raise
        print(f"tidesync: the event store's PostgreSQL is unavailable ({problem});"
              " try again later", file=sys.stderr)
        return STORE_UNAVAILABLE
    return result


def _store_problem(error: Exception) -> str | None:
    """Why the event store was unavailable, when `error` says it was. Only a command that
    loaded the store's wiring can have failed on it, so a ship command never loads the
    store's database drivers for this."""
    store = sys.modules.get("tidesync.bootstrap.event_store")
    if store is None or not isinstance(error, store.STORE_ERRORS):
        return None
    problem: str = store.store_problem(error)
    return problem


if __name__ == "__main__":
    sys.exit(main())
