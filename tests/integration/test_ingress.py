"""The shore sync API end to end: a real uvicorn server on a free port, real PostgreSQL, signed
requests over HTTP. Covers node identity, authentication, limits and durable receive."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import os
import secrets
import socket
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import zstandard

from tests.clocks import ManualClock, rounded_now
from tests.integration.sync_client import Answer, SyncClient, send
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import Actor, NodesApplication, NodeService
from tidesync.bootstrap.event_store import event_store_env
from tidesync.bootstrap.ingress import build_ingress
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShoreConfig
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.entrypoints.http import BackgroundServer, create_app
from tidesync.ingress.auth import sign_request
from tidesync.localservices import PostgresDatabase, free_port
from tidesync.migrations import migrate_postgres
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

START = rounded_now()
ACTOR = Actor("test-operator", "integration test")


class FakeClock(ManualClock):
    """Wall clock and monotonic clock under the test's control, from START."""

    def __init__(self) -> None:
        super().__init__(START)


PREFIX = "it-ingress-"
"""Every node id of this module starts so: its rows are removed when the module ends, so that
other tests sharing the database (the apply processor's) never see them."""

_NODE_TABLES = (("inbox_event", "origin_node_id"), ("inbox_batch", "origin_node_id"),
                ("receive_rejection", "origin_node_id"), ("receipt", "origin_node_id"),
                ("request_nonce", "node_id"), ("node_heartbeat", "node_id"),
                ("metric_sample", "node_id"))


@pytest.fixture(scope="module")
def database(pg_database: PostgresDatabase) -> Iterator[PostgresDatabase]:
    migrate_postgres(pg_database.dsn)
    yield pg_database
    with pg_database.connect() as conn:
        for table, column in _NODE_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE {column} LIKE %s", (PREFIX + "%",))


def make_config(database: PostgresDatabase, **shore: Any) -> Config:
    store = EventStoreConfig(
        kind=EventStoreKind.POSTGRES, postgres_host=database.host,
        postgres_port=database.port, postgres_dbname=database.dbname,
        postgres_user=database.user, postgres_password=database.password, postgres_pool_size=2,
    )
    settings: dict[str, Any] = {"master_key": MASTER_KEY, "database_pool_size": 4,
                                "database_timeout_seconds": 2, "node_requests_per_second": 1000,
                                "node_request_burst": 1000, **shore}
    return Config(shore=ShoreConfig(**settings), event_store=store)


MASTER_KEY = base64.b64encode(os.urandom(32)).decode()


@contextmanager
def node_service(config: Config) -> Iterator[NodeService]:
    app = NodesApplication(env=event_store_env(config.event_store))
    try:
        yield NodeService(app, SecretBox(base64.b64decode(MASTER_KEY)))
    finally:
        app.close()


@contextmanager
def running(config: Config, clock: FakeClock, **kw: Any) -> Iterator[str]:
    ingress = build_ingress(config, clock=clock, monotonic=clock.monotonic, **kw)
    with BackgroundServer(create_app(config, ingress=ingress)) as server:
        yield server.url


@dataclasses.dataclass
class Ship:
    """A registered node with its client against a running server."""

    node_id: str
    secret: bytes
    client: SyncClient
    clock: FakeClock
    config: Config


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ship_factory(database: PostgresDatabase, clock: FakeClock
                 ) -> Iterator[Callable[..., Ship]]:
    """`ship_factory(**shore_settings)`: a fresh node registered, a server running for it."""
    stack: list[Any] = []

    def make(**shore: Any) -> Ship:
        config = make_config(database, **shore)
        node_id = f"{PREFIX}{secrets.token_hex(4)}"
        with node_service(config) as service:
            issued = service.register(node_id, ACTOR, clock())
        manager = running(config, clock)
        url = manager.__enter__()
        stack.append(manager)
        return Ship(node_id, issued.secret, SyncClient(url, node_id, issued.secret, clock),
                    clock, config)

    yield make
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


@pytest.fixture
def ship(ship_factory: Callable[..., Ship]) -> Ship:
    return ship_factory()


