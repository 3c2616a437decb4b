"""The ship's link on the real shore through the link simulator: an idle kept-alive connection
outlives the ship's heartbeat interval, and after a long outage uploads resume as soon as the
link is back instead of after the grown backoff."""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.clocks import ManualClock, WallClock
from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.test_ingress import ACTOR, make_config, node_service
from tests.integration.test_ship_client import ship_config, shore_for_ship
from tidesync.bootstrap.ship import build_client
from tidesync.config import Config
from tidesync.entrypoints.http import ServerStartError, bound_url, build_server
from tidesync.linksim import LinkProfile, LinkSimulator, OutageMode
from tidesync.migrations import migrate_postgres
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.telemetry import build_heartbeat
from tidesync.ship.transport import HttpShoreLink

pytestmark = pytest.mark.services


@contextmanager
def shore_server(config: Config) -> Iterator[str]:
    """`tidesync shore serve`'s server (from `config`) on a thread; yields its URL."""
    server = build_server(config)
    thread = threading.Thread(target=server.run, name="shore-server", daemon=True)
    thread.start()
    try:
        for _ in range(1500):
            if server.started or not thread.is_alive():
                break
            time.sleep(0.02)
        if not server.started:
            raise ServerStartError("the shore server did not start")
        yield bound_url(server)
    finally:
        server.should_exit = True
        thread.join(30)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def idle_heartbeats(pg_database: Any, idle_seconds: float, **shore: Any
                    ) -> tuple[int, HttpShoreLink]:
    """Two heartbeats `idle_seconds` apart through a counting proxy: (connections the proxy
    saw, the ship's link)."""
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database, listen_port=0, **shore)
    clock = WallClock()
    node_id = f"it-keepalive-{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    with shore_server(config) as url, \
            LinkSimulator(("127.0.0.1", port_of(url))) as link:
        ship = HttpShoreLink(link.url, node_id, secret, clock=clock)
        try:
            ship.heartbeat(build_heartbeat(node_id, clock(), [], [], []))
            time.sleep(idle_seconds)
            ship.heartbeat(build_heartbeat(node_id, clock(), [], [], []))
        finally:
            ship.close()
        return link.stats.connections, ship


def test_an_idle_heartbeat_after_uvicorns_default_keep_alive_reuses_the_connection(
        pg_database: Any) -> None:
    connections, ship = idle_heartbeats(pg_database, idle_seconds=6.0)  # uvicorn's default: 5 s
    assert connections == 1
    assert ship.counters.closed_by_peer == 0


def test_a_shore_dropping_idle_connections_early_costs_a_new_connection(
        pg_database: Any) -> None:
    """The control: with the shore's keep-alive below the idle time the connection is gone."""
    connections, _ = idle_heartbeats(pg_database, idle_seconds=2.5, keep_alive_seconds=1)
    assert connections == 2


def test_a_connection_idle_past_the_ships_limit_is_replaced_before_it_is_used(
        pg_database: Any, tmp_path: Path) -> None:
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database, listen_port=0)
    clock = WallClock()
    node_id = f"it-keepalive-{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    with shore_server(config) as url, LinkSimulator(("127.0.0.1", port_of(url))) as link:
        ship = HttpShoreLink(link.url, node_id, secret, clock=clock, keep_alive=1.0)
        try:
            ship.heartbeat(build_heartbeat(node_id, clock(), [], [], []))
            time.sleep(1.5)
            ship.heartbeat(build_heartbeat(node_id, clock(), [], [], []))
        finally:
            ship.close()
        assert link.stats.connections == 2
    assert ship.counters.closed_by_peer == 0


def test_uploads_resume_as_soon_as_the_link_is_back_after_a_long_outage(
        pg_database: Any, shore_mariadb: Any, kafka_broker: Any, make_mariadb_database: Any,
        tmp_path: Path) -> None:
    """The client's schedules run on a manual monotonic clock, so "minutes of outage" pass at
    once and how soon uploads resume is measured in the client's own time."""
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    records = [capture.insert(k, f"part-{k}", k, f"{k}.50") for k in range(1, 21)]
    profile = LinkProfile(outage_mode=OutageMode.REFUSE)
    with shore_for_ship(pg_database, shore_mariadb, database, worker=False) as shore, \
            LinkSimulator(("127.0.0.1", port_of(shore.url)), profile) as link:
        config = dataclasses.replace(
            ship_config(shore, kafka_broker, tmp_path / "ship.sqlite"), shore_url=link.url,
            probe_interval_seconds=1, probe_max_interval_seconds=4,
            heartbeat_interval_seconds=3600,
            # Uploads on the client's own thread: the manual clock measures the schedules.
            uploads_in_flight=1)
        produce(kafka_broker.bootstrap_servers, records)
        clock = ManualClock(seconds=1000.0)
        client = build_client(config)
        client.monotonic = clock.monotonic
        try:
            link.set_down(True)
            # Minutes without a link: the requests' own backoff grows far past the probe cap.
            while True:
                client.step()
                waiting = min(schedule.not_before - clock.seconds for schedule in (
                    client.upload_retry, client.config_retry))
                if client.upload_retry.attempt >= 8 and waiting > 10:
                    break
                clock.advance(max(1.0, waiting))
            assert uploaded(config) == 0
            link.set_down(False)
            back_at = clock.seconds
            while uploaded(config) < len(records) and clock.seconds - back_at < 300:
                client.step()
                clock.advance(0.5)
            resumed_after = clock.seconds - back_at
        finally:
            client.close()
    assert uploaded(config) == len(records)
    assert resumed_after <= 4 + 1  # one probe interval (capped at 4 s), not the backoff


def uploaded(config: Any) -> int:
    state = SQLiteShipState(Path(config.state_path), config.node_id, config.group_id,
                            read_only=True)
    try:
        counts = state.state_counts()
    finally:
        state.close()
    return counts.get("RECEIVED", 0) + counts.get("TERMINAL", 0)
