"""`tidesync demo` end to end: the embedded default syncs a ship's writes to the shore and the
reconciliation agrees; a second run in the same data directory starts fresh and agrees too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

TIDESYNC = [sys.executable, "-m", "tidesync.cli"]
RECONCILED = re.compile(
    r"^(?P<table>\w+)\s+(?P<ship>\d+)\s+(?P<shore>\d+)\s+(?P<ship_sum>[0-9a-f]{12})\s+"
    r"(?P<shore_sum>[0-9a-f]{12})\s+(?P<match>yes|NO)$", re.MULTILINE)


def run_demo(data_dir: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run(
        [*TIDESYNC, "demo", "--data-dir", str(data_dir), "--port", "0", "--exit-when-synced"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return result, time.monotonic() - began


def test_demo_syncs_the_ship_to_the_shore_and_reconciles(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
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
        for name in ("postgres/PG_VERSION", "ship-business.sqlite", "shore-business.sqlite",
                     "ship-state.sqlite", "capture-position.sqlite", "master.key"):
            assert (data_dir / name).exists(), name
        assert re.search(r"^  console API: http://127\.0\.0\.1:\d+/graphql$", out,
                         re.MULTILINE), out
        assert f"event store: embedded PostgreSQL in {data_dir / 'postgres'}" in out, out
        # The demo's private PostgreSQL server stops with it.
        assert not (data_dir / "postgres" / "postmaster.pid").exists()
        assert "Traceback" not in result.stderr
