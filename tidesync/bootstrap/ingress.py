"""The shore sync API (/sync/v1), the node commands and the node secrets both need, built from
the configuration."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tidesync.apps.master_key import SecretBox, load_master_key
from tidesync.apps.nodes import NodesApplication, NodeService
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.bootstrap.rules import LazyRuleReleases
from tidesync.config import Config, ShoreConfig
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.rules.release import ReleasedRules
from tidesync.ingress.answers import PostgresUploadAnswers
from tidesync.ingress.auth import IdentitySource
from tidesync.ingress.database import PostgresSyncDatabase, open_pool
from tidesync.ingress.dictionaries import PostgresDictionaries
from tidesync.ingress.heartbeats import PostgresHeartbeats
from tidesync.ingress.inbox import PostgresInbox
from tidesync.ingress.limits import Limits, RequestLimiter
from tidesync.ingress.nodes import NodeDirectory
from tidesync.ingress.nonces import PostgresNonceStore
from tidesync.ingress.receipts import PostgresReceiptsView
from tidesync.ingress.routes import Ingress, IngressSettings
from tidesync.ingress.rules import RuleOffer
from tidesync.ingress.stores import SyncTables


def secret_box(shore: ShoreConfig, *, create: bool = False) -> SecretBox:
    """The box that seals and opens node secrets with the shore's master key (`create`: make
    the key file when it is missing)."""
    return SecretBox(load_master_key(shore.master_key, shore.master_key_file, create=create))


@contextmanager
def open_node_service(config: Config, *, sealing: bool) -> Iterator[NodeService]:
    """Node commands over the configured event store; `sealing` (register, rotate) opens the
    master key, creating its file when it is missing and no node is registered yet."""
    app = NodesApplication(env=event_store_env(config.event_store))
    try:
        # A key is created only for the first node: once secrets are sealed, a missing key
        # file means a wrong path or a lost key, and a new key would open none of them.
        box = secret_box(config.shore, create=not app.node_ids()) if sealing else None
    except BaseException:
        app.close()
        raise
    # The shore's own origin ids are never a ship's: rows it writes carry them.
    reserved = frozenset({config.target.node_id, config.ship.shore_node_id} - {""})
    try:
        yield NodeService(app, box, reserved=reserved)
    finally:
        app.close()


def build_ingress(
    config: Config, *, clock: Clock | None = None,
    monotonic: Callable[[], float] = time.monotonic, sync_conninfo: str | None = None,
    released: ReleasedRules | None = None,
) -> Ingress:
    """The /sync/v1 API on the configured stores: nodes in the event store, the sync tables
    (inbox, request ids, receipts, heartbeats) beside it, in its PostgreSQL database.

    `sync_conninfo` points the sync tables at another PostgreSQL database (tests);
    `released` gives the rules offered to ships (by default the event store's releases).
    """

    shore = config.shore
    env = event_store_env(config.event_store)
    directory = NodeDirectory(
        lambda: NodesApplication(env=env), lambda: secret_box(shore),
        monotonic=monotonic,
    )
    limiter = RequestLimiter(Limits(
        shore.node_requests_per_second, shore.node_request_burst,
        shore.node_max_concurrent_requests, shore.max_in_flight_requests,
        shore.node_bytes_per_minute, shore.node_bytes_per_day,
    ), monotonic)
    return Ingress(
        ingress_settings(shore), directory, limiter,
        IdentitySource.of(shore.client_identity_header, shore.trusted_proxies),
        build_sync_tables(config, sync_conninfo), clock or utc_now,
        RuleOffer(released or LazyRuleReleases(config), monotonic=monotonic),
    )


def ingress_settings(shore: ShoreConfig) -> IngressSettings:
    return IngressSettings(
        shore.max_compressed_bytes, shore.max_decompressed_bytes, shore.max_events_per_batch,
        dt.timedelta(seconds=shore.request_window_seconds), shore.heartbeat_interval_seconds,
        accept_wire_v2=shore.accept_wire_v2)


def build_sync_tables(config: Config, sync_conninfo: str | None = None) -> SyncTables[Any]:
    """The sync tables in the event store's PostgreSQL database (or `sync_conninfo`'s)."""

    shore = config.shore
    store = config.event_store

    pool = open_pool(sync_conninfo or postgres_conninfo(store), shore.database_pool_size,
                     shore.database_timeout_seconds)
    return SyncTables(PostgresSyncDatabase(pool), PostgresNonceStore(pool), PostgresInbox(pool),
                      PostgresReceiptsView(pool),
                      PostgresHeartbeats(pool, dt.timedelta(days=shore.metric_retention_days)),
                      PostgresDictionaries(pool), PostgresUploadAnswers(pool))