# ----------------------------------------------------------------------------- data


def make_event(origin: str, number: int, *, amount: str = "10.50",
               topic: str = "sync.cdc.ship.fleet_erp") -> ChangeEvent:
    return ChangeEvent(
        event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{origin}/{topic}/{number}"),
        origin_node_id=origin, source_connector_id=f"{origin}-mysql", source_topic=topic,
        source_partition=number % 3, source_position=100 + number,
        record=RecordKey.of("fleet_erp", "spare_parts", {"id": number}),
        operation=Operation.INSERT, captured_at=START,
        after={"id": number, "name": "seal kit", "amount": amount},
        result_revision=Revision(uuid.uuid5(uuid.NAMESPACE_DNS, str(number)).bytes),
        source_sequence=number + 1, trace_id=f"trace-{number}",
    )


def batch_body(node_id: str, events: list[ChangeEvent], *, version: str | None = None,
               batch_id: uuid.UUID | None = None) -> bytes:
    batch = codec.build_batch(events, node_id=node_id, batch_id=batch_id or uuid.uuid4(),
                              created_at=START)
    if version is not None:
        batch.protocol_version = version
    return codec.compress_bytes(codec.serialize_batch(batch))


def statuses(answer: Answer) -> list[tuple[str, str]]:
    assert answer.status == 200, (answer.status, answer.error())
    response = answer.message(pb.UploadBatchResponse)
    return [(pb.ReceiveStatus.Name(s.status), s.reason_code) for s in response.statuses]


