"""A running console for tests: its own PostgreSQL database (views migrated), a MariaDB target,
the shore app (ingress + /graphql) behind starlette's TestClient, one user per role, and
helpers that produce real conflicts through the apply processor."""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient

from tests.integration.shore_support import ITEMS_DDL, ShipLog, receive
from tidesync.apps.master_key import SecretBox
from tidesync.apps.users import UsersApplication, UserService
from tidesync.bootstrap.console import console_digest_key, console_stores
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShoreConfig
from tidesync.domain.user import Role
from tidesync.entrypoints.http import create_app
from tidesync.graphql.console import Console
from tidesync.graphql.settings import ConsoleSettings
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import Catalogue, OpenApplications
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.shore.worker import ShoreApps
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

SHORE_NODE = "shore"
MASTER_KEY = bytes(range(32))

TEST_SETTINGS = ConsoleSettings(auth_cache_ms=0, wait_timeout_ms=1500,
                              sensitive_columns=("shipdb.items.price",))


def small_pools(env: dict[str, str]) -> dict[str, str]:
    """The event store env with one connection per application (the test server is shared)."""
    return {**env, "POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "2"}


def config_for(database: PostgresDatabase) -> Config:
    return Config(
        event_store=EventStoreConfig(
            kind=EventStoreKind.POSTGRES, postgres_host=database.host,
            postgres_port=database.port, postgres_dbname=database.dbname,
            postgres_user=database.user, postgres_password=database.password),
        shore=ShoreConfig(master_key=base64.b64encode(MASTER_KEY).decode()),
    )


@dataclass
class Clock:
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def __call__(self) -> dt.datetime:
        return self.now


@dataclass
class ConsoleWorld:
    """Everything a console test needs; `query` posts GraphQL as one of the role users."""

    database: PostgresDatabase
    target: MariaDBInstance
    target_database: str
    pool: ConnectionPool
    apps: ShoreApps
    console: Console
    client: TestClient
    tokens: dict[str, str]
    ship: ShipLog
    keys: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    catalogue: Catalogue = field(default_factory=default_catalogue)
    views_apps: OpenApplications | None = None
    views_lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ requests

    def post(self, query: str, variables: dict[str, Any] | None = None,
             token: str | None = None, headers: dict[str, str] | None = None) -> Any:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        return self.client.post("/graphql", json={"query": query, "variables": variables or {}},
                                headers=all_headers)

    def query(self, query: str, variables: dict[str, Any] | None = None, role: str = "admin",
              headers: dict[str, str] | None = None) -> dict[str, Any]:
        response = self.post(query, variables, self.tokens[role], headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    # ------------------------------------------------------------------ shore work

    def applier(self) -> MySQLTargetApplier:
        database = self.target_database
        return MySQLTargetApplier(host=self.target.host, port=self.target.port,
                                  user=self.target.user, password=self.target.password,
                                  node_id=SHORE_NODE, route=lambda db, table: (database, table))

    def apply_all(self) -> None:
        applier = self.applier()
        try:
            processor = ApplyProcessor(
                self.apps.apply_jobs, self.apps.conflicts, PostgresWorkQueue(self.pool),
                applier, lambda: dt.datetime.now(dt.UTC), ProcessorSettings(worker_id="t"),
                draw=lambda: 0.5)
            for _ in range(50):
                if processor.run_once() == 0:
                    return
        finally:
            applier.close()

    def run_views(self) -> None:
        """Bring every read model up to date (what `shore work` does between jobs)."""
        with self.views_lock:
            if self.views_apps is None:
                self.views_apps = self.catalogue.open_applications(
                    small_pools(self.database.eventsourcing_env()))
            for runner in self.catalogue.runners(self.views_apps, self.pool):
                runner.run_until_idle()

    @contextmanager
    def views_in_background(self, delay: float = 0.3) -> Iterator[None]:
        """Run the views once after `delay` seconds in another thread (a worker)."""
        thread = threading.Timer(delay, self.run_views)
        thread.start()
        try:
            yield
        finally:
            thread.join()

    def shore_edit(self, key: int, sql_set: str) -> None:
        """A local edit on the shore target (its trigger gives the row a new revision)."""
        connection = self.target.connect(database=self.target_database, autocommit=True)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"UPDATE items SET {sql_set} WHERE id = %s", (key,))
        finally:
            connection.close()

    def make_conflict(self) -> str:
        """A fresh conflict: a ship row applied, edited on the shore, then updated by the
        ship from its old revision. Returns the conflict id; views are up to date."""
        key = next(self.keys)
        receive(self.pool, self.ship.node_id,
                [self.ship.insert(key, f"item{key}", 3, "10.50")])
        self.apply_all()
        self.shore_edit(key, "qty = 100, price = 99.95")
        receive(self.pool, self.ship.node_id, [self.ship.update(key, qty=5, name=f"ship{key}")])
        self.apply_all()
        self.run_views()
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT conflict_id FROM inbox_event WHERE origin_node_id = %s"
                " AND conflict_id IS NOT NULL ORDER BY received_at DESC LIMIT 1",
                (self.ship.node_id,)).fetchone()
        assert row is not None
        return str(row[0])



def data(body: dict[str, Any]) -> Any:
    """The data of a GraphQL answer that must carry no errors."""
    assert "errors" not in body, body
    return body["data"]


@contextmanager
def console_world(target: MariaDBInstance,
                  settings: ConsoleSettings = TEST_SETTINGS) -> Iterator[ConsoleWorld]:
    """A console on a private PostgreSQL database and a fresh target database."""
    database = PostgresDatabase().create()
    target_database = target.create_database(f"t_{secrets.token_hex(6)}")
    try:
        migrate_postgres(database.dsn)
        connection = target.connect(database=target_database, autocommit=True)
        with connection.cursor() as cursor:
            cursor.execute(ITEMS_DDL)
        enable_mysql_table(connection, target_database, "items", SHORE_NODE)
        connection.close()
        pool = ConnectionPool(database.dsn, min_size=1, max_size=4, open=True)
        apps = ShoreApps.open(small_pools(database.eventsourcing_env()))
        world_ref: list[ConsoleWorld] = []

        def open_target() -> MySQLTargetApplier:
            return world_ref[0].applier()

        console = Console(settings, console_stores(
            database.eventsourcing_env(), database.dsn, open_target,
            lambda: SecretBox(MASTER_KEY), lambda: console_digest_key(MASTER_KEY)))
        config = replace(config_for(database), console=settings)
        app = create_app(config, console=console)
        with TestClient(app, raise_server_exceptions=True) as client:
            world = ConsoleWorld(database, target, target_database, pool, apps, console, client,
                                 tokens={}, ship=ShipLog(f"ship-{secrets.token_hex(3)}", "shipdb"))
            world_ref.append(world)
            users = UsersApplication(env=small_pools(database.eventsourcing_env()))
            service = UserService(users)
            for role in Role:
                world.tokens[role.value] = service.add(f"{role.value}-user", role, "test",
                                                       "console test user").token
            users.close()
            try:
                yield world
            finally:
                with world.views_lock:
                    if world.views_apps is not None:
                        world.views_apps.close()
                apps.close()
                pool.close()
    finally:
        connection = target.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{target_database}`")
        finally:
            connection.close()
        database.drop()
