"""The benchmark harness: a report that collects table rows and one ratio, and a timer.

Every benchmark measures its own path and a raw baseline in the same process, because the
machine is shared and absolute times drift; only the ratio is comparable across runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Report:
    """Rows of (label, value, unit) printed as a table, then `NAME ratio=R` as the last line."""

    name: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    ratio: float | None = None
    ratio_meaning: str = ""

    def add(self, label: str, value: float | int | str, unit: str = "") -> None:
        text = f"{value:,.2f}" if isinstance(value, float) else (
            f"{value:,}" if isinstance(value, int) else value
        )
        self.rows.append((label, text, unit))

    def set_ratio(self, ratio: float, meaning: str) -> None:
        self.ratio, self.ratio_meaning = ratio, meaning

    def render(self) -> str:
        width = max([len(label) for label, _, _ in self.rows] + [10])
        vwidth = max([len(value) for _, value, _ in self.rows] + [5])
        lines = [f"benchmark: {self.name}", "-" * (width + vwidth + 12)]
        lines += [f"{label:<{width}}  {value:>{vwidth}}  {unit}"
                  for label, value, unit in self.rows]
        if self.ratio_meaning:
            lines.append(f"ratio = {self.ratio_meaning}")
        lines.append(f"{self.name} ratio={self.ratio:.3f}" if self.ratio is not None
                     else f"{self.name} ratio=n/a")
        return "\n".join(lines)


@dataclass
class Timing:
    seconds: float = 0.0


@contextmanager
def timed() -> Iterator[Timing]:
    """Wall-clock time of the block (perf_counter)."""
    timing = Timing()
    start = time.perf_counter()
    try:
        yield timing
    finally:
        timing.seconds = time.perf_counter() - start


def best_of(repeats: int, action: Callable[[], float]) -> float:
    """Run `action` (which returns a rate) several times and keep the best, damping noise."""
    return max(action() for _ in range(repeats))
