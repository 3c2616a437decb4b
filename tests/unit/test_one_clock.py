"""Time has one definition and one source per comparison (tidesync.domain.clock)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tidesync

PACKAGE = Path(tidesync.__file__).parent
CLOCK_MODULE = PACKAGE / "domain" / "clock.py"


def _modules() -> list[Path]:
    return [path for path in PACKAGE.rglob("*.py") if not path.name.endswith("_pb2.py")]


def test_one_clock_type_and_one_utc_now() -> None:
    definitions: list[str] = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "utc_now":
                definitions.append(f"{path.relative_to(PACKAGE)}:utc_now")
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            definitions += [f"{path.relative_to(PACKAGE)}:Clock" for target in targets
                            if isinstance(target, ast.Name) and target.id == "Clock"]
    assert sorted(definitions) == ["domain/clock.py:Clock", "domain/clock.py:utc_now"]


def test_the_wall_clock_is_read_only_through_utc_now() -> None:
    reads = re.compile(r"datetime\.now\(|datetime\.utcnow\(|time\.time\(\)")
    found = [f"{path.relative_to(PACKAGE)}:{number}"
             for path in _modules() if path != CLOCK_MODULE
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if reads.search(line)]
    assert found == []


def test_active_conflict_due_times_never_come_from_the_database_clock() -> None:
    """The arbiter compares due_at with its injected clock: nothing may write now() there."""
    writes = re.compile(r"due_at\s*=\s*(now|current_timestamp)\b", re.IGNORECASE)
    sources = [*_modules(), *(PACKAGE / "migrations").rglob("*.sql")]
    found = [str(path) for path in sources if writes.search(path.read_text(encoding="utf-8"))]
    assert found == []
