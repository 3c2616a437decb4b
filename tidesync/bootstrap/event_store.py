"""The event store: the `eventsourcing` environment of every application and the libpq
connection string of tidesync's own tables, from the `[event_store]` settings (an embedded
store starts its private PostgreSQL server here), and the connections each process may hold.

Every connection says which process opened it (`application_name` "tidesync PROCESS/PURPOSE"),
so `pg_stat_activity` attributes each one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import eventsourcing.persistence as es_errors
import psycopg
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment
from psycopg_pool import PoolTimeout

from tidesync.apps.recorder import RECORDER_TOPIC
from tidesync.apps.shared_pool import APPLICATION_NAME, POOL_MAX_IDLE
from tidesync.config import Config, EventStoreConfig, EventStoreKind
from tidesync.domain.errors import Unavailable
from tidesync.embedded_store import SUPERUSER, EmbeddedPostgres

SHARED_FACTORY_TOPIC = "tidesync.apps.shared_pool:SharedPostgresFactory"
POOL_MAX_IDLE_SECONDS = 60
"""How long a connection beyond a pool's minimum may stay unused before the pool closes it."""
_process = "tidesync"


def name_process(name: str) -> None:
    """Name this process in the `application_name` of the connections it opens from now on."""
    global _process  # one name per process, set once when it starts
    _process = name


def application_name(purpose: str) -> str:
    """"tidesync PROCESS/PURPOSE", as `pg_stat_activity` shows it (63 characters at most)."""
    return f"tidesync {_process}/{purpose}"[:63]


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
        # Every application of the process shares one pool (see tidesync/apps/shared_pool.py).
        "PERSISTENCE_MODULE": SHARED_FACTORY_TOPIC,
        APPLICATION_NAME: application_name("events"),
        POOL_MAX_IDLE: str(POOL_MAX_IDLE_SECONDS),
        "POSTGRES_HOST": store.postgres_host,
        "POSTGRES_PORT": str(store.postgres_port),
        "POSTGRES_DBNAME": store.postgres_dbname,
        "POSTGRES_USER": store.postgres_user,
        "POSTGRES_PASSWORD": store.postgres_password,
        # One connection open while idle, up to postgres_pool_size under load, for all the
        # process's applications together (the library would open one pool per application,
        # each at its full size, and let it overflow by 10).
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


def postgres_conninfo(store: EventStoreConfig, purpose: str = "tables") -> str:
    """A libpq connection string for tidesync's own tables in the event store database."""
    store = served_event_store(store)
    parts = {
        "host": store.postgres_host, "port": str(store.postgres_port),
        "dbname": store.postgres_dbname, "user": store.postgres_user,
        "password": store.postgres_password, "connect_timeout": "5",
        "application_name": application_name(purpose),
    }
    return " ".join(f"{key}={_quote(value)}" for key, value in parts.items() if value)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --------------------------------------------------------------------------- connection budget

MIGRATION_CONNECTIONS = 1
"""Schema migrations open one short-lived connection at a time."""
RULE_REPORT_CONNECTIONS = 2
"""The pool of the nodes' rule activation reports (`shore work`)."""
SHORE_CDC_CONNECTIONS = 3
"""The shore CDC consumer's lock connection and its release-holds pool (at most 2)."""


@dataclass(frozen=True, slots=True)
class ConnectionBudget:
    """The PostgreSQL connections one process may hold at most, pool by pool. Idle, each pool
    keeps one and closes the rest after POOL_MAX_IDLE_SECONDS unused."""

    process: str
    pools: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(size for _, size in self.pools)

    @property
    def idle(self) -> int:
        return sum(min(size, 1) for name, size in self.pools if name != "migrations")

    def describe(self) -> str:
        parts = " + ".join(f"{name} {size}" for name, size in self.pools)
        return (f"{self.process} may open {self.total} PostgreSQL connections at most"
                f" ({parts}); idle it keeps about {self.idle}")


def work_budget(config: Config) -> ConnectionBudget:
    """`shore work`: the applications' shared pool, tidesync's tables (work queue, views,
    arbiter), rule activation reports, the shore CDC consumer when configured, migrations."""
    size = config.event_store.postgres_pool_size
    pools = [("event store", size), ("tidesync tables", size),
             ("rule reports", RULE_REPORT_CONNECTIONS)]
    if config.downlink.kafka_bootstrap_servers:
        pools.append(("shore CDC", SHORE_CDC_CONNECTIONS))
    pools.append(("migrations", MIGRATION_CONNECTIONS))
    return ConnectionBudget("shore work", tuple(pools))


def serve_budget(config: Config) -> ConnectionBudget:
    """`shore serve`: the applications' shared pool, the sync API's pool, the console's pool,
    migrations."""
    size = config.event_store.postgres_pool_size
    return ConnectionBudget("shore serve", (
        ("event store", size), ("sync API", config.shore.database_pool_size),
        ("console", size), ("migrations", MIGRATION_CONNECTIONS)))


def command_budget(config: Config, command: str) -> ConnectionBudget:
    """A one-shot command (`jobs list`, `jobs replay`): the applications' shared pool,
    tidesync's tables, migrations."""
    size = config.event_store.postgres_pool_size
    return ConnectionBudget(command, (("event store", size), ("tidesync tables", size),
                                      ("migrations", MIGRATION_CONNECTIONS)))


# --------------------------------------------------------------------------- store errors

STORE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, es_errors.OperationalError,
    es_errors.InterfaceError, Unavailable)
"""What the event store's PostgreSQL answers when it cannot take a connection or a statement
now (down, "too many clients", a pool with none free): the same call may succeed later."""


def store_problem(error: BaseException) -> str:
    """One line saying why the store was unavailable (the server's own words when it gave
    some, such as "sorry, too many clients already"; never a statement's values)."""
    text = str(error).strip()
    if "FATAL:" in text:
        text = text.rsplit("FATAL:", 1)[1]
    line = " ".join(text.split()) or type(error).__name__
    return line[:200]


def probe_store(config: Config) -> None:
    """Open and close one connection to the event store's database; a STORE_ERRORS error
    when it cannot take one now."""
    psycopg.connect(postgres_conninfo(config.event_store, "probe")).close()
