"""The composition root: turns a Config into concrete adapters. Only this module chooses them.

Event store settings become the `eventsourcing` library's environment for each application.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment

from tidesync.config import Config, EventStoreConfig, EventStoreKind, TargetConfig
from tidesync.domain.clock import Clock, utc_now

if TYPE_CHECKING:
    from tidesync.ingress.routes import Ingress
    from tidesync.ingress.stores import SyncTables
    from tidesync.target.contract import TargetApplier


def served_event_store(store: EventStoreConfig) -> EventStoreConfig:
    """The settings that reach the store's PostgreSQL server.

    An embedded store starts its private server in `embedded_dir` (or joins the one running
    there), creates its database, and is answered as a PostgreSQL store on the server's socket.
    """
    if store.kind is not EventStoreKind.EMBEDDED:
        return store
    from tidesync.embedded_store import SUPERUSER, EmbeddedPostgres

    server = EmbeddedPostgres.shared(Path(store.embedded_dir))
    server.ensure_database(store.postgres_dbname)
    return dataclasses.replace(store, kind=EventStoreKind.POSTGRES, postgres_host=server.host,
                               postgres_port=server.port, postgres_user=SUPERUSER,
                               postgres_password="")


def event_store_env(store: EventStoreConfig) -> dict[str, str]:
    """The `eventsourcing` environment for the configured event store (PostgreSQL: every
    application keeps its events in its own table, beside tidesync's own tables)."""
    store = served_event_store(store)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_HOST": store.postgres_host,
        "POSTGRES_PORT": str(store.postgres_port),
        "POSTGRES_DBNAME": store.postgres_dbname,
        "POSTGRES_USER": store.postgres_user,
        "POSTGRES_PASSWORD": store.postgres_password,
        # One connection open per application, up to postgres_pool_size under load: a shore
        # process runs a dozen applications, and the library otherwise opens every pool's
        # full size at start (and lets it overflow by 10).
        "POSTGRES_POOL_SIZE": "1",
        "POSTGRES_MAX_OVERFLOW": str(store.postgres_pool_size - 1),
        "POSTGRES_CONNECT_TIMEOUT": "5",
        # Every application's recorder creates its tables safely under concurrent starts.
        "APPLICATION_RECORDER_TOPIC": "tidesync.shore.apps:PostgresStatementsRecorder",
    }


def describe_event_store(store: EventStoreConfig) -> str:
    """Where the event store lives, for people (never includes the password)."""
    if store.kind is EventStoreKind.EMBEDDED:
        return f"embedded PostgreSQL in {Path(store.embedded_dir).resolve()}"
    return (f"postgresql://{store.postgres_user}@{store.postgres_host}:{store.postgres_port}/"
            f"{store.postgres_dbname}")


def check_event_store(config: Config, name: str = "shore_health") -> int:
    """Open the event store and read its newest notification id (0 when empty).

    Raises the driver's error when the store cannot be reached.
    """
    env = Environment(name, event_store_env(config.event_store))
    with InfrastructureFactory.construct(env) as factory:
        recorder = factory.application_recorder()
        try:
            return recorder.max_notification_id() or 0
        finally:
            factory.close()


def postgres_conninfo(store: EventStoreConfig) -> str:
    """A libpq connection string for tidesync's own tables in the event store database."""
    store = served_event_store(store)
    parts = {
        "host": store.postgres_host, "port": str(store.postgres_port),
        "dbname": store.postgres_dbname, "user": store.postgres_user,
        "password": store.postgres_password, "connect_timeout": "5",
    }
    return " ".join(f"{key}={_quote(value)}" for key, value in parts.items() if value)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def build_ingress(
    config: Config, *, clock: Clock | None = None,
    monotonic: Callable[[], float] = time.monotonic, sync_conninfo: str | None = None,
) -> Ingress:
    """The /sync/v1 API on the configured stores: nodes in the event store, the sync tables
    (inbox, request ids, receipts, heartbeats) beside it, in its PostgreSQL database.

    `sync_conninfo` points the sync tables at another PostgreSQL database (tests).
    """
    from tidesync.ingress.auth import IdentitySource
    from tidesync.ingress.limits import Limits, RequestLimiter
    from tidesync.ingress.master_key import SecretBox, load_master_key
    from tidesync.ingress.nodes import NodeDirectory, NodesApplication
    from tidesync.ingress.routes import Ingress, IngressSettings

    shore = config.shore
    env = event_store_env(config.event_store)
    directory = NodeDirectory(
        lambda: NodesApplication(env=env), lambda: SecretBox(load_master_key(shore)),
        monotonic=monotonic,
    )
    limiter = RequestLimiter(Limits(
        shore.node_requests_per_second, shore.node_request_burst,
        shore.node_max_concurrent_requests, shore.max_in_flight_requests,
    ), monotonic)
    return Ingress(
        IngressSettings.of(shore), directory, limiter,
        IdentitySource.of(shore.client_identity_header, shore.trusted_proxies),
        build_sync_tables(config, sync_conninfo), clock or utc_now,
    )


def build_sync_tables(config: Config, sync_conninfo: str | None = None) -> SyncTables[Any]:
    """The sync tables in the event store's PostgreSQL database (or `sync_conninfo`'s)."""
    from tidesync.ingress.stores import SyncTables

    shore = config.shore
    store = config.event_store
    from tidesync.ingress.database import PostgresSyncDatabase, open_pool
    from tidesync.ingress.heartbeats import PostgresHeartbeats
    from tidesync.ingress.inbox import PostgresInbox
    from tidesync.ingress.nonces import PostgresNonceStore
    from tidesync.ingress.receipts import PostgresReceiptsView

    pool = open_pool(sync_conninfo or postgres_conninfo(store), shore.database_pool_size,
                     shore.database_timeout_seconds)
    return SyncTables(PostgresSyncDatabase(pool), PostgresNonceStore(pool), PostgresInbox(pool),
                      PostgresReceiptsView(pool), PostgresHeartbeats(pool))


def build_target_applier(target: TargetConfig) -> TargetApplier:
    """The `[target]` business database: the SQLite file `target.sqlite_path` when set, else
    the MySQL server."""
    if target.sqlite_path:
        from tidesync.target.sqlite import SQLiteTargetApplier

        return SQLiteTargetApplier(target.sqlite_path, node_id=target.node_id)
    from tidesync.target.mysql import MySQLTargetApplier

    return MySQLTargetApplier.from_config(target)

