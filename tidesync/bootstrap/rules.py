"""Builds rule releases from a Config: the `rule_releases` application on the event store with
the `[rules]` settings, and the shore target's table schemas that validation checks against."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql

from tidesync.apps.rules import RuleReleasesApplication, SchemaLookup, TableSchema
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.config import Config, TargetConfig
from tidesync.domain.errors import Unavailable
from tidesync.domain.rules.release import (
    NodeActivation,
    ReleaseStatus,
    RuleActivationReports,
)
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.ingress.database import open_pool
from tidesync.ingress.rule_reports import PostgresRuleActivations
from tidesync.target.mysql_schema import inspect_mysql_table
from tidesync.target.sqlite_schema import inspect_sqlite_table
from tidesync.target.table_state import TableState


class TargetUnreachable(Unavailable):
    """The shore target a validation checks against cannot be reached."""


def rule_releases_env(config: Config) -> dict[str, str]:
    """The event store environment with the `[rules]` settings."""
    return {**event_store_env(config.event_store), **config.rules.env()}


def open_rule_releases(config: Config) -> RuleReleasesApplication:
    return RuleReleasesApplication(env=rule_releases_env(config))


class LazyRuleReleases:
    """The rule releases of the event store, opened on first use (a process that serves no
    rule question holds no connection for them); `close()` releases it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._app: RuleReleasesApplication | None = None
        self._lock = threading.Lock()

    def _open(self) -> RuleReleasesApplication:
        with self._lock:
            if self._app is None:
                self._app = open_rule_releases(self.config)
            return self._app

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        return self._open().offered()

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return self._open().released(rule_id, version)

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        self._open().mark_active(rule_id, version, actor, reason)

    def close(self) -> None:
        with self._lock:
            if self._app is not None:
                self._app.close()
                self._app = None


class NoActivationReports:
    """Activation reports where none are stored: every rule has none."""

    def activations(self, rule_id: str) -> list[NodeActivation]:
        return []


@contextlib.contextmanager
def open_activation_reports(config: Config) -> Iterator[RuleActivationReports]:
    """What each node last reported about each rule (from its heartbeats)."""
    reports = build_rule_activations(config)
    try:
        yield reports
    finally:
        reports.close()


@contextlib.contextmanager
def shore_schemas(target: TargetConfig) -> Iterator[SchemaLookup]:
    """Table schemas of the `[target]` business database (a SQLite file keeps every table in
    its main database), over one connection opened on first use."""
    opened: list[Any] = []

    def connection() -> Any:
        if not opened:
            opened.append(_connect(target))
        return opened[0]

    def lookup(database: str, table: str) -> TableSchema:
        if target.sqlite_path:
            state = inspect_sqlite_table(connection(), table)
        else:
            with connection().cursor() as cursor:
                state = inspect_mysql_table(cursor, database, table)
        return _schema(state)

    try:
        yield lookup
    finally:
        for handle in opened:
            handle.close()


def _schema(state: TableState) -> TableSchema:
    if not state.exists:
        return None, ()
    return dict(state.shape().columns), state.primary_key


def _connect(target: TargetConfig) -> Any:
    if target.sqlite_path:
        try:  # read-write without creating: a mistyped path is an error, not an empty file
            uri = Path(target.sqlite_path).resolve().as_uri() + "?mode=rw"
            return sqlite3.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error as error:
            raise TargetUnreachable(f"cannot open the shore target {target.sqlite_path}"
                                    ) from error
    try:
        return pymysql.connect(host=target.host, port=target.port, user=target.user,
                               password=target.password, database=target.database or None,
                               charset="utf8mb4", connect_timeout=target.connect_timeout_seconds)
    except pymysql.MySQLError as error:
        code = error.args[0] if error.args else "?"
        raise TargetUnreachable(f"cannot reach the shore target at {target.host}:{target.port}"
                                f" (MySQL error {code})") from error


def build_rule_activations(config: Config, sync_conninfo: str | None = None
                           ) -> PostgresRuleActivations:
    """The nodes' rule activation reports, read from the sync tables (close it when done)."""
    shore = config.shore
    pool = open_pool(sync_conninfo or postgres_conninfo(config.event_store), 2,
                     shore.database_timeout_seconds, name="tidesync-rule-activations")
    pool.open(wait=False)
    return PostgresRuleActivations(pool)
