"""The command endpoints when the downlink cannot serve: with PostgreSQL unreachable they
answer 503 + Retry-After."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from tests.integration.sync_client import SyncClient
from tests.integration.test_downlink_api import get_commands, post_acks
from tests.integration.test_ingress import (
    ACTOR,
    FakeClock,
    closed_port,
    make_config,
    node_service,
)
from tidesync.bootstrap.ingress import build_ingress
from tidesync.config import Config
from tidesync.entrypoints.http import BackgroundServer, create_app
from tidesync.ingress.routes import Ingress
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.shore.downlink import LazyDownlink, open_downlink


@contextmanager
def registered_client(config: Config, ingress: Ingress, clock: FakeClock
                      ) -> Iterator[SyncClient]:
    node_id = f"it-downlink-{secrets.token_hex(4)}"
    with node_service(config) as nodes:
        issued = nodes.register(node_id, ACTOR, clock())
    with BackgroundServer(create_app(config, ingress=ingress)) as server:
        yield SyncClient(server.url, node_id, issued.secret, clock)


def test_postgres_down_answers_503_with_retry_after(pg_database: PostgresDatabase) -> None:
    migrate_postgres(pg_database.dsn)
    clock = FakeClock()
    config = make_config(pg_database)
    ingress = build_ingress(config, clock=clock, monotonic=clock.monotonic)
    down = f"host=127.0.0.1 port={closed_port()} dbname=x user=x connect_timeout=2"
    ingress.use_downlink(LazyDownlink(lambda: open_downlink({}, down)))
    with registered_client(config, ingress, clock) as client:
        for answer in (get_commands(client), post_acks(client, [])):
            assert answer.status == 503 and answer.headers["retry-after"] == "5"
            assert answer.error().reason_code == "STORE_UNAVAILABLE"
