"""The ship state file's write-ahead log: checkpointed only every WAL_CHECKPOINT_PAGES pages
(many commits' writes copied into the file at once, not nearly every commit's), and cut back to
that size afterwards, so `ship.sqlite-wal` never keeps the size of the largest burst it held."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidesync.ship.state import database
from tidesync.ship.state.database import ShipStateDatabase

PAGE = 4096
SQLITE_DEFAULT_PAGES = 1000


def wal_pages(path: Path) -> float:
    wal = path.with_name(path.name + "-wal")
    return (wal.stat().st_size if wal.exists() else 0) / PAGE


def fill(store: ShipStateDatabase, rows: int) -> None:
    with store.transaction() as conn:
        conn.executemany("INSERT INTO filler (body) VALUES (?)",
                         [(bytes(PAGE // 2),) for _ in range(rows)])


def open_store(path: Path) -> ShipStateDatabase:
    store = ShipStateDatabase(path, "ship-7", "group")
    with store.transaction() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS filler (n INTEGER PRIMARY KEY, body BLOB)")
    return store


def test_many_commits_share_one_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ship.sqlite"
    store = open_store(path)
    try:
        for _ in range(30):  # about 50 pages per commit: 1,500 pages in all
            fill(store, 100)
        assert wal_pages(path) > 1.4 * SQLITE_DEFAULT_PAGES
        assert store.conn.execute("SELECT count(*) FROM filler").fetchone()[0] == 3000
    finally:
        store.close()


def test_after_a_burst_the_log_is_cut_back(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "WAL_CHECKPOINT_PAGES", 100)
    path = tmp_path / "ship.sqlite"
    store = open_store(path)
    try:
        fill(store, 2000)  # about 1,000 pages in one commit, checkpointed as it ends
        assert wal_pages(path) > 900
        fill(store, 1)  # the log starts over, and its file is cut back to the limit
        assert wal_pages(path) <= 100
        assert store.conn.execute("SELECT count(*) FROM filler").fetchone()[0] == 2001
    finally:
        store.close()