def query(database: PostgresDatabase, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with database.connect() as conn:
        return conn.execute(sql, params).fetchall()


def inbox_rows(database: PostgresDatabase, node_id: str) -> list[tuple[Any, ...]]:
    return query(database, "SELECT event_id, batch_ref, batch_index, source_topic,"
                 " source_partition, source_position, source_sequence, replay_epoch, state"
                 " FROM inbox_event WHERE origin_node_id = %s ORDER BY source_position", node_id)


def body_count(database: PostgresDatabase, node_id: str) -> int:
    return int(query(database, "SELECT count(*) FROM inbox_batch WHERE origin_node_id = %s",
                     node_id)[0][0])


def closed_port() -> int:
    port = free_port()
    with socket.socket() as probe:  # Nothing listens there: connections are refused.
        probe.settimeout(0.5)
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    return port


# ----------------------------------------------------------------------------- receive


def test_signed_upload_is_received_and_stored(ship: Ship, database: PostgresDatabase) -> None:
    events = [make_event(ship.node_id, n) for n in range(3)]
    answer = ship.client.upload(batch_body(ship.node_id, events))
    assert statuses(answer) == [("RECEIVED", "")] * 3
    rows = inbox_rows(database, ship.node_id)
    assert [(r[0], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows] == [
        (e.event_id, i, e.source_topic, e.source_partition, e.source_position,
         e.source_sequence, 0, "PENDING") for i, e in enumerate(events)
    ]
    # The body the processor decodes is the verified batch: each row's event is in it.
    (body,) = query(database, "SELECT body FROM inbox_batch WHERE batch_ref = %s", rows[0][1])[0]
    stored = codec.parse_message(body, pb.UploadBatch)
    names = codec.NameTable(stored.strings)
    assert [codec.event_from_wire(stored.events[r[2]], names) for r in rows] == [
        codec.as_received(e) for e in events
    ]


def test_a_resent_batch_is_received_again_without_new_rows(
    ship: Ship, database: PostgresDatabase,
) -> None:
    events = [make_event(ship.node_id, n) for n in range(4)]
    assert statuses(ship.client.upload(batch_body(ship.node_id, events))) == [
        ("RECEIVED", "")] * 4
    # Resent under another batch id, with the names interned in another order.
    again = batch_body(ship.node_id, list(reversed(events)))
    assert statuses(ship.client.upload(again)) == [("RECEIVED", "DUPLICATE_EVENT")] * 4
    assert len(inbox_rows(database, ship.node_id)) == 4
    assert body_count(database, ship.node_id) == 1


def test_a_partly_new_batch_stores_a_body_for_the_new_events(
    ship: Ship, database: PostgresDatabase,
) -> None:
    first = [make_event(ship.node_id, n) for n in range(2)]
    ship.client.upload(batch_body(ship.node_id, first))
    more = [*first, make_event(ship.node_id, 2)]
    assert statuses(ship.client.upload(batch_body(ship.node_id, more))) == [
        ("RECEIVED", "DUPLICATE_EVENT"), ("RECEIVED", "DUPLICATE_EVENT"), ("RECEIVED", "")]
    rows = inbox_rows(database, ship.node_id)
    assert len(rows) == 3 and rows[2][2] == 2 and rows[2][1] != rows[0][1]
    assert body_count(database, ship.node_id) == 2


def test_same_event_id_with_other_content_is_an_integrity_mismatch(
    ship: Ship, database: PostgresDatabase, caplog: pytest.LogCaptureFixture,
) -> None:
    original = make_event(ship.node_id, 1, amount="10.50")
    ship.client.upload(batch_body(ship.node_id, [original]))
    forged = dataclasses.replace(original, after={**original.after, "amount": "99.99"})  # type: ignore[dict-item]
    answer = ship.client.upload(batch_body(ship.node_id, [forged, make_event(ship.node_id, 2)]))
    assert statuses(answer) == [("PERMANENT_REJECTED", "INTEGRITY_MISMATCH"), ("RECEIVED", "")]
    rejected = query(database, "SELECT event_id, reason_code, content_digest FROM"
                     " receive_rejection WHERE origin_node_id = %s", ship.node_id)
    assert [(r[0], r[1]) for r in rejected] == [(original.event_id, "INTEGRITY_MISMATCH")]
    assert len(rejected[0][2]) == 32
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert str(original.event_id) in logged
    assert "99.99" not in logged and "10.50" not in logged and "seal kit" not in logged
    # The stored event is untouched.
    assert len(inbox_rows(database, ship.node_id)) == 2


def test_a_resent_event_whose_body_is_gone_is_still_received(
    ship: Ship, database: PostgresDatabase,
) -> None:
    event = make_event(ship.node_id, 3)
    ship.client.upload(batch_body(ship.node_id, [event]))
    with database.connect() as conn:  # as retention does once the event is long terminal
        conn.execute("DELETE FROM inbox_batch WHERE origin_node_id = %s", (ship.node_id,))
    answer = ship.client.upload(batch_body(ship.node_id, [event]))
    assert statuses(answer) == [("RECEIVED", "DUPLICATE_EVENT")]


def test_the_same_event_twice_in_one_batch(ship: Ship, database: PostgresDatabase) -> None:
    event = make_event(ship.node_id, 5)
    changed = dataclasses.replace(event, trace_id="another trace")
    answer = ship.client.upload(batch_body(ship.node_id, [event, event, changed]))
    assert statuses(answer) == [("RECEIVED", ""), ("RECEIVED", ""),
                                ("PERMANENT_REJECTED", "INTEGRITY_MISMATCH")]
    assert len(inbox_rows(database, ship.node_id)) == 1


def test_a_resent_event_with_a_result_answers_with_it(
    ship: Ship, database: PostgresDatabase,
) -> None:
    event = make_event(ship.node_id, 7)
    ship.client.upload(batch_body(ship.node_id, [event]))
    with database.connect() as conn:
        conn.execute("UPDATE inbox_event SET state = 'TERMINAL', result = 'APPLIED'"
                     " WHERE origin_node_id = %s", (ship.node_id,))
        conn.execute(
            "INSERT INTO receipt (seq, origin_node_id, event_id, result, reason_code,"
            " result_revision, decided_at, source_topic, source_partition, source_position)"
            " VALUES ((SELECT COALESCE(max(seq), 0) + 1 FROM receipt), %s, %s, 'APPLIED', NULL,"
            " %s, %s, %s, %s, %s)",
            (ship.node_id, event.event_id, event.result_revision.value,  # type: ignore[union-attr]
             START, event.source_topic, event.source_partition, event.source_position))
    response = ship.client.upload(batch_body(ship.node_id, [event])).message(
        pb.UploadBatchResponse)
    (status,) = response.statuses
    assert status.status == pb.RECEIVED and status.reason_code == "DUPLICATE_EVENT"
    assert status.result.result == pb.APPLIED
    assert status.result.result_revision == event.result_revision.value  # type: ignore[union-attr]
    assert status.result.source_position == event.source_position


def test_forged_origin_is_rejected_per_event(ship: Ship, database: PostgresDatabase) -> None:
    own = make_event(ship.node_id, 1)
    forged = make_event(PREFIX + "someone-else", 2)
    answer = ship.client.upload(batch_body(ship.node_id, [own, forged]))
    assert statuses(answer) == [("RECEIVED", ""), ("PERMANENT_REJECTED", "FORGED_ORIGIN")]
    assert [r[0] for r in inbox_rows(database, ship.node_id)] == [own.event_id]
    assert query(database, "SELECT count(*) FROM inbox_event WHERE origin_node_id = %s",
                 PREFIX + "someone-else")[0][0] == 0
    assert query(database, "SELECT event_id, reason_code FROM receive_rejection"
                 " WHERE origin_node_id = %s", ship.node_id) == [
        (forged.event_id, "FORGED_ORIGIN")]


def test_a_batch_naming_another_node_is_forbidden(ship: Ship, database: PostgresDatabase) -> None:
    answer = ship.client.upload(batch_body(PREFIX + "someone-else",
                                           [make_event(ship.node_id, 1)]))
    assert answer.status == 403 and answer.error().reason_code == "NODE_MISMATCH"
    assert inbox_rows(database, ship.node_id) == []


# ----------------------------------------------------------------------------- authentication


def test_a_replayed_request_is_refused_even_after_a_restart(
    ship: Ship, database: PostgresDatabase,
) -> None:
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    request_id = str(uuid.uuid4())
    assert ship.client.upload(body, request_id=request_id).status == 200
    replay = ship.client.upload(body, request_id=request_id)
    assert replay.status == 401 and replay.error().reason_code == "AUTH_REPLAYED"
    # A new server process (new app, new pool) still remembers the request id.
    with running(ship.config, ship.clock) as url:
        client = dataclasses.replace(ship.client, url=url)
        again = client.upload(body, request_id=request_id)
        assert again.status == 401 and again.error().reason_code == "AUTH_REPLAYED"
        assert client.upload(body).status == 200


def test_stale_and_future_timestamps_are_refused(ship: Ship) -> None:
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    for skew in (dt.timedelta(minutes=-6), dt.timedelta(minutes=6)):
        answer = ship.client.upload(body, signed_at=ship.clock() + skew)
        assert answer.status == 401
        assert answer.error().reason_code == "AUTH_EXPIRED_TIMESTAMP"
    assert ship.client.upload(body, signed_at=ship.clock() - dt.timedelta(minutes=4)
                              ).status == 200


def test_bad_signatures_digests_and_missing_headers(ship: Ship) -> None:
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    wrong_key = ship.client.upload(body, secret=os.urandom(32))
    assert (wrong_key.status, wrong_key.error().reason_code) == (401, "AUTH_BAD_SIGNATURE")
    tampered = ship.client.upload(body, sign_body=body + b"x")
    assert tampered.error().reason_code == "AUTH_BAD_DIGEST"
    bare = send(ship.client.url, "POST", "/sync/v1/batches", body, {})
    assert (bare.status, bare.error().reason_code) == (401, "AUTH_MISSING")
    assert bare.headers["www-authenticate"]
    stranger = dataclasses.replace(ship.client, node_id=PREFIX + "never-registered")
    unknown = stranger.upload(body)
    assert (unknown.status, unknown.error().reason_code) == (401, "NODE_UNKNOWN")


def test_a_revoked_node_is_refused_but_its_backlog_stays(
    ship: Ship, database: PostgresDatabase,
) -> None:
    ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, n)
                                                  for n in range(2)]))
    with node_service(ship.config) as service:
        service.revoke(ship.node_id, Actor("security", "lost ship"), ship.clock())
    ship.clock.advance(dt.timedelta(seconds=6))  # Past the credential cache's 5 s.
    answer = ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, 3)]))
    assert (answer.status, answer.error().reason_code) == (401, "NODE_REVOKED")
    assert len(inbox_rows(database, ship.node_id)) == 2
    assert body_count(database, ship.node_id) == 1


