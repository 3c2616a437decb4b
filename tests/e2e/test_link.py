"""The ship client on the real shore through the simulated satellite link: bandwidth, latency,
segment loss, scheduled outages and random connection resets. Uploads go side by side, answers
are lost and asked after, batches are cut short and sent again — and at the end the shore
tables equal the ship's, every event is terminal on the ship and the shore holds and applied
each one exactly once; with bodies written at once, and paced at the link's rate (the bodies
on their way taking turns)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.test_link_recovery import port_of
from tests.integration.test_ship_client import (
    check_shore,
    ship_config,
    shore_for_ship,
    workload,
)
from tidesync.bootstrap.ship import build_client
from tidesync.linksim import LinkProfile, LinkSimulator, OutageMode
from tidesync.ship.client import ExitCode

pytestmark = pytest.mark.services

PROFILE = LinkProfile(
    rate_bytes_per_second=256 * 1024, latency_seconds=0.1, loss=0.05, retransmit_seconds=0.3,
    outage_every_seconds=6.0, outage_seconds=1.5, outage_mode=OutageMode.REFUSE,
    outage_offset_seconds=1.0,  # the first outage while the first uploads go: the run is short
    resets_per_mib=3.0, seed=11)


@pytest.mark.parametrize("uplink", [(0, 1), (256 * 1024, 16 * 1024)],
                         ids=["bodies at once", "bodies paced at the link's rate, in turns"])
def test_outages_and_resets_end_with_both_sides_equal_and_each_event_applied_once(
        pg_database: Any, shore_mariadb: Any, kafka_broker: Any, make_mariadb_database: Any,
        tmp_path: Path, uplink: tuple[int, int]) -> None:
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=2)
    records = workload(capture, rows=1500, updates=500, deletes=50)
    produce(kafka_broker.bootstrap_servers, records, partitions=2)
    events = sum(1 for r in records if r.value is not None)
    with shore_for_ship(pg_database, shore_mariadb, database) as shore, \
            LinkSimulator(("127.0.0.1", port_of(shore.url)), PROFILE) as link:
        config = dataclasses.replace(
            ship_config(shore, kafka_broker, tmp_path / "ship.sqlite"), shore_url=link.url,
            probe_interval_seconds=1, probe_max_interval_seconds=2, request_timeout_seconds=10,
            upload_request_ms=300, uplink_rate_bytes_per_sec=uplink[0],
            uplink_burst_bytes=uplink[1])
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=150) is ExitCode.IDLE
            counts = client.state.state_counts()
        finally:
            client.close()
        stats = link.stats
        check_shore(pg_database, shore_mariadb, shore, capture, events)
    assert counts == {"TERMINAL": events}
    assert stats.resets > 0  # the link did cut requests short


SILENT = LinkProfile(rate_bytes_per_second=16 * 1024, latency_seconds=0.1, loss=0.02,
                     retransmit_seconds=0.5, outage_mode=OutageMode.BLACKHOLE, seed=5)
OUTAGE_SECONDS = 8.0


def test_a_link_gone_silent_ends_with_both_sides_equal_and_stuck_requests_given_up(
        pg_database: Any, shore_mariadb: Any, kafka_broker: Any, make_mariadb_database: Any,
        tmp_path: Path) -> None:
    """A blockage that drops packets instead of refusing them, from the moment the first
    upload is on its way: nothing fails until a request times out (a minute here: longer
    than the whole run), and the connections it caught resume only at their retransmissions.
    The ship notices the silence, probes, and once the link answers gives up what is stuck."""
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    records = workload(capture, rows=1200, updates=400, deletes=40)
    produce(kafka_broker.bootstrap_servers, records)
    events = sum(1 for r in records if r.value is not None)
    with shore_for_ship(pg_database, shore_mariadb, database) as shore, \
            LinkSimulator(("127.0.0.1", port_of(shore.url)), SILENT) as link:
        config = dataclasses.replace(
            ship_config(shore, kafka_broker, tmp_path / "ship.sqlite"), shore_url=link.url,
            request_timeout_seconds=60, upload_request_ms=500)
        client = build_client(config)
        try:
            went_down = came_back = None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                client.step()
                now = time.monotonic()
                if went_down is None and client.uploads.flights:
                    link.set_down(True)
                    went_down = now
                elif came_back is None and went_down is not None \
                        and now - went_down > OUTAGE_SECONDS:
                    link.set_down(False)
                    came_back = now
                elif came_back is not None and client.idle():
                    break
            counts = client.state.state_counts()
            given_up = client.link.counters.given_up  # type: ignore[attr-defined]
        finally:
            client.close()
        stats = link.stats
        check_shore(pg_database, shore_mariadb, shore, capture, events)
    assert counts == {"TERMINAL": events}
    assert given_up > 0 and stats.resets >= given_up  # each given up with a reset
