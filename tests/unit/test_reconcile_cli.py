"""`tidesync reconcile` between two SQLite files: messages go back and forth until the answer
says the exchange has ended; the differing keys are listed (keys only) and the result kept."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from tidesync.entrypoints.cli import main as cli_main
from tidesync.target.backfill import BackfillOptions
from tidesync.target.sqlite_schema import enable_sqlite_table

SECRET = "do-not-print"


def _database(path: Path, rows: list[tuple[int, str]]) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE crew (id INTEGER PRIMARY KEY, name TEXT)")
        connection.execute("BEGIN")
        connection.executemany("INSERT INTO crew VALUES (?, ?)", rows)
        connection.execute("COMMIT")
        enable_sqlite_table(connection, "crew", "n",
                            backfill=BackfillOptions(revision_key=b"x" * 32))


def test_two_sides_exchange_files_until_the_differing_keys_are_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    rows = [(n, f"sailor {n}") for n in range(3_000)]
    ship, shore = tmp_path / "ship.sqlite", tmp_path / "shore.sqlite"
    _database(ship, [*rows, (5_000, SECRET)])
    _database(shore, [(n, name + (" (changed)" if n in (10, 2_500) else ""))
                      for n, name in rows if n != 77])

    assert cli_main(["reconcile", "start", "crew", "--sqlite", str(shore),
                     "--out", str(tmp_path / "m1.zst"), "--rule", "crew"]) == 0
    sides = [ship, shore]
    status, number = 0, 1
    while True:
        here = sides[(number - 1) % 2]
        status = cli_main(["reconcile", "answer", str(tmp_path / f"m{number}.zst"),
                           "--sqlite", str(here), "--out", str(tmp_path / f"m{number + 1}.zst")])
        number += 1
        out = capsys.readouterr().out
        if "differing keys in" in out:
            break
        assert status == 0 and number < 20
    assert status == 3 and "rule:crew: 4 differing keys in 2999 rows" in out
    finished_on = sides[(number - 2) % 2]
    other = sides[(number - 1) % 2]

    assert cli_main(["reconcile", "keys", str(tmp_path / f"m{number}.zst")]) == 0
    listed = capsys.readouterr().out
    assert [json.loads(line) for line in listed.splitlines()] == [[10], [77], [2500], [5000]]
    assert SECRET not in out + listed

    assert cli_main(["reconcile", "show", "--sqlite", str(finished_on)]) == 0
    assert "rule:crew: 4 differing of 2999 rows" in capsys.readouterr().out
    # The last message tells the other side the result as well.
    assert cli_main(["reconcile", "answer", str(tmp_path / f"m{number}.zst"), "--sqlite",
                     str(other), "--out", str(tmp_path / "final.json")]) == 3
    assert cli_main(["reconcile", "show", "--sqlite", str(other)]) == 0
    assert "rule:crew: 4 differing" in capsys.readouterr().out


def test_equal_tables_end_after_one_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    rows = [(n, f"sailor {n}") for n in range(2_000)]
    ship, shore = tmp_path / "ship.sqlite", tmp_path / "shore.sqlite"
    _database(ship, rows)
    _database(shore, rows)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert cli_main(["reconcile", "start", "main.crew", "--sqlite", str(shore),
                     "--out", str(first)]) == 0
    assert cli_main(["reconcile", "answer", str(first), "--sqlite", str(ship),
                     "--out", str(second)]) == 0
    assert "table:main.crew: 0 differing keys in 2000 rows" in capsys.readouterr().out
    assert first.stat().st_size + second.stat().st_size < 1_000


def test_a_bad_message_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    _database(tmp_path / "x.sqlite", [])
    assert cli_main(["reconcile", "answer", str(bad), "--sqlite", str(tmp_path / "x.sqlite"),
                     "--out", str(tmp_path / "o.json")]) == 1
    assert "not a tidesync-reconcile/1 message" in capsys.readouterr().err
