"""A SQLite business database as the shore target (small sites, the demo)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidesync.target.sqlite_schema import enable_sqlite_table

# SQLite does not enforce VARCHAR lengths: the CHECK gives the target a permanent rejection.
SQLITE_ITEMS_DDL = (
    "CREATE TABLE items (id INTEGER PRIMARY KEY,"
    " name VARCHAR(20) NOT NULL CHECK (length(name) <= 20), qty INT NOT NULL,"
    " price DECIMAL(10,2) NOT NULL)"
)


def make_sqlite_target(path: Path, node_id: str = "shore") -> Path:
    """A SQLite business database with the `items` table enabled for sync."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(SQLITE_ITEMS_DDL)
        enable_sqlite_table(conn, "items", node_id)
    return path


def target_rows(path: Path, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return conn.execute(sql, params).fetchall()


def target_items(path: Path) -> dict[int, tuple[Any, ...]]:
    rows = target_rows(path, "SELECT id, name, qty, price, _sync_revision, _sync_origin,"
                             " _sync_event_id FROM items")
    return {row[0]: row[1:] for row in rows}


def target_ledger(path: Path) -> list[str]:
    return [row[0] for row in target_rows(path, "SELECT event_id FROM _sync_applied")]
