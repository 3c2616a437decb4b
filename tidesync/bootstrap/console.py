"""Builds the console from a Config: the event store, the read-model database, the shore
target (for current revisions) and the master key (for node secrets)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from eventsourcing.application import Application

from tidesync.apps.downlink import DownlinkApplication
from tidesync.apps.master_key import SecretBox, load_master_key
from tidesync.bootstrap.event_store import postgres_conninfo
from tidesync.bootstrap.ingress import secret_box
from tidesync.bootstrap.rules import rule_releases_env, shore_schemas
from tidesync.bootstrap.shore import view_settings
from tidesync.bootstrap.target import build_target_applier
from tidesync.config import Config
from tidesync.graphql.console import Console, ConsoleStores
from tidesync.ingress.rule_reports import PostgresRuleActivations
from tidesync.migrations import migrate_postgres
from tidesync.projections.catalogue import default_catalogue
from tidesync.shore.conflicts import Pool, PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.downlink import DownlinkService
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.contract import TargetApplier


def build_console(config: Config) -> Console:
    """The console over the configured stores."""

    def open_target() -> TargetApplier:
        # The same applier `shore work` and `tidesync conflicts decide` use (MySQL or SQLite).
        return build_target_applier(config.target)

    def digest_key() -> bytes:
        return console_digest_key(load_master_key(
            config.shore.master_key, config.shore.master_key_file))

    stores = dataclasses.replace(console_stores(
        rule_releases_env(config), postgres_conninfo(config.event_store), open_target,
        lambda: secret_box(config.shore), digest_key,
        config.event_store.postgres_pool_size), rule_schemas=lambda: shore_schemas(config.target),
        rule_activations=PostgresRuleActivations)
    return Console(config.console, stores, catalogue=default_catalogue(view_settings(config)))


def console_digest_key(master_key: bytes) -> bytes:
    """The key of the digests the console shows in place of values: derived from the shore
    master key (so it rotates with it), never the master key itself."""
    return hmac.new(master_key, b"tidesync console digest key v1", hashlib.sha256).digest()


def console_stores(env: dict[str, str], conninfo: str, open_target: Callable[[], TargetApplier],
                   open_box: Callable[[], SecretBox], digest_key: Callable[[], bytes],
                   pool_size: int = 4) -> ConsoleStores:
    """The console's stores and adapters over one event store database and shore target."""

    def open_revisions(pool: Pool) -> TargetRevisionReader:
        return TargetRevisionReader(open_target, PostgresRecordKeys(pool))

    def open_downlink(app: Application[Any]) -> DownlinkService:
        assert isinstance(app, DownlinkApplication)
        return DownlinkService(app)

    def migrate() -> None:
        migrate_postgres(conninfo)

    return ConsoleStores(
        event_store_env=env, conninfo=conninfo, migrate=migrate, open_revisions=open_revisions,
        open_queue=PostgresWorkQueue, open_downlink=open_downlink, open_box=open_box,
        digest_key=digest_key, pool_size=pool_size)
