"""A node's uplink limit set on the shore (§13.1): the aggregate's event, its checks, the
credential directory carrying it, the ship's pacer taking the lower of it and its own limit
without a fresh burst, and the client applying it from its config."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests.clocks import rounded_now
from tests.unit import test_nodes as node_tests
from tests.unit.offline_client import offline_client
from tests.unit.test_nodes import KEY
from tests.unit.test_uplink_pacing import FakeTime
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import Actor, NodesApplication, NodeService
from tidesync.domain.node import InvalidNodeLink, NodeLink, NodeRevoked, node_uuid
from tidesync.entrypoints.nodes_cli import byte_size
from tidesync.ingress.nodes import NodeDirectory
from tidesync.ship.pacing import UplinkPacer
from tidesync.ship.transport import HttpShoreLink
from tidesync.wire import sync_pb2 as pb

NOW = rounded_now()
OPS = Actor("olga", "VSAT plan of 2 Mbit/s", "trace-9")
app = node_tests.app  # the nodes application on the in-memory store


def test_a_limit_is_recorded_as_an_event_with_its_actor_and_read_back(
        app: NodesApplication) -> None:
    service = NodeService(app, SecretBox(KEY))
    service.register("ship-1", OPS, NOW)
    assert app.node("ship-1").link == NodeLink()  # none until set
    assert service.change_link("ship-1", NodeLink.of(256 * 1024, 64 * 1024), OPS, NOW) == \
        NodeLink(256 * 1024, 64 * 1024)
    events = list(app.events.get(node_uuid("ship-1")))
    assert type(events[-1]).__name__ == "LinkChanged"
    assert (events[-1].actor, events[-1].reason) == (  # type: ignore[attr-defined]
        "olga", "VSAT plan of 2 Mbit/s")
    assert service.show("ship-1", NOW).link.uplink_rate == 256 * 1024
    directory = NodeDirectory(lambda: app, lambda: SecretBox(KEY))
    assert directory.lookup("ship-1").link == NodeLink(256 * 1024, 64 * 1024)
    service.revoke("ship-1", OPS, NOW)
    with pytest.raises(NodeRevoked):
        service.change_link("ship-1", NodeLink.of(1024), OPS, NOW)


@pytest.mark.parametrize(("rate", "burst", "message"), [
    (512, 0, "must be 0 \\(none\\) or 1024"),
    (1 << 31, 0, "must be 0 \\(none\\) or 1024"),
    (64 * 1024, 100, "burst must be 1024"),
    (0, 4096, "a burst needs a rate"),
])
def test_impossible_limits_are_refused(rate: int, burst: int, message: str) -> None:
    with pytest.raises(InvalidNodeLink, match=message):
        NodeLink.of(rate, burst)


def test_the_default_burst_is_an_eighth_of_a_second_and_at_least_16_kib() -> None:
    assert NodeLink.of(1024 * 1024).uplink_burst == 128 * 1024
    assert NodeLink.of(32 * 1024).uplink_burst == 16 * 1024


def test_sizes_on_the_command_line() -> None:
    assert [byte_size(t) for t in ("131072", "128KiB", "128k", "2MiB", "0")] == [
        131072, 131072, 131072, 2 * 1024 * 1024, 0]
    for bad in ("12x", "1MB", "-5", "", "KiB"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)


def test_the_pacer_takes_the_lower_limit_and_keeps_no_fresh_burst() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(0, 1024 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    assert not pacer.limited  # neither the ship nor the shore limits it
    pacer.follow_shore(64 * 1024, 16 * 1024)
    assert pacer.limited and pacer.rate == 64 * 1024
    body = os.urandom(16 * 1024 + 64 * 1024)
    assert b"".join(pacer.pieces(body)) == body
    assert abs(sum(clock.sleeps) - 1.0) < 1e-6  # the burst at once, the rest at 64 KiB/s
    # A higher limit from the shore: the bucket is empty, so the next body waits for its
    # tokens at the new rate instead of leaving in a new burst.
    pacer.follow_shore(128 * 1024, 64 * 1024)
    clock.sleeps.clear()
    b"".join(pacer.pieces(os.urandom(64 * 1024)))
    assert abs(sum(clock.sleeps) - 0.5) < 1e-6
    pacer.follow_shore(0, 0)  # lifted
    assert not pacer.limited


def test_the_ships_own_limit_holds_when_it_is_the_lower() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(32 * 1024, 8 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    pacer.follow_shore(128 * 1024, 16 * 1024)
    assert pacer.rate == 32 * 1024
    pacer.follow_shore(16 * 1024, 4 * 1024)
    assert pacer.rate == 16 * 1024
    pacer.follow_shore(0, 0)
    assert pacer.rate == 32 * 1024


def test_the_client_applies_the_limit_its_config_carries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = offline_client(tmp_path, monkeypatch, node_id="ship-7")
    link = HttpShoreLink("http://127.0.0.1:9", "ship-7", KEY, clock=lambda: NOW,
                         pacer=UplinkPacer(0, 1024))
    client.link = link
    try:
        client._config_answered(pb.ConfigResponse(config_version="v1", control=pb.ControlParameters(
            rate_bytes_per_sec=96 * 1024, burst_bytes=12 * 1024)))
        assert link.pacer is not None and link.pacer.rate == 96 * 1024
        client._config_answered(pb.ConfigResponse(config_version="v2"))
        assert not link.pacer.limited
    finally:
        client.close()
