"""The `tidesync` command: its help, config commands and the embedded-default demo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tidesync.cli import main

TIDESYNC = [sys.executable, "-m", "tidesync.cli"]


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


def test_demo_serves_the_shore_on_sqlite_and_says_where(tmp_path: Path):
    """`tidesync demo` starts the shore on SQLite and prints a URL that answers /healthz."""
    process = subprocess.Popen(
        [*TIDESYNC, "demo", "--data-dir", str(tmp_path / "demo"), "--port", "0",
         "--duration", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        match = re.match(r"tidesync shore listening on (http://\S+)", first)
        assert match, first + (process.stderr.read() if process.poll() is not None else "")
        health = json.loads(urllib.request.urlopen(match.group(1) + "/healthz", timeout=10).read())
        assert health["status"] == "HEALTHY"
        assert (tmp_path / "demo" / "shore-events.sqlite").exists()
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("argv", [["shore"], ["inspect"], []])
def test_incomplete_commands_print_usage(argv):
    result = subprocess.run([*TIDESYNC, *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage:" in result.stderr
