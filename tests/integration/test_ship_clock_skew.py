"""A ship whose clock is far off the shore's keeps syncing: the shore's refusal carries its
time, the ship signs in that time from then on and says so in its health; and a node the shore
refused is asked about again while the client runs, so it resumes once the shore accepts it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
import time
from typing import Any

import pytest

from tests.clocks import WallClock
from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.test_ingress import ACTOR, node_service
from tests.integration.test_ship_client import inbox, ship_config, shore_for_ship
from tidesync.bootstrap.ship import build_client
from tidesync.domain.node import secret_text
from tidesync.ship.client import ExitCode
from tidesync.ship.telemetry import Subsystem

pytestmark = pytest.mark.services


class SkewedClock(WallClock):
    """The real time, two hours late: a ship whose clock was never set."""

    def __call__(self) -> dt.datetime:
        return super().__call__() - dt.timedelta(hours=2)


def test_a_ship_two_hours_off_still_uploads_and_reports_the_skew(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"p{k}", k, "1.00") for k in range(1, 4)])
    with shore_for_ship(pg_database, shore_mariadb, database, worker=False) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite")
        client = build_client(config, clock=SkewedClock())
        try:
            client.run(timeout=8)
            transport = client.health.get(Subsystem.TRANSPORT)
            offset = getattr(client.link, "clock_offset", None)
        finally:
            client.close()
        assert client.node_blocked is None
        assert len(inbox(pg_database, shore.node_id)) == 3
    assert transport is not None
    assert (transport.state, transport.reason_code) == ("DEGRADED", "CLOCK_SKEW")
    assert "s behind the shore's" in transport.detail
    assert offset is not None and abs(offset - dt.timedelta(hours=2)) < dt.timedelta(minutes=1)


def test_a_node_registered_after_the_ship_started_is_accepted_without_a_restart(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"p{k}", k, "1.00") for k in range(1, 4)])
    with shore_for_ship(pg_database, shore_mariadb, database, worker=False) as shore:
        # The ship is commissioned under a node id the shore does not know yet.
        node_id = f"it-ship-{secrets.token_hex(4)}"
        secret = os.urandom(32)
        config = dataclasses.replace(
            ship_config(shore, kafka_broker, tmp_path / "ship.sqlite"), node_id=node_id,
            secret=secret_text(secret))
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=30) is ExitCode.BLOCKED
            refused = client.health.get(Subsystem.TRANSPORT)
            assert refused is not None and refused.reason_code == "NODE_UNKNOWN"
            assert "asking again in" in refused.detail
            register(shore.config, node_id, secret)
            # The shore remembers an unknown id for a few seconds, so the first questions
            # after the registration may still be refused; each is asked without the backoff's
            # (random) wait, until the events arrive.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(inbox(pg_database, node_id)) < 3:
                client.identity_probe.not_before = 0.0
                client.run(timeout=1)
            accepted = client.health.get(Subsystem.TRANSPORT)
        finally:
            client.close()
        assert client.node_blocked is None
        assert accepted is not None and accepted.state == "HEALTHY"
        assert len(inbox(pg_database, node_id)) == 3


def register(config: Any, node_id: str, secret: bytes) -> None:
    """Register the node so that the shore issues exactly the secret the ship was given."""
    draws = iter([secret])
    with node_service(config) as service:
        service.random_bytes = lambda size: next(draws, None) or os.urandom(size)
        assert service.register(node_id, ACTOR, WallClock()()).secret == secret
