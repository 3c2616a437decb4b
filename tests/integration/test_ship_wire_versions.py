"""Wire versions across a fleet, on real services: a ship pinned to wire version 1 and a ship
on version 2 (with zstd dictionaries) sync through one shore; a ship of version 2 facing a
shore that takes major 1 only falls back to it by itself and delivers everything."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import uuid
from typing import Any

import pytest

from tests.clocks import WallClock
from tests.integration.ship_support import ItemsCapture, RunningShore, produce
from tests.integration.shore_support import ITEMS_DDL
from tests.integration.test_ingress import ACTOR, node_service
from tests.integration.test_ship_client import (
    check_shore,
    ship_config,
    shore_for_ship,
    workload,
)
from tests.unit.test_wire_dictionaries import ship_events, trained
from tidesync.bootstrap.ship import build_client
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.node import secret_from_text, secret_text
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.client import ExitCode
from tidesync.ship.telemetry import Subsystem
from tidesync.ship.transport import HttpShoreLink, ShoreRefused
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.batches import check_batch_shape, inflate
from tidesync.wire.dictionaries import (
    compress_with,
    dictionary_id,
    load_dictionary,
    named_dictionary,
)

pytestmark = pytest.mark.services

MiB = 1 << 20


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[bytes]]:
    """Every upload body ships send over HTTP, by node."""
    bodies: dict[str, list[bytes]] = {}
    upload = HttpShoreLink.upload

    def recorded(link: HttpShoreLink, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        bodies.setdefault(link.node_id, []).append(batch.body)
        return upload(link, batch)
    monkeypatch.setattr(HttpShoreLink, "upload", recorded)
    return bodies


def second_ship(shore: RunningShore, shore_mariadb: Any, database: str) -> RunningShore:
    """Another registered node of the same shore, whose rows go to `database`."""
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")
    conn.close()
    node_id = f"it-ship-{secrets.token_hex(4)}"
    with node_service(shore.config) as service:  # type: ignore[arg-type]
        issued = service.register(node_id, ACTOR, WallClock()())
    return dataclasses.replace(shore, node_id=node_id, secret_text=secret_text(issued.secret),
                               database=database)


def dictionaries_of(pg_database: Any, node_id: str) -> dict[bytes, bytes]:
    with pg_database.connect() as conn:
        rows = conn.execute("SELECT dictionary_id, content FROM wire_dictionary"
                            " WHERE origin_node_id = %s", (node_id,)).fetchall()
    return {bytes(name): bytes(content) for name, content in rows}


def sent_versions(bodies: list[bytes], dictionaries: dict[bytes, bytes]) -> list[str]:
    """The protocol version of each body (read with the node's dictionaries)."""
    loaded = {name: load_dictionary(content) for name, content in dictionaries.items()}
    return [(check_batch_shape(inflate(body, MiB, 8 * MiB, loaded.get), 10_000) or b"").decode()
            for body in bodies]


def sent_events(bodies: list[bytes], dictionaries: dict[bytes, bytes]) -> list[ChangeEvent]:
    loaded = {name: load_dictionary(content) for name, content in dictionaries.items()}
    events: list[ChangeEvent] = []
    for body in bodies:
        events += codec.decode_batch(body, MiB, 8 * MiB, dictionaries=loaded.get).events
    return events


def stored_events(pg_database: Any, node_id: str) -> tuple[list[ChangeEvent], set[str]]:
    """The events of the node's stored batch bodies, and those bodies' protocol versions."""
    with pg_database.connect() as conn:
        bodies = [bytes(row[0]) for row in conn.execute(
            "SELECT body FROM inbox_batch WHERE origin_node_id = %s", (node_id,)).fetchall()]
    events: list[ChangeEvent] = []
    versions = set()
    for body in bodies:
        decoded = codec.decode_batch(codec.compress_bytes(body), 8 * MiB, 8 * MiB)
        versions.add(decoded.protocol_version)
        events += decoded.events
    return events, versions


def essence(event: ChangeEvent) -> tuple[Any, ...]:
    return (event.event_id, event.source_topic, event.source_partition, event.source_position,
            event.record, event.operation, event.after, event.result_revision)


def inbox_ids(pg_database: Any, node_id: str) -> set[Any]:
    with pg_database.connect() as conn:
        return {row[0] for row in conn.execute(
            "SELECT event_id FROM inbox_event WHERE origin_node_id = %s", (node_id,))}


def test_a_v1_ship_and_a_v2_ship_sync_through_one_shore(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path, sent):
    databases = [make_mariadb_database(shore_mariadb) for _ in range(2)]
    captures = [ItemsCapture(database) for database in databases]
    counts = []
    for capture in captures:
        kafka_broker.create_topic(capture.topic, partitions=2)
        records = workload(capture, rows=150, updates=150, deletes=10)
        produce(kafka_broker.bootstrap_servers, records, partitions=2)
        counts.append(sum(1 for r in records if r.value is not None))
    with shore_for_ship(pg_database, shore_mariadb, databases[0], worker=False) as first:
        second = second_ship(first, shore_mariadb, databases[1])
        first.start_worker()
        for shore, version, events in ((first, 1, counts[0]), (second, 2, counts[1])):
            config = ship_config(shore, kafka_broker, tmp_path / f"ship-v{version}.sqlite",
                                 wire_version=version, batch_max_events=10)
            client = build_client(config)
            try:
                assert client.run(until_idle=True, timeout=90) is ExitCode.IDLE
                assert client.state.state_counts() == {"TERMINAL": events}
                assert client.uploads.wire_version == version
            finally:
                client.close()
        for shore, capture, events in ((first, captures[0], counts[0]),
                                       (second, captures[1], counts[1])):
            check_shore(pg_database, shore_mariadb, shore, capture, events)

    # What each ship sent: the pinned one major 1 only, the other major 2, part of it with a
    # dictionary it trained and the shore keeps for it alone.
    v1_dictionaries = dictionaries_of(pg_database, first.node_id)
    v2_dictionaries = dictionaries_of(pg_database, second.node_id)
    assert v1_dictionaries == {}
    assert 1 <= len(v2_dictionaries) <= 4
    assert set(sent_versions(sent[first.node_id], {})) == {"1.0"}
    assert set(sent_versions(sent[second.node_id], v2_dictionaries)) == {"2.0"}
    named = {named_dictionary(body)[0] for body in sent[second.node_id]} - {None}
    assert named and named <= set(v2_dictionaries)
    # The same changes cost fewer bytes in major 2.
    v1_bytes = sum(map(len, sent[first.node_id]))
    v2_bytes = sum(map(len, sent[second.node_id]))
    assert v2_bytes < 0.8 * v1_bytes

    # The shore stores both ships' batches the same way (as major 1), with the ids the ships
    # recorded; what it stores is what they sent.
    for shore, dictionaries, events in ((first, {}, counts[0]),
                                        (second, v2_dictionaries, counts[1])):
        stored, versions = stored_events(pg_database, shore.node_id)
        assert versions == {"1.0"}
        sent_by_id = {e.event_id: essence(e) for e in sent_events(sent[shore.node_id],
                                                                   dictionaries)}
        assert {e.event_id: essence(e) for e in stored} == sent_by_id
        assert len(sent_by_id) == events
        assert set(sent_by_id) == inbox_ids(pg_database, shore.node_id)
        assert all(e.event_id == e.expected_event_id() for e in stored)


def test_a_v2_ship_falls_back_to_v1_on_a_shore_that_takes_major_1_only(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path, sent):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=2)
    records = workload(capture, rows=80, updates=40, deletes=5)
    produce(kafka_broker.bootstrap_servers, records, partitions=2)
    events = sum(1 for r in records if r.value is not None)
    with shore_for_ship(pg_database, shore_mariadb, database, accept_wire_v2=False) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite", batch_max_events=10)
        assert config.wire_version == 2
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=90) is ExitCode.IDLE
            assert client.state.state_counts() == {"TERMINAL": events}
            assert client.uploads.wire_version == 1
            transport = client.health.get(Subsystem.TRANSPORT)
            assert transport is None or transport.state != "BLOCKED"
        finally:
            client.close()
        check_shore(pg_database, shore_mariadb, shore, capture, events)
    bodies = sent[shore.node_id]
    versions = sent_versions(bodies, {})
    # The first uploads tried major 2 and were refused; every event then went as major 1.
    assert versions[0] == "2.0" and "1.0" in versions
    major_1 = [body for body, version in zip(bodies, versions, strict=True) if version == "1.0"]
    assert len({e.event_id for e in sent_events(major_1, {})}) == events
    assert dictionaries_of(pg_database, shore.node_id) == {}


