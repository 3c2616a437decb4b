"""The embedded SQLite store: migrations under the write lock, tuned connections, one events
table per application in the shared file, stored times, and choosing adapters by config."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate

from tidesync.bootstrap import build_sync_tables, build_target_applier, event_store_env
from tidesync.config import EventStoreConfig, EventStoreKind, TargetConfig, load_config
from tidesync.ingress.database import SQLiteSyncDatabase, StoreUnavailable
from tidesync.ingress.inbox import SQLiteInbox
from tidesync.migrations import Migration, MigrationError, discover, migrate_sqlite, sql_statements
from tidesync.sqlite_store import SQLiteConnections, moment_from_text, moment_text
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.sqlite import SQLiteTargetApplier

SYNC_TABLES = {"inbox_batch", "inbox_event", "receive_rejection", "request_nonce", "receipt",
               "node_heartbeat", "metric_sample", "apply_partition", "active_conflict",
               "projection_tracking"}


def tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_migrations_apply_once_and_mirror_the_postgres_tables(tmp_path: Path) -> None:
    path = tmp_path / "data" / "shore.sqlite"
    names = migrate_sqlite(str(path))
    assert names == [m.name for m in discover("sqlite")]
    assert migrate_sqlite(str(path)) == []
    assert tables(path) >= SYNC_TABLES
    # Twins of PostgreSQL migrations keep their numbers; SQLite-only ones (record_head, which
    # PostgreSQL creates in 0020 with the other views) take numbers of their own.
    sqlite_only = {33}
    assert [m.version for m in discover("sqlite") if m.version not in sqlite_only] == [
        m.version for m in discover("postgres") if m.version in (1, 2, 10, 11, 31, 32)]
    assert sqlite_only <= {m.version for m in discover("sqlite")}
    assert "record_head" in tables(path)


def test_concurrent_starters_apply_each_migration_once(tmp_path: Path) -> None:
    path = str(tmp_path / "shore.sqlite")
    applied: list[list[str]] = []
    threads = [threading.Thread(target=lambda: applied.append(migrate_sqlite(path)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(name for names in applied for name in names) == sorted(
        m.name for m in discover("sqlite"))


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "shore.sqlite")
    broken = [Migration(1, "0001_ok", "CREATE TABLE a (x INTEGER);"),
              Migration(2, "0002_broken", "CREATE TABLE b (x INTEGER);\nINSERT INTO nowhere"
                                          " VALUES (1);")]
    with pytest.raises(MigrationError, match="0002_broken"):
        migrate_sqlite(path, broken)
    assert "a" in tables(Path(path)) and "b" not in tables(Path(path))
    assert migrate_sqlite(path, broken[:1]) == []


def test_scripts_split_into_statements() -> None:
    script = ("-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT 'a;b');\n\n"
              "CREATE INDEX t_x ON t (x); -- trailing\n-- only a comment\n")
    assert sql_statements(script) == ["-- a comment; with a semicolon\n"
                                      "CREATE TABLE t (x TEXT DEFAULT 'a;b');",
                                      "CREATE INDEX t_x ON t (x); -- trailing"]
    with pytest.raises(MigrationError):
        sql_statements("CREATE TABLE t (x TEXT)")


def test_connections_are_tuned_and_transactions_roll_back(tmp_path: Path) -> None:
    with SQLiteConnections(str(tmp_path / "x.sqlite")) as connections:
        with connections.connection() as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            conn.execute("CREATE TABLE t (x INTEGER)")
        with pytest.raises(ZeroDivisionError), connections.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            raise ZeroDivisionError
        with connections.connection() as conn:
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_a_held_write_lock_makes_the_sync_tables_unavailable(tmp_path: Path) -> None:
    path = str(tmp_path / "shore.sqlite")
    migrate_sqlite(path)
    database = SQLiteSyncDatabase(path, busy_timeout=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable), database.transaction():
            pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        database.close()


def test_stored_times_sort_as_times_and_round_trip() -> None:
    moments = [dt.datetime(5, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, 9, tzinfo=dt.UTC),
               dt.datetime(2026, 1, 1, 10, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
               dt.datetime(2026, 1, 1, 9, 0, 0, 1, tzinfo=dt.UTC)]
    texts = [moment_text(m) for m in moments]
    assert sorted(texts) == [moment_text(m) for m in sorted(moments)]
    assert [moment_from_text(t) for t in texts] == moments
    assert len({len(t) for t in texts}) == 1
    with pytest.raises(ValueError):
        moment_text(dt.datetime(2026, 1, 1))


class Thing(Aggregate):
    pass


class First(Application[uuid.UUID]):
    name = "first"


class Second(Application[uuid.UUID]):
    name = "second"


def test_each_application_has_its_own_events_table_in_the_shared_file(tmp_path: Path) -> None:
    store = EventStoreConfig(kind=EventStoreKind.SQLITE, sqlite_path=str(tmp_path / "s.sqlite"))
    first, second = First(env=event_store_env(store)), Second(env=event_store_env(store))
    try:
        first.save(Thing())
        second.save(Thing(), Thing())
        assert len(first.recorder.select_notifications(1, 10)) == 1
        assert len(second.recorder.select_notifications(1, 10)) == 2
    finally:
        first.close()
        second.close()
    assert {"first_events", "second_events"} <= tables(tmp_path / "s.sqlite")


def test_the_config_chooses_the_sqlite_adapters(tmp_path: Path) -> None:
    config = load_config(env={
        "TIDESYNC_EVENT_STORE__KIND": "sqlite",
        "TIDESYNC_EVENT_STORE__SQLITE_PATH": str(tmp_path / "events.sqlite"),
        "TIDESYNC_TARGET__SQLITE_PATH": str(tmp_path / "business.sqlite"),
    })
    assert config.target.sqlite_path == str(tmp_path / "business.sqlite")
    applier = build_target_applier(config.target)
    try:
        assert isinstance(applier, SQLiteTargetApplier)
    finally:
        applier.close()
    mysql = build_target_applier(TargetConfig())
    assert isinstance(mysql, MySQLTargetApplier)  # connects lazily
    tables = build_sync_tables(config)
    try:
        assert isinstance(tables.inbox, SQLiteInbox)
    finally:
        tables.database.close()
