"""The ship state store's SQLite file: connection and pragmas, transactions, migrations, cursors.

Every store of the `tidesync.ship.state` package works through one ShipStateDatabase; SQLite
errors become StateStoreError in `transaction`, and only there.
"""

from __future__ import annotations

import contextlib
import enum
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import ErrorCode, TidesyncError

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations" / "ship"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class Direction(enum.StrEnum):
    UPLINK = "UPLINK"
    DOWNLINK = "DOWNLINK"


class StateStoreError(TidesyncError):
    """The state store cannot be read or written (disk, corruption, schema)."""

    code = ErrorCode.STATE_STORE


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def ship_migrations(root: Path = MIGRATIONS_DIR) -> list[Migration]:
    """`tidesync/migrations/ship/NNNN_name.sql`, in version order."""
    found: dict[int, Migration] = {}
    for path in sorted(root.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None or int(match.group(1)) in found:
            raise StateStoreError(f"{path.name}: expected one NNNN_lower_snake.sql per version")
        found[int(match.group(1))] = Migration(int(match.group(1)), path.stem,
                                               path.read_text(encoding="utf-8"))
    if not found:
        raise StateStoreError(f"no ship state migrations under {root}")
    return [found[version] for version in sorted(found)]


def statements(sql: str) -> list[str]:
    """Split a migration file into statements (ours hold no semicolons inside literals)."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]


LOOK_UP_CHUNK = 500
"""Values per look-up statement (SQLite allows 32,766 parameters since 3.32; older 999)."""


def look_up(conn: sqlite3.Connection, select: str, wanted: Iterable[bytes | None],
            leading: tuple[object, ...] = (), trailing: str = "") -> list[tuple[Any, ...]]:
    """The rows of `select` (ending in `IN`, after `leading` parameters, followed by
    `trailing`, e.g. an UPDATE's RETURNING clause) for the distinct non-null values wanted:
    one statement per chunk of values instead of one per value."""
    values = sorted(set(filter(None, wanted)))
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(values), LOOK_UP_CHUNK):
        chunk = values[start:start + LOOK_UP_CHUNK]
        marks = ",".join("?" * len(chunk))
        rows += conn.execute(f"{select} ({marks}){trailing}", (*leading, *chunk)).fetchall()
    return rows


WAL_CHECKPOINT_PAGES = 16_000
"""Pages the write-ahead log grows to before a commit copies them into the file (SQLite's
default is 1,000). Each poll's rows touch index pages all over the event-id index (and,
before capture places, the capture index), so a commit can write a thousand pages: with the
default, nearly every commit also checkpointed, rewriting and syncing the file. A longer log
copies each page once for many commits. The log is cut back to this size (64 MiB of 4 KiB
pages) after a checkpoint."""


class OrderedWrites:
    """Writes collected in order and run in order; consecutive ones of one statement go as
    one executemany (a prepared statement reused instead of one execute per row)."""

    def __init__(self) -> None:
        self._runs: list[tuple[str, list[tuple[object, ...]]]] = []

    def add(self, sql: str, params: tuple[object, ...]) -> None:
        if self._runs and self._runs[-1][0] == sql:
            self._runs[-1][1].append(params)
        else:
            self._runs.append((sql, [params]))

    def run(self, conn: sqlite3.Connection) -> None:
        for sql, params in self._runs:
            conn.executemany(sql, params)
        self._runs.clear()


class ShipStateDatabase:
    """One SQLite file (WAL, synchronous=FULL, foreign keys) for one node and consumer group.

    `durable=False` (synchronous=OFF) exists for property tests only.
    """

    def __init__(self, path: str | Path, origin_node_id: str, consumer_group: str, *,
                 direction: Direction = Direction.UPLINK, durable: bool = True,
                 read_only: bool = False, clock: Clock = utc_now) -> None:
        self.path = Path(path)
        self.origin_node_id = origin_node_id
        self.consumer_group = consumer_group
        self.direction = direction
        self.clock = clock
        self.conn = self._connect(durable, read_only)

    def _connect(self, durable: bool, read_only: bool) -> sqlite3.Connection:
        try:
            if read_only:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            if not read_only:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
                conn.execute(f"PRAGMA journal_size_limit = {WAL_CHECKPOINT_PAGES * 4096}")
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'OFF'}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA cell_size_check = ON")
        except sqlite3.Error as error:
            raise StateStoreError(f"cannot open the state store {self.path}: {error}") from error
        return conn

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction; SQLite errors become StateStoreError here, only here."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.Error as error:
            raise StateStoreError(f"state store failure: {error}") from error

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Apply pending migrations (each in its own transaction); returns their names."""
        migrations = ship_migrations() if migrations is None else migrations
        applied: list[str] = []
        with self.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY"
                         " KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
        done = {row[0] for row in self.conn.execute("SELECT version FROM schema_version")}
        for migration in migrations:
            if migration.version in done:
                continue
            with self.transaction() as conn:
                for statement in statements(migration.sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)",
                             (migration.version, migration.name, self.now_text()))
            applied.append(migration.name)
        return applied

    def now_text(self) -> str:
        return self.clock().isoformat()

    # ------------------------------------------------------------------ pull cursors

    def cursor(self, name: str) -> str:
        row = self.conn.execute("SELECT cursor FROM sync_cursor WHERE name = ?",
                                (name,)).fetchone()
        return "" if row is None else str(row[0])

    def set_cursor(self, conn: sqlite3.Connection, name: str, cursor: str) -> None:
        conn.execute("INSERT INTO sync_cursor (name, cursor, updated_at) VALUES (?, ?, ?)"
                     " ON CONFLICT (name) DO UPDATE SET cursor = excluded.cursor,"
                     " updated_at = excluded.updated_at", (name, cursor, self.now_text()))
