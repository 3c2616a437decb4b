"""The distribution as a user installs it: the wheel carries its migrations, and installed (not
editable) into a fresh virtualenv, away from the source tree, `tidesync demo` runs to the end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TIDESYNC_", "PYTHON"))}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_installed_wheel_runs_the_demo(tmp_path: Path) -> None:
    # Built from a copy of what the distribution is made of: setuptools builds in the source
    # tree and would otherwise leave (and later pack) stale files there.
    source = tmp_path / "src"
    shutil.copytree(REPOSITORY / "tidesync", source / "tidesync",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPOSITORY / name, source / name)
    built = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                 str(tmp_path / "dist"), str(source)], cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("tidesync-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tidesync/migrations/postgres/0001_inbox.sql" in names
    assert "tidesync/migrations/ship/0001_state.sql" in names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)

    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = run([str(python), "-m", "pip", "install", "--quiet", "--constraint",
                     str(REPOSITORY / "constraints.txt"), str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr

    demo = run([str(tmp_path / "venv" / "bin" / "tidesync"), "demo", "--data-dir",
                str(tmp_path / "demo"), "--port", "0", "--exit-when-synced"],
               cwd=tmp_path, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    where = run([str(python), "-c", "import tidesync; print(tidesync.__file__)"], cwd=tmp_path)
    assert where.stdout.startswith(str(tmp_path / "venv"))  # not the source tree
    matches = re.findall(r"^(items|orders|notes)\s.*\s(yes|NO)$", demo.stdout, re.MULTILINE)
    assert len(matches) == 6 and {match for _, match in matches} == {"yes"}, demo.stdout
    assert "waits for a person" in demo.stdout
