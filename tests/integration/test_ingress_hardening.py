"""The sync API under hostile or broken clients, end to end on a real server and PostgreSQL:
bounded cost per request (byte quotas, bounded loading of stored bodies, unknown fields not
stored), cheap unauthenticated paths (health, in-flight slots), client errors answered with a
reason code and never a traceback, and the server's time in every refusal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import secrets
import uuid
from collections.abc import Callable

import pytest

from tests.clocks import rounded_now
from tests.integration import test_ingress as base
from tests.integration.sync_client import SyncClient, send
from tests.integration.test_ingress import (
    ACTOR,
    PREFIX,
    FakeClock,
    Ship,
    batch_body,
    closed_port,
    heartbeat,
    make_config,
    make_event,
    node_service,
    query,
    running,
    statuses,
)
from tidesync.apps.nodes import NodeIdReserved
from tidesync.bootstrap.ingress import build_ingress, open_node_service
from tidesync.config import TargetConfig
from tidesync.entrypoints.http import BackgroundServer, create_app
from tidesync.ingress.database import UnstorableValue, open_pool, transaction
from tidesync.ingress.inbox import MAX_STORED_BODIES
from tidesync.localservices import PostgresDatabase
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import TIMESTAMP_HEADER

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# The fixtures of the sync API's main test module: its database, clock and registered ships.
database, clock, ship, ship_factory = base.database, base.clock, base.ship, base.ship_factory


def micros(moment: dt.datetime) -> int:
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.exc_info]


# ----------------------------------------------------------------------------- client errors


def test_a_twelve_digit_timestamp_is_refused_401_without_a_traceback(
    ship: Ship, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    answer = ship.client.upload(body, headers={TIMESTAMP_HEADER: "999999999999"})
    assert (answer.status, answer.error().reason_code) == (401, "AUTH_EXPIRED_TIMESTAMP")
    assert tracebacks(caplog) == []


def test_a_refusal_tells_the_shores_time(ship: Ship) -> None:
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    answer = ship.client.upload(body, signed_at=ship.clock() - dt.timedelta(hours=3))
    error = answer.error()
    assert (answer.status, error.reason_code) == (401, "AUTH_EXPIRED_TIMESTAMP")
    assert error.server_time_micros == micros(ship.clock())


def test_nul_characters_are_refused_400_with_their_reason(
    ship: Ship, database: PostgresDatabase, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    event = make_event(ship.node_id, 1, topic="sync.cdc.ship\x00fleet")
    upload = ship.client.upload(batch_body(ship.node_id, [event]))
    assert (upload.status, upload.error().reason_code) == (400, "NUL_IN_STRING")
    beat = heartbeat(ship.node_id, ship.clock())
    beat.client_version = "0.1\x00"
    refused = ship.client.heartbeat(beat)
    assert (refused.status, refused.error().reason_code) == (400, "NUL_IN_STRING")
    assert tracebacks(caplog) == []
    assert query(database, "SELECT count(*) FROM inbox_event WHERE origin_node_id = %s",
                 ship.node_id) == [(0,)]


# ----------------------------------------------------------------------------- bounded cost


def test_body_bytes_are_limited_per_node_and_minute(ship_factory: Callable[..., Ship]) -> None:
    ship = ship_factory(node_bytes_per_minute=4096, max_compressed_bytes=4096)
    junk = os.urandom(1500)  # Charged when read, before anything decodes it.
    assert [ship.client.upload(junk).status for _ in range(2)] == [400, 400]
    limited = ship.client.upload(junk)
    assert (limited.status, limited.error().reason_code) == (429, "BYTE_QUOTA_MINUTE")
    assert int(limited.headers["retry-after"]) >= 1
    ship.clock.advance(dt.timedelta(minutes=1))
    assert ship.client.upload(junk).status == 400


def test_a_resend_loads_a_bounded_number_of_stored_bodies(ship: Ship) -> None:
    events = [make_event(ship.node_id, n) for n in range(MAX_STORED_BODIES + 2)]
    for event in events:  # One stored body per event.
        assert statuses(ship.client.upload(batch_body(ship.node_id, [event]))) == [
            ("RECEIVED", "")]
    resent = statuses(ship.client.upload(batch_body(ship.node_id, events)))
    assert resent == [("RECEIVED", "DUPLICATE_EVENT")] * MAX_STORED_BODIES + [
        ("RETRYABLE_FAILURE", "COMPARE_DEFERRED")] * 2
    rest = statuses(ship.client.upload(batch_body(ship.node_id, events[MAX_STORED_BODIES:])))
    assert rest == [("RECEIVED", "DUPLICATE_EVENT")] * 2


def test_fields_unknown_to_the_shore_are_not_stored(
    ship: Ship, database: PostgresDatabase,
) -> None:
    batch = codec.build_batch([make_event(ship.node_id, 1)], node_id=ship.node_id,
                              batch_id=uuid.uuid4(), created_at=ship.clock())
    content = batch.SerializeToString() + b"\xfa\x06\x08smuggled"  # field 111
    body = codec.compress_bytes(codec.serialize_batch(pb.UploadBatch.FromString(content)))
    assert b"smuggled" in codec.decompress_bytes(body, 1 << 20, 1 << 22)
    assert statuses(ship.client.upload(body)) == [("RECEIVED", "")]
    (stored,) = query(database, "SELECT body FROM inbox_batch WHERE origin_node_id = %s",
                      ship.node_id)
    assert b"smuggled" not in bytes(stored[0])
    assert pb.UploadBatch.FromString(bytes(stored[0])).events[0].event_id == (
        batch.events[0].event_id)


# ----------------------------------------------------------------------------- cheap paths


def test_unauthenticated_requests_take_no_server_slot(
    database: PostgresDatabase, clock: FakeClock,
) -> None:
    config = make_config(database, max_in_flight_requests=1)
    node_id = f"{PREFIX}{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    ingress = build_ingress(config, clock=clock, monotonic=clock.monotonic)
    with BackgroundServer(create_app(config, ingress=ingress)) as server:
        client = SyncClient(server.url, node_id, secret, clock)
        beat = heartbeat(node_id, clock())
        with ingress.limiter.request_slot():  # The server's only slot is taken.
            stranger = send(server.url, "POST", "/sync/v1/heartbeat", b"", {})
            assert (stranger.status, stranger.error().reason_code) == (401, "AUTH_MISSING")
            busy = client.heartbeat(beat)
            assert (busy.status, busy.error().reason_code) == (429, "SERVER_BUSY")
        assert client.heartbeat(beat).status == 200


def test_live_ready_and_health(ship: Ship, database: PostgresDatabase,
                               clock: FakeClock) -> None:
    url = ship.client.url
    assert send(url, "GET", "/livez", b"", {}).status == 200
    assert send(url, "GET", "/readyz", b"", {}).status == 200
    assert send(url, "GET", "/healthz", b"", {}).status == 200
    config = make_config(database)
    down = dataclasses.replace(config, event_store=dataclasses.replace(
        config.event_store, postgres_port=closed_port()))
    with running(down, clock) as down_url:
        assert send(down_url, "GET", "/livez", b"", {}).status == 200
        not_ready = send(down_url, "GET", "/readyz", b"", {})
        assert not_ready.status == 503 and not_ready.headers["retry-after"] == "5"
        assert send(down_url, "GET", "/healthz", b"", {}).status == 503


def test_the_targets_node_id_is_refused_at_registration(database: PostgresDatabase) -> None:
    config = dataclasses.replace(make_config(database),
                                 target=TargetConfig(node_id=f"{PREFIX}office"))
    with open_node_service(config, sealing=True) as service:
        for node_id in ("shore", f"{PREFIX}office"):
            with pytest.raises(NodeIdReserved):
                service.register(node_id, ACTOR, rounded_now())


def test_a_value_the_database_cannot_hold_is_a_client_error(database: PostgresDatabase) -> None:
    pool = open_pool(database.dsn, 1, 5)
    pool.open()
    try:
        with pytest.raises(UnstorableValue), transaction(pool) as conn:
            conn.execute("SELECT %s::text", ("nul\x00inside",))
    finally:
        pool.close()