def test_the_shore_refuses_an_unknown_dictionary_until_the_ship_sends_it(
        pg_database, shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    with shore_for_ship(pg_database, shore_mariadb, database, worker=False) as shore:
        link = HttpShoreLink(shore.url, shore.node_id, secret_from_text(shore.secret_text),
                             clock=WallClock())
        try:
            events = [dataclasses.replace(e, origin_node_id=shore.node_id)
                      for e in ship_events(10, seed=7, start=700)]
            events = [dataclasses.replace(e, event_id=e.expected_event_id()) for e in events]
            raw = codec.serialize_batch(codec.build_any_batch(
                events, node_id=shore.node_id, batch_id=uuid.uuid4(), created_at=WallClock()(),
                wire_version=2))
            content = trained()
            name = dictionary_id(content)
            body = compress_with(raw, load_dictionary(content), name)
            batch = OutgoingBatch(uuid.uuid4(), tuple(events), body, len(raw), 2)
            with pytest.raises(ShoreRefused) as refused:
                link.upload(batch)
            assert (refused.value.status, refused.value.reason) == (409, "UNKNOWN_DICTIONARY")
            assert inbox_ids(pg_database, shore.node_id) == set()

            answer = link.send_dictionary(pb.WireDictionary(
                protocol_version="2.0", node_id=shore.node_id, dictionary=content))
            assert answer.dictionary_id == name == hashlib.sha256(content).digest()
            response = link.upload(batch)
            assert all(s.status == pb.RECEIVED for s in response.statuses)
            assert inbox_ids(pg_database, shore.node_id) == {e.event_id for e in events}

            with pytest.raises(ShoreRefused) as bad:
                link.send_dictionary(pb.WireDictionary(
                    protocol_version="2.0", node_id=shore.node_id, dictionary=os.urandom(900)))
            assert (bad.value.status, bad.value.reason) == (400, "BAD_DICTIONARY")
            for count in range(30, 36):  # the shore keeps the latest few per node
                link.send_dictionary(pb.WireDictionary(
                    protocol_version="2.0", node_id=shore.node_id, dictionary=trained(count)))
            kept = dictionaries_of(pg_database, shore.node_id)
            assert len(kept) == 4 and name not in kept
        finally:
            link.close()
