"""The event store: the `eventsourcing` environment of every application and the libpq
connection string of tidesync's own tables, from the `[event_store]` settings (an embedded
store starts its private PostgreSQL server here).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment

from tidesync.apps.recorder import RECORDER_TOPIC
from tidesync.config import Config, EventStoreConfig, EventStoreKind
from tidesync.embedded_store import SUPERUSER, EmbeddedPostgres


def served_event_store(store: EventStoreConfig) -> EventStoreConfig:
    """The settings that reach the store's PostgreSQL server.

    An embedded store starts its private server in `embedded_dir` (or joins the one running
    there), creates its database, and is answered as a PostgreSQL store on the server's socket.
    """
    if store.kind is not EventStoreKind.EMBEDDED:
        return store
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
        "APPLICATION_RECORDER_TOPIC": RECORDER_TOPIC,
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