def test_a_rotated_secret_overlaps_then_expires(ship: Ship) -> None:
    old_client = ship.client
    assert old_client.heartbeat(heartbeat(ship.node_id, ship.clock())).status == 200
    with node_service(ship.config) as service:
        new = service.rotate(ship.node_id, dt.timedelta(hours=1), ACTOR, ship.clock())
    new_client = dataclasses.replace(ship.client, secret=new.secret)
    # Within the cache's 5 s the new secret works already: a failed signature re-reads the
    # node when its cached credentials are older than a second.
    ship.clock.advance(dt.timedelta(seconds=1.5))
    assert new_client.heartbeat(heartbeat(ship.node_id, ship.clock())).status == 200
    ship.clock.advance(dt.timedelta(minutes=59))
    assert old_client.heartbeat(heartbeat(ship.node_id, ship.clock())).status == 200
    ship.clock.advance(dt.timedelta(minutes=2))
    late = old_client.heartbeat(heartbeat(ship.node_id, ship.clock()))
    assert (late.status, late.error().reason_code) == (401, "AUTH_BAD_SIGNATURE")
    assert new_client.heartbeat(heartbeat(ship.node_id, ship.clock())).status == 200


def test_client_certificate_identity_from_a_trusted_proxy(
    ship_factory: Callable[..., Ship],
) -> None:
    ship = ship_factory(client_identity_header="X-Client-Cert-Subject",
                        trusted_proxies=("127.0.0.1",))
    beat = heartbeat(ship.node_id, ship.clock())
    other = ship.client.heartbeat(beat, headers={"X-Client-Cert-Subject": "CN=ship-other,O=X"})
    assert (other.status, other.error().reason_code) == (401, "AUTH_IDENTITY_MISMATCH")
    own = ship.client.heartbeat(beat, headers={
        "X-Client-Cert-Subject": f"CN={ship.node_id},O=Fleet"})
    assert own.status == 200
    assert ship.client.heartbeat(beat).status == 200  # No certificate presented: HMAC alone.


