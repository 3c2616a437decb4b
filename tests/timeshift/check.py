"""Fails unless this process and a child process see the wall clock shifted by OFFSET days
and the monotonic clock still real: `python -m tests.timeshift.check +400d`."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time


def main(offset: str) -> int:
    days = int(offset.rstrip("d"))
    real = dt.datetime.fromtimestamp(time.clock_gettime(time.CLOCK_BOOTTIME)
                                      + _boot_time(), dt.UTC)
    seen = dt.datetime.now(dt.UTC)
    child = subprocess.run(["date", "-u", "+%s"], capture_output=True, text=True, check=True)
    child_seen = dt.datetime.fromtimestamp(int(child.stdout), dt.UTC)
    started = time.monotonic()
    time.sleep(0.01)
    slept = time.monotonic() - started
    shift = dt.timedelta(days=days)
    problems = [name for name, moment in (("this process", seen), ("a child process", child_seen))
                if abs(moment - real - shift) > dt.timedelta(hours=1)]
    if not 0.005 < slept < 5:
        problems.append(f"monotonic sleep took {slept:.3f} s")
    if problems:
        print(f"timeshift check failed for {offset}: {', '.join(problems)}", file=sys.stderr)
        return 1
    print(f"wall clock shifted to {seen:%Y-%m-%d} (real {real:%Y-%m-%d})")
    return 0


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
