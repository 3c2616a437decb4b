"""`tidesync COMMAND` loads only the area that command belongs to, and the table that says
which area adds which command matches what the areas register."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tidesync.entrypoints.cli import COMMAND_MODULES, build_parser, command_module, modules_for


def test_each_area_registers_exactly_the_commands_the_table_names() -> None:
    for name, commands in COMMAND_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        command_module(name).register_commands(sub)
        assert tuple(sub.choices) == commands, name


@pytest.mark.parametrize(("argv", "expected"), [
    (["rules", "list"], ["tidesync.entrypoints.rules_cli"]),
    (["--config", "jobs.toml", "jobs", "list"], ["tidesync.entrypoints.shore_cli"]),
    (["--config=x.toml", "audit", "--help"], ["tidesync.entrypoints.projections_cli"]),
    (["inspect", "debezium"], []),
    (["--help"], list(COMMAND_MODULES)),
    (["no-such-command"], list(COMMAND_MODULES)),
    ([], list(COMMAND_MODULES)),
])
def test_the_parser_loads_the_areas_a_command_needs(argv: list[str],
                                                    expected: list[str]) -> None:
    assert modules_for(argv) == expected


def test_an_unknown_command_is_refused_with_every_command_listed(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser(["no-such-command"]).parse_args(["no-such-command"])
    error = capsys.readouterr().err
    assert "invalid choice" in error
    assert all(command in error for commands in COMMAND_MODULES.values()
               for command in commands)


def _loaded_by(argv: list[str], then: str = "") -> set[str]:
    """The modules a fresh interpreter holds once the parser handled `argv` (and `then` ran)."""
    probe = ("import sys\n"
             "from tidesync.entrypoints.cli import build_parser\n"
             f"args = build_parser({argv!r}).parse_args({argv!r})\n"
             "assert args.handler is not None\n"
             f"{then}\n"
             "print('\\n'.join(sorted(sys.modules)))\n")
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True, timeout=120).stdout.split())


def test_a_rules_command_does_not_load_the_shore_server_or_the_console() -> None:
    loaded = _loaded_by(["rules", "list"])
    assert "tidesync.entrypoints.rules_cli" in loaded
    for heavy in ("tidesync.entrypoints.shore_cli", "tidesync.entrypoints.console_cli",
                  "tidesync.entrypoints.demo", "tidesync.graphql.schema", "strawberry"):
        assert heavy not in loaded


def test_ship_run_loads_neither_the_shore_nor_the_reconciliation_until_asked() -> None:
    # A ship's memory is budgeted: `ship run` builds its client without the shore's database
    # drivers, the console, the capture or SQLAlchemy (the reconciliation loads it when the
    # shore first asks for one).
    loaded = _loaded_by(["ship", "run"],
                        "import tidesync.bootstrap.ship, tidesync.bootstrap.ship_reconcile")
    assert "tidesync.ship.client" in loaded
    for heavy in ("sqlalchemy", "psycopg", "psycopg_pool", "pymysqlreplication", "strawberry",
                  "tidesync.shore.downlink", "tidesync.ship.reconcile",
                  "tidesync.bootstrap.capture", "tidesync.capture.binlog"):
        assert heavy not in loaded, heavy
