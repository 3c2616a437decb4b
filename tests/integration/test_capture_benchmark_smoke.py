"""`python -m benchmarks capture --quick` runs end to end and prints its table and ratio line.

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
RATIO_LINE = re.compile(r"^capture ratio=(\d+\.\d+)$")


def test_capture_benchmark_prints_its_table_and_a_positive_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "capture", "--quick"],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False,
    )
    if result.returncode != 0 and "ServiceUnavailable:" in result.stderr:
        give_up(result.stderr[result.stderr.rindex("ServiceUnavailable:"):].strip())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "benchmark: capture"
    assert any(line.startswith("raw BinLogStreamReader decode") for line in lines)
    assert any(line.startswith("tidesync capture binlog") and line.endswith("row changes/s")
               for line in lines)
    ratio = RATIO_LINE.fullmatch(lines[-1])
    assert ratio is not None, lines[-1]
    assert float(ratio.group(1)) > 0
