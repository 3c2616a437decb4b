"""The one command-line entry point, `tidesync`, and its subcommands (one module per area,
each with `register_commands(commands)`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tidesync.bootstrap.event_store import STORE_ERRORS, store_problem
from tidesync.config import Config, ConfigError, load_config
from tidesync.entrypoints import (
    conflicts_cli,
    console_cli,
    nodes_cli,
    projections_cli,
    reconcile_cli,
    replay_cli,
    rules_cli,
    ship_cli,
    shore_cli,
    snapshot_cli,
    target_cli,
)
from tidesync.entrypoints.demo import main_entry
from tidesync.entrypoints.inspect_cli import add_inspect_debezium_arguments

COMMAND_MODULES = (shore_cli, conflicts_cli, nodes_cli, rules_cli, target_cli, reconcile_cli,
                   replay_cli, snapshot_cli, ship_cli, projections_cli, console_cli)
"""The modules that add subcommands, in the order `tidesync --help` lists them."""
STORE_UNAVAILABLE = 75
"""Exit status when the event store cannot take a connection now (EX_TEMPFAIL: try again)."""


def build_parser() -> argparse.ArgumentParser:
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
    for module in COMMAND_MODULES:
        module.register_commands(commands)
    return parser


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _add_config(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser("config", help="show or check the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    config_commands.required = True
    show = config_commands.add_parser("show", help="print the effective configuration")
    show.set_defaults(handler=_run_config_show)
    check = config_commands.add_parser("check", help="validate the configuration")
    check.set_defaults(handler=_run_config_check)


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    return main_entry(args, config)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
    except ConfigError as error:
        print(f"tidesync: {error}", file=sys.stderr)
        return 2
    except STORE_ERRORS as error:
        print(f"tidesync: the event store's PostgreSQL is unavailable ({store_problem(error)});"
              " try again later", file=sys.stderr)
        return STORE_UNAVAILABLE
    return result


if __name__ == "__main__":
    sys.exit(main())
