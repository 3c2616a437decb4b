"""The shore sync API on the embedded SQLite store: a real uvicorn server, signed requests over
HTTP, nodes, inbox, request ids, receipts and heartbeats all in one SQLite file. The receive
semantics are those of the PostgreSQL inbox (test_ingress.py). Needs no service."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import secrets
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.sync_client import SyncClient, send
from tests.integration.test_ingress import (
    ACTOR,
    MASTER_KEY,
    START,
    FakeClock,
    batch_body,
    heartbeat,
    make_event,
    node_service,
    running,
    statuses,
)
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShoreConfig
from tidesync.sqlite_store import moment_text
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb


def sqlite_config(path: Path, **shore: Any) -> Config:
    settings: dict[str, Any] = {"master_key": MASTER_KEY, "database_pool_size": 4,
                                "database_timeout_seconds": 2, "node_requests_per_second": 1000,
                                "node_request_burst": 1000, **shore}
    return Config(shore=ShoreConfig(**settings), event_store=EventStoreConfig(
        kind=EventStoreKind.SQLITE, sqlite_path=str(path)))


@dataclasses.dataclass
class Ship:
    node_id: str
    secret: bytes
    client: SyncClient
    clock: FakeClock
    config: Config
    path: Path

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            return conn.execute(sql, params).fetchall()

    def inbox(self) -> list[tuple[Any, ...]]:
        return self.query("SELECT event_id, batch_ref, batch_index, source_topic,"
                          " source_partition, source_position, source_sequence, replay_epoch,"
                          " state FROM inbox_event WHERE origin_node_id = ?"
                          " ORDER BY source_position", self.node_id)

    def bodies(self) -> int:
        return int(self.query("SELECT count(*) FROM inbox_batch WHERE origin_node_id = ?",
                              self.node_id)[0][0])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ship_factory(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Ship]]:
    """`ship_factory(**shore_settings)`: a node registered, a server on the SQLite store."""
    stack = contextlib.ExitStack()
    path = tmp_path / "shore-events.sqlite"

    def make(**shore: Any) -> Ship:
        config = sqlite_config(path, **shore)
        node_id = f"sq-{secrets.token_hex(4)}"
        with node_service(config) as service:
            issued = service.register(node_id, ACTOR, clock())
        url = stack.enter_context(running(config, clock))
        return Ship(node_id, issued.secret, SyncClient(url, node_id, issued.secret, clock),
                    clock, config, path)

    with stack:
        yield make


@pytest.fixture
def ship(ship_factory: Callable[..., Ship]) -> Ship:
    return ship_factory()


def test_signed_upload_is_received_and_stored(ship: Ship) -> None:
    events = [make_event(ship.node_id, n) for n in range(3)]
    assert statuses(ship.client.upload(batch_body(ship.node_id, events))) == [("RECEIVED", "")] * 3
    rows = ship.inbox()
    assert [(uuid.UUID(r[0]), r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows] == [
        (e.event_id, i, e.source_topic, e.source_partition, e.source_position,
         e.source_sequence, 0, "PENDING") for i, e in enumerate(events)
    ]
    (body,) = ship.query("SELECT body FROM inbox_batch WHERE batch_ref = ?", rows[0][1])[0]
    stored = codec.parse_message(body, pb.UploadBatch)
    names = codec.NameTable(stored.strings)
    assert [codec.event_from_wire(stored.events[r[2]], names) for r in rows] == [
        codec.as_received(e) for e in events
    ]
    mode = ship.query("PRAGMA journal_mode")[0][0]
    assert mode == "wal"


def test_a_resent_batch_is_received_again_without_new_rows(ship: Ship) -> None:
    events = [make_event(ship.node_id, n) for n in range(4)]
    assert statuses(ship.client.upload(batch_body(ship.node_id, events))) == [
        ("RECEIVED", "")] * 4
    again = batch_body(ship.node_id, list(reversed(events)))  # other batch id, other names
    assert statuses(ship.client.upload(again)) == [("RECEIVED", "DUPLICATE_EVENT")] * 4
    assert len(ship.inbox()) == 4
    assert ship.bodies() == 1


def test_a_partly_new_batch_stores_a_body_for_the_new_events(ship: Ship) -> None:
    first = [make_event(ship.node_id, n) for n in range(2)]
    ship.client.upload(batch_body(ship.node_id, first))
    more = [*first, make_event(ship.node_id, 2)]
    assert statuses(ship.client.upload(batch_body(ship.node_id, more))) == [
        ("RECEIVED", "DUPLICATE_EVENT"), ("RECEIVED", "DUPLICATE_EVENT"), ("RECEIVED", "")]
    rows = ship.inbox()
    assert len(rows) == 3 and rows[2][2] == 2 and rows[2][1] != rows[0][1]
    assert ship.bodies() == 2


def test_same_event_id_with_other_content_is_an_integrity_mismatch(
    ship: Ship, caplog: pytest.LogCaptureFixture,
) -> None:
    original = make_event(ship.node_id, 1, amount="10.50")
    ship.client.upload(batch_body(ship.node_id, [original]))
    forged = dataclasses.replace(original, after={**original.after, "amount": "99.99"})  # type: ignore[dict-item]
    answer = ship.client.upload(batch_body(ship.node_id, [forged, make_event(ship.node_id, 2)]))
    assert statuses(answer) == [("PERMANENT_REJECTED", "INTEGRITY_MISMATCH"), ("RECEIVED", "")]
    rejected = ship.query("SELECT event_id, reason_code, content_digest FROM receive_rejection"
                          " WHERE origin_node_id = ?", ship.node_id)
    assert [(r[0], r[1]) for r in rejected] == [(str(original.event_id), "INTEGRITY_MISMATCH")]
    assert len(rejected[0][2]) == 32
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert str(original.event_id) in logged
    assert "99.99" not in logged and "10.50" not in logged and "seal kit" not in logged
    assert len(ship.inbox()) == 2


def test_the_same_event_twice_in_one_batch(ship: Ship) -> None:
    event = make_event(ship.node_id, 5)
    changed = dataclasses.replace(event, trace_id="another trace")
    answer = ship.client.upload(batch_body(ship.node_id, [event, event, changed]))
    assert statuses(answer) == [("RECEIVED", ""), ("RECEIVED", ""),
                                ("PERMANENT_REJECTED", "INTEGRITY_MISMATCH")]
    assert len(ship.inbox()) == 1


def test_forged_origin_is_rejected_per_event(ship: Ship) -> None:
    own = make_event(ship.node_id, 1)
    forged = make_event("someone-else", 2)
    answer = ship.client.upload(batch_body(ship.node_id, [own, forged]))
    assert statuses(answer) == [("RECEIVED", ""), ("PERMANENT_REJECTED", "FORGED_ORIGIN")]
    assert [uuid.UUID(r[0]) for r in ship.inbox()] == [own.event_id]
    assert ship.query("SELECT count(*) FROM inbox_event WHERE origin_node_id = ?",
                      "someone-else") == [(0,)]
    assert ship.query("SELECT event_id, reason_code FROM receive_rejection"
                      " WHERE origin_node_id = ?", ship.node_id) == [
        (str(forged.event_id), "FORGED_ORIGIN")]


def test_a_resent_event_with_a_result_answers_with_it(ship: Ship) -> None:
    event = make_event(ship.node_id, 7)
    ship.client.upload(batch_body(ship.node_id, [event]))
    with contextlib.closing(sqlite3.connect(ship.path, isolation_level=None)) as conn:
        conn.execute("UPDATE inbox_event SET state = 'TERMINAL', result = 'APPLIED'"
                     " WHERE origin_node_id = ?", (ship.node_id,))
        conn.execute(
            "INSERT INTO receipt (seq, origin_node_id, event_id, result, reason_code,"
            " result_revision, decided_at, source_topic, source_partition, source_position)"
            " VALUES ((SELECT COALESCE(max(seq), 0) + 1 FROM receipt), ?, ?, 'APPLIED', NULL,"
            " ?, ?, ?, ?, ?)",
            (ship.node_id, str(event.event_id), event.result_revision.value,  # type: ignore[union-attr]
             moment_text(START), event.source_topic, event.source_partition,
             event.source_position))
    response = ship.client.upload(batch_body(ship.node_id, [event])).message(
        pb.UploadBatchResponse)
    (status,) = response.statuses
    assert status.status == pb.RECEIVED and status.reason_code == "DUPLICATE_EVENT"
    assert status.result.result == pb.APPLIED
    assert status.result.result_revision == event.result_revision.value  # type: ignore[union-attr]
    assert status.result.source_position == event.source_position
    assert status.result.decided_at_micros == (START - dt.datetime(
        1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def test_a_replayed_request_is_refused_even_after_a_restart(ship: Ship) -> None:
    body = batch_body(ship.node_id, [make_event(ship.node_id, 1)])
    request_id = str(uuid.uuid4())
    assert ship.client.upload(body, request_id=request_id).status == 200
    replay = ship.client.upload(body, request_id=request_id)
    assert replay.status == 401 and replay.error().reason_code == "AUTH_REPLAYED"
    with running(ship.config, ship.clock) as url:  # a new server process, same file
        client = dataclasses.replace(ship.client, url=url)
        again = client.upload(body, request_id=request_id)
        assert again.status == 401 and again.error().reason_code == "AUTH_REPLAYED"
        assert client.upload(body).status == 200


def test_receipts_page_through_the_nodes_own_results(ship: Ship) -> None:
    other = f"sq-{secrets.token_hex(4)}"
    rows = [(n + 1, ship.node_id if n % 3 else other, uuid.uuid4(),
             "CONFLICT_RECORDED" if n == 4 else "APPLIED", None,
             uuid.uuid4() if n == 4 else None, START, "topic-a", 1, 100 + n)
            for n in range(9)]
    with contextlib.closing(sqlite3.connect(ship.path, isolation_level=None)) as conn:
        conn.executemany(
            "INSERT INTO receipt (seq, origin_node_id, event_id, result, reason_code,"
            " conflict_id, decided_at, source_topic, source_partition, source_position)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(r[0], r[1], str(r[2]), r[3], r[4], r[5] and str(r[5]), moment_text(r[6]),
              *r[7:]) for r in rows])
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
    empty = ship.client.receipts(cursor).message(pb.ReceiptsPage)
    assert (list(empty.results), empty.next_cursor, empty.has_more) == ([], cursor, False)
    bad = ship.client.receipts("not-a-cursor")
    assert (bad.status, bad.error().reason_code) == (400, "BAD_CURSOR")


def test_heartbeats_store_health_backlog_and_throughput(ship: Ship) -> None:
    beat = heartbeat(ship.node_id, ship.clock())
    answer = ship.client.heartbeat(beat)
    assert answer.status == 200
    assert answer.message(pb.HeartbeatResponse).server_time_micros == beat.sent_at_micros
    assert ship.client.heartbeat(beat).status == 200  # resent: samples stored once
    (latest,) = ship.query("SELECT client_version, active_config_version, health"
                           " FROM node_heartbeat WHERE node_id = ?", ship.node_id)
    assert latest[:2] == ("0.1.0", "cfg-3")
    assert [(h["subsystem"], h["state"]) for h in json.loads(latest[2])] == [
        ("CAPTURE", "HEALTHY"), ("TRANSPORT", "DEGRADED")]
    samples = ship.query("SELECT kind, direction, topic, source_partition, end_offset,"
                         " terminal_offset, backlog_bytes, physical_bytes FROM metric_sample"
                         " WHERE node_id = ? ORDER BY kind", ship.node_id)
    assert samples == [("BACKLOG", "UPLINK", "sync.cdc.erp", 2, 900, 650, 123_456, None),
                       ("THROUGHPUT", "UPLINK", None, None, None, None, None, 61_000)]
    # An older heartbeat arriving late does not replace the latest.
    older = heartbeat(ship.node_id, ship.clock() - dt.timedelta(minutes=1))
    older.client_version = "0.0.9"
    assert ship.client.heartbeat(older).status == 200
    assert ship.query("SELECT client_version FROM node_heartbeat WHERE node_id = ?",
                      ship.node_id) == [("0.1.0",)]


def test_a_busy_store_answers_503_and_keeps_nothing(ship_factory: Callable[..., Ship]) -> None:
    """Another writer holds the file's write lock longer than the request may wait."""
    ship = ship_factory(database_timeout_seconds=1)
    holder = sqlite3.connect(ship.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        answer = ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, 1)]))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert answer.status == 503 and answer.headers["retry-after"] == "5"
    assert answer.error().reason_code == "STORE_UNAVAILABLE"
    assert ship.inbox() == []
    # The same request, retried once the lock is free, is received (its id was not used).
    assert statuses(ship.client.upload(batch_body(ship.node_id, [make_event(ship.node_id, 1)]),
                                       request_id=ship.client.sent_request_ids[-1])) == [
        ("RECEIVED", "")]
    assert send(ship.client.url, "GET", "/healthz", b"", {}).status == 200
