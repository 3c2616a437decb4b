"""Content-derived revisions: `target enable` on a table that already holds rows gives the same
row the same revision on every node sharing the fleet key, in chunks, and continues after an
interruption."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.domain.content_revision import (
    RevisionKeyError,
    content_revision,
    read_revision_key,
)
from tidesync.entrypoints.cli import main as cli_main
from tidesync.target.backfill import BackfillOptions, RevisionKeyRequired
from tidesync.target.sqlite_schema import enable_sqlite_table

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
DDL = "CREATE TABLE parts (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INT)"


def _database(path: Path, rows: list[tuple[int, str, int | None]]) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute(DDL)
        connection.executemany("INSERT INTO parts (id, name, qty) VALUES (?, ?, ?)", rows)


def _revisions(path: Path) -> dict[int, str]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return dict(connection.execute("SELECT id, _sync_revision FROM parts"))


def _enable(path: Path, node: str, options: BackfillOptions) -> list[str]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        return enable_sqlite_table(connection, "parts", node, backfill=options).actions


ROWS = [(number, f"part {number}", number * 3 if number % 4 else None) for number in range(1, 24)]


def test_identical_rows_on_two_nodes_get_identical_revisions(tmp_path: Path) -> None:
    ship, shore = tmp_path / "ship.sqlite", tmp_path / "shore.sqlite"
    _database(ship, ROWS)
    changed = [(i, name + " (changed)" if i == 7 else name, qty) for i, name, qty in ROWS]
    _database(shore, changed)

    _enable(ship, "ship-1", BackfillOptions(revision_key=KEY, chunk_rows=5))
    _enable(shore, "shore", BackfillOptions(revision_key=KEY, chunk_rows=100))

    on_ship, on_shore = _revisions(ship), _revisions(shore)
    assert {key for key in on_ship if on_ship[key] != on_shore[key]} == {7}
    assert len(set(on_ship.values())) == len(ROWS)  # every row its own revision


def test_another_key_gives_other_revisions(tmp_path: Path) -> None:
    first, second = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    _database(first, ROWS)
    _database(second, ROWS)
    _enable(first, "a", BackfillOptions(revision_key=KEY))
    _enable(second, "b", BackfillOptions(revision_key=OTHER_KEY))
    assert not set(_revisions(first).values()) & set(_revisions(second).values())


class Interrupted(Exception):
    pass


def test_an_interrupted_backfill_continues_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    _database(path, ROWS)
    seen: list[tuple[int, int]] = []

    def stop_after_two_chunks(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        _enable(path, "ship-1", BackfillOptions(revision_key=KEY, chunk_rows=5,
                                                progress=stop_after_two_chunks))
    assert seen == [(5, 23), (10, 23)]
    partial = _revisions(path)
    assert sum(1 for revision in partial.values() if revision) == 10

    resumed: list[tuple[int, int]] = []
    actions = _enable(path, "ship-1", BackfillOptions(
        revision_key=KEY, chunk_rows=5, progress=lambda done, total: resumed.append((done, total))))
    assert resumed == [(5, 13), (10, 13), (13, 13)]
    assert "back-filled 13 rows with content-derived revisions" in actions
    final = _revisions(path)
    assert all(final.values())
    assert {key: final[key] for key in partial if partial[key]} == {
        key: value for key, value in partial.items() if value}

    fresh = tmp_path / "fresh.sqlite"
    _database(fresh, ROWS)
    _enable(fresh, "shore", BackfillOptions(revision_key=KEY))
    assert _revisions(fresh) == final  # the interruption changed nothing


def test_backfill_leaves_business_values_and_local_stamping_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    _database(path, ROWS)
    _enable(path, "ship-1", BackfillOptions(revision_key=KEY, chunk_rows=7))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        assert connection.execute("SELECT id, name, qty FROM parts ORDER BY id").fetchall() == ROWS
        assert connection.execute("SELECT remote_apply FROM _sync_session").fetchone() == (0,)
        before = connection.execute("SELECT _sync_revision FROM parts WHERE id = 3").fetchone()
        connection.execute("UPDATE parts SET qty = 99 WHERE id = 3")
        after = connection.execute(
            "SELECT _sync_revision, _sync_origin FROM parts WHERE id = 3").fetchone()
    assert after[0] != before[0] and after[1] == "ship-1"


def test_rows_without_a_key_are_refused_unless_random_revisions_are_asked_for(
        tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    _database(path, ROWS)
    with pytest.raises(RevisionKeyRequired, match="23 rows without a revision"):
        _enable(path, "ship-1", BackfillOptions(random_allowed=False))
    assert _enable(path, "ship-1", BackfillOptions(random_allowed=True))
    assert all(_revisions(path).values())

    empty = tmp_path / "empty.sqlite"
    _database(empty, [])
    assert _enable(empty, "ship-1", BackfillOptions(random_allowed=False))


def test_cli_makes_a_key_and_enables_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    key_file, path = tmp_path / "fleet.key", tmp_path / "ship.sqlite"
    _database(path, ROWS)
    assert cli_main(["target", "enable", "parts", "--sqlite", str(path),
                     "--node-id", "ship-1"]) == 1
    assert "no fleet revision key" in capsys.readouterr().err
    assert cli_main(["target", "revision-key", str(key_file)]) == 0
    assert cli_main(["target", "revision-key", str(key_file)]) == 1  # never overwritten
    assert key_file.stat().st_mode & 0o077 == 0
    capsys.readouterr()
    assert cli_main(["target", "enable", "parts", "--sqlite", str(path), "--node-id", "ship-1",
                     "--revision-key-file", str(key_file), "--chunk-rows", "10"]) == 0
    captured = capsys.readouterr()
    assert "back-filled 23 rows with content-derived revisions" in captured.out
    assert "back-fill: 10/23 rows" in captured.err and "back-fill: 23/23 rows" in captured.err
    assert "part 1" not in captured.out + captured.err  # no business values shown
    expected = {i: content_revision(read_revision_key(str(key_file)), [("id", i)],
                                    [("name", name), ("qty", qty)]).text
                for i, name, qty in ROWS}
    assert _revisions(path) == expected


def test_a_short_key_file_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short.key"
    short.write_bytes(b"too short\n")
    with pytest.raises(RevisionKeyError, match="at least 32"):
        read_revision_key(str(short))
    with pytest.raises(RevisionKeyError, match="cannot read"):
        read_revision_key(str(tmp_path / "missing.key"))


_VALUES = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.text(max_size=20),
                    st.binary(max_size=10), st.decimals(allow_nan=False, allow_infinity=False),
                    st.datetimes(timezones=st.none()))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), _VALUES, min_size=1, max_size=5),
       st.randoms())
def test_revision_ignores_column_order_and_tells_values_apart(
        business: dict[str, object], shuffler: object) -> None:
    pairs = list(business.items())
    shuffled = pairs[:]
    shuffler.shuffle(shuffled)  # type: ignore[attr-defined]
    key = [("id", 1)]
    assert content_revision(KEY, key, pairs) == content_revision(KEY, key, shuffled)
    name, value = pairs[0]
    different = "x" if value != "x" else "y"
    assert content_revision(KEY, key, pairs) != content_revision(
        KEY, key, [(name, different), *pairs[1:]])
    assert content_revision(KEY, key, pairs) != content_revision(KEY, [("id", 2)], pairs)


def test_a_naive_datetime_is_taken_as_utc() -> None:
    naive = dt.datetime(2020, 5, 1, 12, 0)
    assert content_revision(KEY, [("id", 1)], [("at", naive)]) == content_revision(
        KEY, [("id", 1)], [("at", naive.replace(tzinfo=dt.UTC))])
    assert content_revision(KEY, [("id", 1)], [("d", Decimal("1.0"))]) != content_revision(
        KEY, [("id", 1)], [("d", Decimal("1.00"))])
