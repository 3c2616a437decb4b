"""`python -m benchmarks normalize --quick` runs and prints its table and a positive ratio.

Only the shape is checked: timings depend on the machine, so there are no thresholds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def test_normalize_benchmark_prints_rates_and_a_ratio():
    result = subprocess.run([sys.executable, "-m", "benchmarks", "normalize", "--quick"],
                            cwd=REPOSITORY, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "benchmark: normalize"
    for mode in ("with schemas", "payload-only"):
        assert any(line.startswith(f"{mode}: normalize") and line.endswith("events/s")
                   for line in lines)
    ratio = re.fullmatch(r"normalize ratio=(\d+\.\d+)", lines[-1])
    assert ratio is not None, lines[-1]
    assert float(ratio.group(1)) > 0