# ----------------------------------------------------------------------------- limits


def test_a_zstd_bomb_is_refused_quickly_without_inflating_it(
    ship_factory: Callable[..., Ship], database: PostgresDatabase,
) -> None:
    ship = ship_factory(max_decompressed_bytes=16 << 20)
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    zeros = bytes(1 << 20)
    bomb = b"".join(compressor.compress(zeros) for _ in range(1024)) + compressor.flush()
    assert len(bomb) < 1 << 20  # 1 GiB of zeros
    tracemalloc.start()
    try:
        started = time.perf_counter()
        answer = ship.client.upload(bomb)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (answer.status, answer.error().reason_code) == (413, "DECOMPRESSED_TOO_LARGE")
    assert elapsed < 10
    assert peak < 128 << 20, peak
    assert inbox_rows(database, ship.node_id) == []


def test_oversized_bodies_and_batches(ship_factory: Callable[..., Ship]) -> None:
    ship = ship_factory(max_compressed_bytes=64 << 10, max_events_per_batch=5)
    events = [make_event(ship.node_id, n) for n in range(6)]
    too_many = ship.client.upload(batch_body(ship.node_id, events))
    assert (too_many.status, too_many.error().reason_code) == (413, "TOO_MANY_EVENTS")
    huge = os.urandom(65 << 10)
    too_big = ship.client.upload(huge)
    assert (too_big.status, too_big.error().reason_code) == (413, "PAYLOAD_TOO_LARGE")


