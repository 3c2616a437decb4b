"""One-way uplink end to end on real services: signed uploads over HTTP into the shore inbox,
the apply worker writing the shore MariaDB, receipts pulled back over HTTP by cursor.

Duplicates, a replayed request and a forged origin are thrown in; at the end the ledger, the
rows and the receipts agree that every event was applied exactly once."""

from __future__ import annotations

import dataclasses
import secrets
from decimal import Decimal

import pytest

from tests.integration.shore_support import ITEMS_DDL, ShipLog, ledger_ids
from tests.integration.sync_client import SyncClient
from tests.integration.test_ingress import (
    ACTOR,
    FakeClock,
    batch_body,
    make_config,
    node_service,
    running,
    statuses,
)
from tidesync.bootstrap.shore import build_worker
from tidesync.bootstrap.target import mysql_target_applier
from tidesync.config import TargetConfig
from tidesync.domain.change_event import ChangeEvent
from tidesync.migrations import migrate_postgres
from tidesync.shore.processor import ProcessorSettings
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services


def pull_all_receipts(client: SyncClient, page: int = 7) -> list[pb.EventResult]:
    results: list[pb.EventResult] = []
    cursor = ""
    while True:
        answer = client.receipts(cursor, limit=page)
        assert answer.status == 200, answer.error()
        receipts = answer.message(pb.ReceiptsPage)
        results += list(receipts.results)
        cursor = receipts.next_cursor or cursor
        if not receipts.has_more:
            return results


def workload(ship: ShipLog) -> tuple[list[ChangeEvent], list[list[ChangeEvent]]]:
    """Inserts, updates and deletes of one ship, and the three batches they travel in."""
    events = [ship.insert(k, f"part-{k}", k, f"{k}.25") for k in range(1, 41)]
    events += [ship.update(k, qty=k * 2) for k in range(1, 21)]
    events += [ship.delete(k) for k in range(35, 41)]
    batches = [events[0:25], events[25:50], events[50:]]
    return events, batches


def upload_with_mishaps(client: SyncClient, node_id: str, batches: list[list[ChangeEvent]],
                        database: str) -> None:
    """Upload the batches, one of them twice; a replayed request and a forged origin are
    refused, the rest received."""
    for batch in batches:
        assert {s for s, _ in statuses(client.upload(batch_body(node_id, batch)))} == {
            "RECEIVED"}
    # The ship did not hear the answer and sends the middle batch again.
    again = statuses(client.upload(batch_body(node_id, batches[1])))
    assert {s for s, _ in again} == {"RECEIVED"}
    # A captured request replayed by someone else is refused.
    replayed = client.upload(batch_body(node_id, batches[0]),
                             request_id=client.sent_request_ids[0])
    assert replayed.status == 401 and replayed.error().reason_code == "AUTH_REPLAYED"
    # An event claiming another node as its origin is rejected, the rest received.
    forged = ShipLog("someone-else", database)
    mixed = statuses(client.upload(batch_body(node_id, [forged.insert(99, "x", 1, "1")])))
    assert mixed == [("PERMANENT_REJECTED", "FORGED_ORIGIN")]


def test_uplink_applies_every_event_exactly_once(pg_database, shore_mariadb,
                                                 make_mariadb_database):
    migrate_postgres(pg_database.dsn)
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, database, "items", "shore")

    clock = FakeClock()
    config = make_config(pg_database)
    node_id = f"e2e-{secrets.token_hex(4)}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    ship = ShipLog(node_id, database)
    events, batches = workload(ship)

    with running(config, clock) as url:
        client = SyncClient(url, node_id, secret, clock)
        upload_with_mishaps(client, node_id, batches, ship.database)

        target = TargetConfig(host=shore_mariadb.host, port=shore_mariadb.port,
                              user=shore_mariadb.user, password=shore_mariadb.password,
                              node_id="shore")
        applier = mysql_target_applier(target, lambda db, table: (db, table))
        worker, close = build_worker(dataclasses.replace(config, target=target), applier,
                                     settings=ProcessorSettings(chunk_size=10))
        try:
            while worker.run_once() > 0:
                pass
        finally:
            close()

        receipts = pull_all_receipts(client)
    expected = {e.event_id.bytes for e in events}
    assert [r.event_id for r in receipts if r.event_id in expected] == [
        r.event_id for r in receipts]  # nothing of other nodes leaks in
    assert sorted(r.event_id for r in receipts) == sorted(expected)  # each exactly once
    assert {pb.EventResultCode.Name(r.result) for r in receipts} == {"APPLIED"}

    ledger = ledger_ids(conn, database)
    assert sorted(ledger) == sorted(str(e.event_id) for e in events)
    with conn.cursor() as cursor:
        cursor.execute("SELECT id, name, qty, price, _sync_revision FROM items ORDER BY id")
        rows = cursor.fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (k, f"part-{k}", k * 2 if k <= 20 else k, Decimal(f"{k}.25")) for k in range(1, 35)]
    assert all(r[4] == ship.rows[r[0]][1].text for r in rows)
    conn.close()
