"""Versioned schema migrations for tidesync's own tables (inbox, views, caches).

Files `migrations/<kind>/NNNN_name.sql` (kind `postgres` or `sqlite`) apply once each, in order,
recorded in `tidesync_schema_migrations`. Concurrent starters never race: PostgreSQL holds an
advisory lock, SQLite applies each migration inside `BEGIN IMMEDIATE` (the one write lock).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tidesync.sqlite_store import connect

MIGRATIONS_ROOT = Path(__file__).resolve().parent.parent / "migrations"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK_KEY = 0x7469646573796E63  # "tidesync"


class MigrationError(Exception):
    """A migration file is misnamed, duplicated, or failed to apply."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def discover(kind: str = "postgres", root: Path = MIGRATIONS_ROOT) -> list[Migration]:
    """The migrations of one kind, ordered by version; refuses gaps in naming rules."""
    found: dict[int, Migration] = {}
    for path in sorted((root / kind).glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: expected NNNN_lower_snake.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"{path.name}: version {version} is used twice")
        found[version] = Migration(version, path.stem, path.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def migrate_postgres(conninfo: str, migrations: list[Migration] | None = None) -> list[str]:
    """Apply pending migrations, each in its own transaction; returns the names applied."""
    migrations = discover("postgres") if migrations is None else migrations
    applied: list[str] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tidesync_schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute(
                "SELECT version FROM tidesync_schema_migrations")}
            for migration in migrations:
                if migration.version not in done:
                    _apply(conn, migration)
                    applied.append(migration.name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied


def _apply(conn: psycopg.Connection[tuple[object, ...]], migration: Migration) -> None:
    try:
        with conn.transaction():
            conn.execute(migration.sql.encode("utf-8"))
            conn.execute(
                "INSERT INTO tidesync_schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
    except psycopg.Error as error:
        raise MigrationError(f"{migration.name} failed: {error}") from error


def migrate_sqlite(path: str, migrations: list[Migration] | None = None) -> list[str]:
    """Apply pending migrations to the SQLite file, each in its own write transaction;
    returns the names applied. The file is created (in WAL mode) if it does not exist."""
    migrations = discover("sqlite") if migrations is None else migrations
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    applied: list[str] = []
    try:
        conn = connect(path)
    except sqlite3.Error as error:
        raise MigrationError(f"cannot open {path}: {error}") from error
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tidesync_schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"
        )
        for migration in migrations:
            if _apply_sqlite(conn, migration):
                applied.append(migration.name)
    except sqlite3.Error as error:
        raise MigrationError(f"sqlite migrations failed: {error}") from error
    finally:
        conn.close()
    return applied


def _apply_sqlite(conn: sqlite3.Connection, migration: Migration) -> bool:
    """Apply one migration unless it is recorded; False if another starter applied it."""
    # `executescript` would COMMIT first and give the lock away: run statement by statement.
    conn.execute("BEGIN IMMEDIATE")
    try:
        done = conn.execute("SELECT 1 FROM tidesync_schema_migrations WHERE version = ?",
                            (migration.version,)).fetchone()
        if done is None:
            for statement in sql_statements(migration.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO tidesync_schema_migrations (version, name) VALUES (?, ?)",
                         (migration.version, migration.name))
    except sqlite3.Error as error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise MigrationError(f"{migration.name} failed: {error}") from error
    conn.execute("COMMIT")
    return done is None


def sql_statements(script: str) -> list[str]:
    """The complete statements of an SQLite script, in order (comment-only text dropped)."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if _has_code(pending):
                statements.append(pending.strip())
            pending = ""
    if _has_code(pending):
        raise MigrationError("the script ends inside a statement (missing ';')")
    return statements


def _has_code(text: str) -> bool:
    return any(line.split("--", 1)[0].strip() for line in text.splitlines())
