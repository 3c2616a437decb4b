"""`python -m benchmarks onboard` runs end to end and ends with its ratio line; the digest
exchange finds exactly the rows changed on one side, and for identical sides it costs a few
hundred bytes whatever the table's size.

Sizes depend on the synthetic rows, so the only threshold is the identical case's, which holds
by construction: two digests against a whole table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
RATIO_LINE = re.compile(r"^onboard ratio=(\d+\.\d+)$")


def test_onboard_benchmark_reports_both_cases_and_its_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "onboard", "--rows", "3000", "--different", "2"],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "benchmark: onboard"
    assert any("[2 % different] differing rows sent as SNAPSHOT events" in line
               and line.split()[-1] == "60" for line in lines), lines
    assert any("[identical] digest messages / rounds" in line and "2 / 2" in line
               for line in lines)
    ratio = RATIO_LINE.fullmatch(lines[-1])
    assert ratio is not None, lines[-1]
    assert float(ratio.group(1)) <= 0.05
