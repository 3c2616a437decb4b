"""The `tidesync` command: its help, config commands and the embedded-default demo."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tidesync.entrypoints.cli import main

TIDESYNC = [sys.executable, "-m", "tidesync"]


def test_help_lists_the_subcommands():
    out = subprocess.run([*TIDESYNC, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("demo", "shore", "config", "inspect"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command


def test_config_show_masks_secrets(capsys, monkeypatch):
    monkeypatch.setenv("TIDESYNC_EVENT_STORE__POSTGRES_PASSWORD", "hunter2")
    assert main(["config", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["event_store"]["postgres_password"] == "***"


def test_bad_configuration_is_an_error_not_a_traceback(capsys, monkeypatch):
    monkeypatch.setenv("TIDESYNC_SHORE__LISTEN_PORT", "-5")
    assert main(["config", "check"]) == 2
    err = capsys.readouterr().err
    assert "shore.listen_port" in err
    assert "Traceback" not in err


def test_demo_options(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    for option in ("--data-dir", "--port", "--duration", "--exit-when-synced"):
        assert option in out


@pytest.mark.parametrize("argv", [["shore"], ["inspect"], []])
def test_incomplete_commands_print_usage(argv):
    result = subprocess.run([*TIDESYNC, *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage:" in result.stderr
