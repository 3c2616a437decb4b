"""Key-range digests and reconciliation on SQLite: equal tables cost two small messages, and
the exchange finds exactly the keys that differ (changed, or present on one side only)."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidesync.domain.rules.filter import parse_filter
from tidesync.target import digests, reconciliation
from tidesync.target.backfill import BackfillOptions
from tidesync.target.sqlite_schema import enable_sqlite_table

KEY = b"r" * 32
NOW = dt.datetime.now(dt.UTC)


def _table(path: Path, rows: dict[tuple[int, str], int]) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE stock (site INTEGER, item TEXT, qty INT,"
                           " PRIMARY KEY (site, item))")
        with connection:  # one transaction
            connection.execute("BEGIN")
            connection.executemany("INSERT INTO stock VALUES (?, ?, ?)",
                                   [(site, item, qty) for (site, item), qty in rows.items()])
        enable_sqlite_table(connection, "stock", "n", backfill=BackfillOptions(revision_key=KEY))


@contextlib.contextmanager
def _side(path: Path, row_filter: str | None = None) -> Iterator[
        tuple[sa.Connection, digests.DigestTable]]:
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.NullPool)
    with engine.connect() as connection:
        digests.prepare_connection(connection)
        yield connection, digests.digest_table(
            connection, "stock", row_filter=parse_filter(row_filter) if row_filter else None)
    engine.dispose()


def _rows(count: int) -> dict[tuple[int, str], int]:
    return {(n % 7, f"item-{n:05d}"): n for n in range(count)}


def test_identical_tables_cost_two_small_messages(tmp_path: Path) -> None:
    rows = _rows(5_000)
    _table(tmp_path / "a.sqlite", rows)
    _table(tmp_path / "b.sqlite", rows)
    with _side(tmp_path / "a.sqlite") as a, _side(tmp_path / "b.sqlite") as b:
        result = reconciliation.reconcile_locally(a, b, "table:main.stock", NOW)
    assert result.done and result.differing == () and result.round == 2
    assert result.link_bytes < 1_000


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changed=st.sets(st.integers(0, 1_999), max_size=40),
       only_a=st.sets(st.integers(2_000, 2_099), max_size=10),
       only_b=st.sets(st.integers(0, 1_999), max_size=10),
       fan_out=st.integers(2, 16), leaf_rows=st.integers(1, 40))
def test_the_exchange_finds_exactly_the_differing_keys(
        tmp_path_factory: pytest.TempPathFactory, changed: set[int], only_a: set[int],
        only_b: set[int], fan_out: int, leaf_rows: int) -> None:
    folder = tmp_path_factory.mktemp("r")
    base = _rows(2_000)
    side_a = {key: qty for key, qty in base.items()} | {
        (n % 7, f"item-{n:05d}"): n for n in only_a}
    side_b = {key: qty + (1 if qty in changed else 0) for key, qty in base.items()
              if qty not in only_b}
    _table(folder / "a.sqlite", side_a)
    _table(folder / "b.sqlite", side_b)
    with _side(folder / "a.sqlite") as a, _side(folder / "b.sqlite") as b:
        result = reconciliation.reconcile_locally(a, b, "table:main.stock", NOW,
                                                  fan_out=fan_out, leaf_rows=leaf_rows)
    expected = {(n % 7, f"item-{n:05d}") for n in changed | only_a | only_b}
    assert set(result.differing) == expected
    assert set(result.starter_only) == {(n % 7, f"item-{n:05d}") for n in only_a | only_b}


def test_a_rule_filter_limits_the_rows_compared(tmp_path: Path) -> None:
    rows = _rows(300)
    _table(tmp_path / "a.sqlite", rows)
    _table(tmp_path / "b.sqlite", {key: qty + (1 if key[0] == 3 else 0)
                                   for key, qty in rows.items()})
    with _side(tmp_path / "a.sqlite", "site <> 3") as a, \
            _side(tmp_path / "b.sqlite", "site <> 3") as b:
        assert reconciliation.reconcile_locally(a, b, "rule:x", NOW).differing == ()
    with _side(tmp_path / "a.sqlite", "site = 3") as a, \
            _side(tmp_path / "b.sqlite", "site = 3") as b:
        found = reconciliation.reconcile_locally(a, b, "rule:y", NOW).differing
    assert {key[0] for key in found} == {3} and len(found) == sum(1 for k in rows if k[0] == 3)


def test_splits_cover_the_range_with_even_counts(tmp_path: Path) -> None:
    _table(tmp_path / "a.sqlite", _rows(1_000))
    with _side(tmp_path / "a.sqlite") as (connection, source):
        parts = digests.split_range(connection, source, digests.KeyRange(), 1_000, 8)
        counts = [d.count for d in digests.range_digests(connection, source, parts)]
        whole = digests.range_digests(connection, source, [digests.KeyRange()])[0]
        rows = digests.range_rows(connection, source, parts[2])
    assert len(parts) == 8 and counts == [125] * 8 and sum(counts) == whole.count
    assert len(rows) == 125 and all(len(row.hash) == 16 for row in rows)


def test_messages_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    rows = _rows(200)
    _table(tmp_path / "a.sqlite", rows)
    _table(tmp_path / "b.sqlite", {**rows, (1, "item-00001"): -1})
    with _side(tmp_path / "a.sqlite") as a, _side(tmp_path / "b.sqlite") as b:
        message = reconciliation.start(*a, "table:main.stock", NOW, leaf_rows=500)
        reply = reconciliation.answer(*b, reconciliation.decode(reconciliation.encode(message)))
        assert reply.leaves and reconciliation.decode(reconciliation.encode(reply)) == reply
        final = reconciliation.answer(*a, reconciliation.decode(reconciliation.encode(reply)))
    assert final.done and final.differing == ((1, "item-00001"),)
    for bad in (b"{}", b"[1]", b'{"format": "tidesync-reconcile/1"}', b"\xff"):
        with pytest.raises(reconciliation.ReconcileError):
            reconciliation.decode(bad)


def test_the_last_result_is_kept_per_subject(tmp_path: Path) -> None:
    rows = _rows(50)
    _table(tmp_path / "a.sqlite", rows)
    _table(tmp_path / "b.sqlite", {**rows, (9, "extra"): 1})
    with _side(tmp_path / "a.sqlite") as a, _side(tmp_path / "b.sqlite") as b:
        first = reconciliation.reconcile_locally(a, b, "table:main.stock", NOW)
        reconciliation.record_result(a[0], None, first, NOW + dt.timedelta(seconds=3))
        again = reconciliation.reconcile_locally(a, b, "table:main.stock", NOW)
        reconciliation.record_result(a[0], None, again, NOW + dt.timedelta(seconds=5))
        (result,) = reconciliation.last_results(a[0], None)
    assert result.subject == "table:main.stock" and result.differing == 1
    assert result.seconds == 5 and result.rows_compared == 50
