"""`python -m benchmarks link --quick` runs end to end and prints its table and ratio line.

Only the shape of the output is checked: timings depend on the machine, so no thresholds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service_policy import give_up

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
RATIO_LINE = re.compile(r"^link ratio=(\d+\.\d+)$")


def test_link_benchmark_prints_every_workload_and_a_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "link", "--quick"],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False,
    )
    if result.returncode != 0 and "ServiceUnavailable:" in result.stderr:
        give_up(result.stderr[result.stderr.rindex("ServiceUnavailable:"):].strip())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "benchmark: link"
    assert any(line.startswith("raw bulk HTTP POST") and line.endswith("KiB/s")
               for line in lines)
    for workload in ("small rows", "large rows", "large rows, uplink limit at the link's rate"):
        assert any(line.startswith(f"{workload}: events accepted") for line in lines)
    assert RATIO_LINE.fullmatch(lines[-1]) is not None, lines[-1]
