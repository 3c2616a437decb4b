"""Versioned schema migrations for tidesync's own tables in the shore's PostgreSQL database
(inbox, work queue, views, downlink).

Files `tidesync/migrations/postgres/NNNN_name.sql` (package data) apply once each, in order,
recorded in `tidesync_schema_migrations`. Concurrent starters never race: they hold an
advisory lock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tidesync.domain.errors import ErrorCode, TidesyncError

MIGRATIONS_ROOT = Path(__file__).resolve().parent  # package data: postgres/, ship/
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK_KEY = 0x7469646573796E63  # "tidesync"


class MigrationError(TidesyncError):
    """A migration file is misnamed, duplicated, or failed to apply."""

    code = ErrorCode.MIGRATION_FAILED


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