def test_an_unknown_protocol_major_is_upgrade_required(ship: Ship) -> None:
    answer = ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, 1)],
                                           version="3.0"))
    error = answer.error()
    assert (answer.status, error.reason_code) == (426, "UNSUPPORTED_PROTOCOL")
    assert list(error.supported_protocol_versions) == ["1.0", "2.0"]
    minor = ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, 1)],
                                          version="1.7"))
    assert minor.status == 200


def test_the_request_rate_is_limited_per_node(ship_factory: Callable[..., Ship]) -> None:
    ship = ship_factory(node_requests_per_second=1, node_request_burst=2)
    beat = heartbeat(ship.node_id, ship.clock())
    assert [ship.client.heartbeat(beat).status for _ in range(2)] == [200, 200]
    limited = ship.client.heartbeat(beat)
    assert (limited.status, limited.error().reason_code) == (429, "RATE_LIMITED")
    assert int(limited.headers["retry-after"]) >= 1
    ship.clock.advance(dt.timedelta(seconds=1))
    assert ship.client.heartbeat(beat).status == 200


# ----------------------------------------------------------------------------- receipts


def test_receipts_page_through_the_nodes_own_results(
    ship: Ship, database: PostgresDatabase,
) -> None:
    other = f"{PREFIX}{secrets.token_hex(4)}"
    with database.connect() as conn:
        base = conn.execute("SELECT COALESCE(max(seq), 0) FROM receipt").fetchone()[0]  # type: ignore[index]
        rows = [(base + n + 1, ship.node_id if n % 3 else other, uuid.uuid4(),
                 "CONFLICT_RECORDED" if n == 4 else "APPLIED", None,
                 uuid.uuid4() if n == 4 else None, START, "topic-a", 1, 100 + n)
                for n in range(9)]
        conn.cursor().executemany(
            "INSERT INTO receipt (seq, origin_node_id, event_id, result, reason_code,"
            " conflict_id, decided_at, source_topic, source_partition, source_position)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
    mine = [row for row in rows if row[1] == ship.node_id]
    seen: list[pb.EventResult] = []
    cursor, pages = "", 0
    while True:
        page = ship.client.receipts(cursor, limit=4).message(pb.ReceiptsPage)
        seen += page.results
        cursor, pages = page.next_cursor, pages + 1
        if not page.has_more:
            break
    assert pages == 2
    assert [uuid.UUID(bytes=r.event_id) for r in seen] == [row[2] for row in mine]
    assert [r.source_position for r in seen] == [row[9] for row in mine]
    conflict = next(r for r in seen if r.result == pb.CONFLICT_RECORDED)
    assert uuid.UUID(bytes=conflict.conflict_id) == rows[4][5]
    # Nothing new: the same cursor comes back with an empty page.
    empty = ship.client.receipts(cursor).message(pb.ReceiptsPage)
    assert (list(empty.results), empty.next_cursor, empty.has_more) == ([], cursor, False)


def test_receipts_refuse_bad_cursors_and_versions(ship: Ship) -> None:
    bad = ship.client.receipts("not-a-cursor")
    assert (bad.status, bad.error().reason_code) == (400, "BAD_CURSOR")
    future = ship.client.receipts(version="9.0")
    assert (future.status, future.error().reason_code) == (426, "UNSUPPORTED_PROTOCOL")
    missing = ship.client.receipts(version="")
    assert (missing.status, missing.error().reason_code) == (400, "MALFORMED_PROTOCOL_VERSION")


# ----------------------------------------------------------------------------- heartbeat


def heartbeat(node_id: str, now: dt.datetime) -> pb.Heartbeat:
    micros = (now - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    beat = pb.Heartbeat(protocol_version="1.0", node_id=node_id, client_version="0.1.0",
                        sent_at_micros=micros, active_config_version="cfg-3")
    beat.health.add(subsystem=pb.CAPTURE, state=pb.HEALTHY)
    beat.health.add(subsystem=pb.TRANSPORT, state=pb.DEGRADED, reason_code="LINK_SLOW")
    beat.backlog.add(direction=pb.UPLINK, topic="sync.cdc.erp", partition=2, end_offset=900,
                     received_offset=700, terminal_offset=650, bytes=123_456,
                     estimated_compressed_bytes=20_000, oldest_captured_at_micros=micros - 10**9,
                     rule_id="erp-bidirectional")
    beat.throughput.add(direction=pb.UPLINK, window_start_micros=micros - 60 * 10**6,
                        window_seconds=60, payload_bytes_confirmed=50_000,
                        physical_bytes=61_000, active_transfer_seconds=41.5)
    return beat


def test_heartbeats_store_health_backlog_and_throughput(
    ship: Ship, database: PostgresDatabase,
) -> None:
    beat = heartbeat(ship.node_id, ship.clock())
    answer = ship.client.heartbeat(beat)
    assert answer.status == 200
    response = answer.message(pb.HeartbeatResponse)
    assert response.next_interval_seconds == 60
    assert response.server_time_micros == beat.sent_at_micros
    assert ship.client.heartbeat(beat).status == 200  # resent: samples stored once
    (latest,) = query(database, "SELECT client_version, active_config_version, health"
                      " FROM node_heartbeat WHERE node_id = %s", ship.node_id)
    assert latest[:2] == ("0.1.0", "cfg-3")
    assert [(h["subsystem"], h["state"]) for h in latest[2]] == [
        ("CAPTURE", "HEALTHY"), ("TRANSPORT", "DEGRADED")]
    samples = query(database, "SELECT kind, direction, topic, source_partition, end_offset,"
                    " terminal_offset, backlog_bytes, physical_bytes FROM metric_sample"
                    " WHERE node_id = %s ORDER BY kind", ship.node_id)
    assert samples == [("BACKLOG", "UPLINK", "sync.cdc.erp", 2, 900, 650, 123_456, None),
                       ("THROUGHPUT", "UPLINK", None, None, None, None, None, 61_000)]
    forged = heartbeat(PREFIX + "someone-else", ship.clock())
    refused = ship.client.heartbeat(forged)
    assert (refused.status, refused.error().reason_code) == (403, "NODE_MISMATCH")


# ----------------------------------------------------------------------------- outages


def test_postgres_down_answers_503_and_keeps_nothing(
    database: PostgresDatabase, clock: FakeClock,
) -> None:
    """The nodes live in the real database; the sync tables point at a closed port."""
    config = make_config(database)
    node_id = f"{PREFIX}{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    down = f"host=127.0.0.1 port={closed_port()} dbname=x user=x connect_timeout=2"
    with running(config, clock, sync_conninfo=down) as url:
        client = SyncClient(url, node_id, secret, clock)
        answer = client.upload(batch_body(node_id, [make_event(node_id, 1)]))
        assert answer.status == 503 and answer.headers["retry-after"] == "5"
        assert answer.error().reason_code == "STORE_UNAVAILABLE"
    assert inbox_rows(database, node_id) == []


def test_event_store_down_answers_503(database: PostgresDatabase, clock: FakeClock) -> None:
    config = make_config(database)
    config = dataclasses.replace(config, event_store=dataclasses.replace(
        config.event_store, postgres_port=closed_port()))
    with running(config, clock) as url:
        client = SyncClient(url, PREFIX + "anything", os.urandom(32), clock)
        answer = client.heartbeat(heartbeat(PREFIX + "anything", clock()))
        assert answer.status == 503 and answer.headers["retry-after"] == "5"


def test_health_and_version_still_answer(ship: Ship) -> None:
    assert send(ship.client.url, "GET", "/version", b"", {}).status == 200


def test_signing_covers_the_query(ship: Ship) -> None:
    """A signature made for one cursor does not authenticate another."""
    signed = sign_request(ship.node_id, ship.secret, "GET", "/sync/v1/receipts?cursor=1",
                          b"", ship.clock(), str(uuid.uuid4()))
    answer = send(ship.client.url, "GET", "/sync/v1/receipts?cursor=2", b"",
                  {**signed, codec.PROTOCOL_VERSION_HEADER: "1.0"})
    assert (answer.status, answer.error().reason_code) == (401, "AUTH_BAD_SIGNATURE")
