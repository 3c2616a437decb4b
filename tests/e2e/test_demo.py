"""`tidesync demo` end to end: the embedded default syncs a ship's writes to the shore and the
reconciliation agrees; shore edits reach the ship; two concurrent edits become one conflict
decided by policy and one that a person decides with the command the demo prints; a second run
in the same data directory starts fresh and agrees too."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

TIDESYNC = [sys.executable, "-m", "tidesync"]
RECONCILED = re.compile(
    r"^(?P<table>\w+)\s+(?P<ship>\d+)\s+(?P<shore>\d+)\s+(?P<ship_sum>[0-9a-f]{12})\s+"
    r"(?P<shore_sum>[0-9a-f]{12})\s+(?P<match>yes|NO)$", re.MULTILINE)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """The demo's data directory, outside pytest's temporary root. Run as root, the embedded
    PostgreSQL server runs as a system user of its own that must traverse every parent
    directory; each pytest session that starts on the machine makes its temporary root
    private to root again (0700), and a server starting meanwhile is shut out of its data."""
    parent = Path(tempfile.mkdtemp(prefix="tidesync-demo-test-"))
    try:
        yield parent / "demo"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def run_demo(data_dir: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run(
        [*TIDESYNC, "demo", "--data-dir", str(data_dir), "--port", "0", "--exit-when-synced"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return result, time.monotonic() - began


def test_demo_syncs_the_ship_to_the_shore_and_reconciles(data_dir: Path) -> None:
    for run in (1, 2):
        result, seconds = run_demo(data_dir)
        out = result.stdout
        assert result.returncode == 0, out + result.stderr
        assert seconds < 60
        assert ("cleared" in out) == (run == 2)
        assert "in sync after" in out
        rows = {m["table"]: m for m in RECONCILED.finditer(out)}
        assert set(rows) == {"items", "orders", "notes"}, out
        for row in rows.values():
            assert row["ship"] == row["shore"] and int(row["ship"]) > 0
            assert row["ship_sum"] == row["shore_sum"] and row["match"] == "yes"
        progress = re.findall(r"written (\d+)/(\d+)\s+captured (\d+)\s+uploaded (\d+)"
                              r"\s+applied (\d+)\s+receipts (\d+)", out)
        assert progress, out
        total = int(progress[-1][1])
        assert 200 <= total <= 1000
        assert [int(n) for n in progress[-1]] == [total] * 6
        assert re.search(r"^tidesync shore listening on http://127\.0\.0\.1:\d+$", out,
                         re.MULTILINE), out
        assert re.search(r"^shore → ship: \d+ rows changed on the shore$", out, re.M), out
        assert "shore → ship: the ship has them" in out, out
        assert re.search(r"^conflict [0-9a-f-]{36}: items id=\d+ decided by policy SHORE_WINS",
                         out, re.M), out
        assert re.search(r"^conflict [0-9a-f-]{36}: notes id=\d+ waits for a person", out,
                         re.M), out
        assert re.search(r"^\(left out: notes id=\d+, held by conflict [0-9a-f-]{36}\)$", out,
                         re.M), out
        for name in ("postgres/PG_VERSION", "ship-business.sqlite", "shore-business.sqlite",
                     "ship-state.sqlite", "capture-position.sqlite", "master.key"):
            assert (data_dir / name).exists(), name
        assert re.search(r"^  console API: http://127\.0\.0\.1:\d+/graphql$", out,
                         re.MULTILINE), out
        assert f"event store: embedded PostgreSQL in {data_dir / 'postgres'}" in out, out
        # The demo's private PostgreSQL server stops with it.
        assert not (data_dir / "postgres" / "postmaster.pid").exists()
        assert "Traceback" not in result.stderr


def test_a_person_decides_the_held_conflict_with_the_printed_command(data_dir: Path) -> None:
    demo = subprocess.Popen(
        [*TIDESYNC, "demo", "--data-dir", str(data_dir), "--port", "0", "--duration", "150"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert demo.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while not any("conflicts decide" in line for line in lines):
            line = demo.stdout.readline()
            if not line:  # the demo ended: say why
                demo.wait(timeout=30)
                assert demo.stderr is not None
                raise AssertionError(f"the demo exited with {demo.returncode}:\n"
                                     f"{''.join(lines)}\n{demo.stderr.read()[-4000:]}")
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        command = next(line for line in lines if "conflicts decide" in line).split()
        assert command[:3] == ["tidesync", "--config", str(data_dir / "tidesync.toml")]
        assert command[3:7] == ["conflicts", "decide", command[5], "--side"]
        conflict_id, side = command[5], command[7]
        assert side == "SHORE"
        decided = cli([*command[1:3], "conflicts", "decide", conflict_id, "--side", side,
                       "--reason", "the circular wins"])
        assert decided.returncode == 0, decided.stderr
        assert f"conflict {conflict_id} DECIDED" in decided.stdout

        def state() -> str:
            shown = cli([*command[1:3], "conflicts", "show", conflict_id])
            assert shown.returncode == 0, shown.stderr
            return str(json.loads(shown.stdout)["state"])

        deadline = time.monotonic() + 60
        while state() != "ACKNOWLEDGED":
            assert time.monotonic() < deadline, state()
            time.sleep(0.5)
        key = int(re.search(r"notes id=(\d+) waits", "".join(lines))[1])  # type: ignore[index]
        rows = [sqlite_row(data_dir / name, key)
                for name in ("ship-business.sqlite", "shore-business.sqlite")]
        assert rows[0] == rows[1] and rows[0][1].startswith("shore:")  # the shore's side won
    finally:
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=60)
    assert demo.returncode == 0, err
    assert not (data_dir / "postgres" / "postmaster.pid").exists()


def cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TIDESYNC, *argv], capture_output=True, text=True, timeout=60)


def sqlite_row(path: Path, key: int) -> tuple[object, ...]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT id, body, _sync_revision FROM notes WHERE id = ?",
                         (key,)).fetchone()
    assert row is not None
    return tuple(row)
