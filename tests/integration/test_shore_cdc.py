"""The shore CDC consumer on the real shore MariaDB (built-in binlog capture), the real broker
and real PostgreSQL: local shore changes become one command per node with contiguous
sequences and chained revisions; rows the platform applied are suppressed; re-consuming
issues nothing twice; a platform write the ledger cannot prove holds its partition until an
operator releases it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests import target_events
from tests.integration.shore_support import use_event_store
from tests.integration.test_capture_mariadb import run_until_caught_up
from tests.integration.test_ingress import make_config
from tidesync.apps.operations import OperationsApplication
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.bootstrap.shore import build_worker
from tidesync.bootstrap.target import build_target_applier
from tidesync.cdc.debezium import DebeziumNormalizer, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, QueueSettings
from tidesync.config import DownlinkConfig, TargetConfig
from tidesync.domain.change_event import Operation, Revision, tombstone_revision
from tidesync.domain.downlink_command import RowChangePayload
from tidesync.entrypoints.cli import main
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.shore.shore_cdc import (
    PartitionKey,
    ShoreCdcConsumer,
    TargetNodes,
)
from tidesync.shore.shore_cdc_holds import HoldRefused, ShoreCdcHolds
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

SHORE = "shore-hq"
PARTS_DDL = ("CREATE TABLE parts (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT NOT NULL, price DECIMAL(10,2) NOT NULL) ENGINE=InnoDB")


@dataclass
class ShoreSide:
    """The shore business database with an enabled `parts` table, its capture and nodes."""

    instance: MariaDBInstance
    database: str
    name: str
    position_path: Path
    bootstrap: str
    server_id: int
    nodes: list[str]

    def execute(self, *statements: str) -> None:
        connection = self.instance.connect(self.database, autocommit=True)
        try:
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
        finally:
            connection.close()

    def revision(self, key: int) -> Revision:
        connection = self.instance.connect(self.database, autocommit=True)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT _sync_revision FROM parts WHERE id = %s", (key,))
                (raw,) = cursor.fetchone()
        finally:
            connection.close()
        return Revision.parse(raw)

    def capture(self) -> None:
        run_until_caught_up(self.instance, self.database, self.bootstrap, self.position_path,
                            self.name, self.server_id)

    def consumer(self, downlink: DownlinkService, applier: MySQLTargetApplier,
                 group: str | None = None, releases: Any = None) -> ShoreCdcConsumer:
        queue = KafkaQueue(QueueSettings(
            self.bootstrap, group or f"shore-cdc-{self.name}", "^" + re.escape(self.name) + r"\."))
        normalizer = DebeziumNormalizer(NormalizerSettings(
            SHORE, "shore-builtin", bidirectional_tables=frozenset({(self.database, "parts")})))
        return ShoreCdcConsumer(queue, normalizer, applier, downlink, lambda: self.nodes,
                                SHORE, poll_timeout=0.5, releases=releases)


@pytest.fixture(scope="module")
def downlink(pg_database: PostgresDatabase) -> Iterator[DownlinkService]:
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database)
    service = open_downlink(event_store_env(config.event_store),
                            postgres_conninfo(config.event_store))
    yield service
    service.close()


@pytest.fixture
def applier(shore_mariadb: MariaDBInstance) -> Iterator[MySQLTargetApplier]:
    target = MySQLTargetApplier(host=shore_mariadb.host, port=shore_mariadb.port,
                                user=shore_mariadb.user, password=shore_mariadb.password,
                                node_id=SHORE)
    yield target
    target.close()


@pytest.fixture
def shore(shore_mariadb: MariaDBInstance, kafka_broker: Any, tmp_path: Path,
          make_mariadb_database: Callable[[MariaDBInstance], str]) -> ShoreSide:
    database = make_mariadb_database(shore_mariadb)
    side = ShoreSide(shore_mariadb, database, f"sync.cdc.shore{secrets.token_hex(4)}",
                     tmp_path / "position.sqlite", kafka_broker.bootstrap_servers,
                     9200 + secrets.randbelow(90),
                     [f"it-cdc-{secrets.token_hex(3)}", f"it-cdc-{secrets.token_hex(3)}"])
    side.execute(PARTS_DDL)
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "parts", SHORE)
    finally:
        connection.close()
    side.capture()  # Remembers the current binlog position: later changes are captured.
    return side


def drain(consumer: ShoreCdcConsumer, idle_polls: int = 6) -> int:
    """Run batches until several polls in a row bring nothing; returns the records handled."""
    handled, idle = 0, 0
    for _ in range(500):
        count = consumer.run_once()
        handled += count
        idle = 0 if count else idle + 1
        if idle >= idle_polls:
            break
    return handled


def payloads(downlink: DownlinkService, node_id: str) -> list[tuple[int, RowChangePayload]]:
    found = []
    for command in downlink.commands_for(node_id):
        assert isinstance(command.payload, RowChangePayload)
        found.append((command.sequence, command.payload))
    return found


def by_key(items: Sequence[tuple[int, RowChangePayload]]) -> dict[int, list[RowChangePayload]]:
    grouped: dict[int, list[RowChangePayload]] = {}
    for _, payload in sorted(items, key=lambda item: item[0]):
        grouped.setdefault(int(payload.record.as_dict()["id"]), []).append(payload)
    return grouped


def cdc_results(pg_database: PostgresDatabase, topic_prefix: str) -> list[tuple[str, int]]:
    with pg_database.connect() as conn:
        return conn.execute("SELECT result, command_count FROM shore_cdc_event"
                            " WHERE topic LIKE %s ORDER BY kafka_partition, kafka_offset",
                            (topic_prefix + "%",)).fetchall()


def test_local_changes_become_one_command_per_node(
        shore: ShoreSide, downlink: DownlinkService, applier: MySQLTargetApplier,
        pg_database: PostgresDatabase) -> None:
    shore.execute("INSERT INTO parts (id, name, qty, price) VALUES (1, 'pump', 1, 10.50),"
                  " (2, 'seal', 5, 0.99)")
    first_revision = shore.revision(1)
    shore.execute("UPDATE parts SET qty = 2 WHERE id = 1", "DELETE FROM parts WHERE id = 2")
    shore.capture()

    consumer = shore.consumer(downlink, applier)
    try:
        assert drain(consumer) >= 4
    finally:
        consumer.close()

    a, b = (payloads(downlink, node_id) for node_id in shore.nodes)
    assert sorted(seq for seq, _ in a) == [1, 2, 3, 4]
    assert [p for _, p in a] == [p for _, p in b]
    rows = by_key(a)
    insert, update = rows[1]
    assert insert.operation is Operation.INSERT and insert.expected_local_revision is None
    assert insert.result_revision == first_revision
    assert dict(insert.values or {}) == {"name": "pump", "qty": 1, "price": Decimal("10.50")}
    assert update.operation is Operation.UPDATE
    assert update.expected_local_revision == first_revision
    assert update.result_revision == shore.revision(1)
    assert dict(update.values or {}) == {"name": "pump", "qty": 2, "price": Decimal("10.50")}
    inserted, deleted = rows[2]
    assert deleted.operation is Operation.DELETE and deleted.values is None
    assert deleted.expected_local_revision == inserted.result_revision
    assert deleted.result_revision == tombstone_revision(deleted.origin_event_id)
    assert all(p.origin_node_id == SHORE for _, p in a)
    assert sorted(cdc_results(pg_database, shore.name)) == [("FORWARDED", 2)] * 4

    # A restart with the same group reads nothing again; one that re-reads everything (no
    # committed offsets) issues nothing twice.
    for group in (None, f"another-{secrets.token_hex(3)}"):
        again = shore.consumer(downlink, applier, group)
        try:
            drain(again)
        finally:
            again.close()
        assert payloads(downlink, shore.nodes[0]) == a
        assert payloads(downlink, shore.nodes[1]) == b
    assert sorted(cdc_results(pg_database, shore.name)) == [("FORWARDED", 2)] * 4


def test_rows_the_platform_applied_are_suppressed(
        shore: ShoreSide, downlink: DownlinkService, applier: MySQLTargetApplier,
        pg_database: PostgresDatabase) -> None:
    shore.execute("INSERT INTO parts (id, name, qty, price) VALUES (1, 'pump', 1, 10.50)")
    local = shore.revision(1)
    # A ship's changes applied to the shore as the apply processor does: an update of the
    # shore row, an insert of a new row, and a delete of it ("mark then delete").
    row = {"id": 1, "name": "pump", "qty": 1, "price": Decimal("10.50")}
    ship_update = target_events.update(shore.database, "parts", row, {"qty": 9}, local)
    new_row = {"id": 3, "name": "valve", "qty": 4, "price": Decimal("3.00")}
    ship_insert = target_events.insert(shore.database, "parts", new_row)
    ship_delete = target_events.delete(shore.database, "parts", new_row,
                                       ship_insert.result_revision)
    outcomes = applier.apply_chunk([ship_update, ship_insert, ship_delete])
    assert [o.kind.value for o in outcomes] == ["APPLIED"] * 3
    # Then a local change of the row the ship wrote last: forwarded against its revision.
    shore.execute("UPDATE parts SET name = 'big pump' WHERE id = 1")
    shore.capture()

    consumer = shore.consumer(downlink, applier)
    try:
        drain(consumer)
    finally:
        consumer.close()
    rows = by_key(payloads(downlink, shore.nodes[0]))
    assert sorted(rows) == [1]
    insert, update = rows[1]
    assert insert.result_revision == local
    assert update.expected_local_revision == ship_update.result_revision
    assert dict(update.values or {}) == {"name": "big pump", "qty": 9, "price": Decimal("10.50")}
    results = [result for result, _ in cdc_results(pg_database, shore.name)]
    # Suppressed: the ship update, the ship insert, the mark and the delete of the ship delete.
    assert sorted(results) == ["FORWARDED"] * 2 + ["SUPPRESSED"] * 4


def forge_unproven_write_then_edit(shore: ShoreSide) -> None:
    """Row 7 written as if by the platform with an event id the ledger never saw, then
    edited locally."""
    forged = uuid.uuid4()
    connection = shore.instance.connect(shore.database, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET @tidesync_remote_apply = 1")
            cursor.execute(
                "INSERT INTO parts (id, name, qty, price, _sync_revision, _sync_origin,"
                " _sync_event_id, _sync_updated_at)"
                " VALUES (7, 'ghost', 1, 1.00, %s, 'nobody', %s, UTC_TIMESTAMP(6))",
                (str(uuid.uuid4()), str(forged)))
            cursor.execute("SET @tidesync_remote_apply = NULL")
            cursor.execute("UPDATE parts SET qty = 2 WHERE id = 7")
    finally:
        connection.close()


def test_an_unproven_platform_write_holds_its_partition(
        shore: ShoreSide, downlink: DownlinkService, applier: MySQLTargetApplier,
        pg_database: PostgresDatabase) -> None:
    forge_unproven_write_then_edit(shore)
    shore.capture()

    consumer = shore.consumer(downlink, applier)
    try:
        drain(consumer)
        (held,) = consumer.blocked.items()
        key, blocked = held
        assert isinstance(key, PartitionKey) and blocked.reason == "ORIGIN_UNPROVEN"
    finally:
        consumer.close()
    # Nothing of the partition passed the held record, and the hold is recorded.
    assert payloads(downlink, shore.nodes[0]) == []
    assert cdc_results(pg_database, shore.name) == []
    with pg_database.connect() as conn:
        stored = conn.execute("SELECT kafka_offset, reason_code, event_id FROM shore_cdc_block"
                              " WHERE topic = %s AND kafka_partition = %s",
                              (key.topic, key.partition)).fetchall()
    assert [(offset, reason) for offset, reason, _ in stored] == [(blocked.offset,
                                                                   "ORIGIN_UNPROVEN")]


@pytest.mark.parametrize("held_while_released", [True, False],
                         ids=["consumer-running", "consumer-restarted"])
def test_a_released_hold_is_skipped_and_the_partition_goes_on(
        shore: ShoreSide, downlink: DownlinkService, applier: MySQLTargetApplier,
        pg_database: PostgresDatabase, held_while_released: bool,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    use_event_store(monkeypatch, pg_database)
    config = make_config(pg_database)
    holds = ShoreCdcHolds.open(postgres_conninfo(config.event_store))
    operations = OperationsApplication(env=event_store_env(config.event_store))
    forge_unproven_write_then_edit(shore)
    shore.capture()
    consumer = shore.consumer(downlink, applier, releases=holds)
    try:
        drain(consumer)
        ((key, held),) = consumer.blocked.items()
        mine = [h for h in holds.holds() if h.topic == key.topic]
        assert [(h.offset, h.reason_code) for h in mine] == [(held.offset, "ORIGIN_UNPROVEN")]
        capsys.readouterr()
        assert main(["shore", "cdc", "list"]) == 0
        listed = [h for h in json.loads(capsys.readouterr().out)["holds"]
                  if h["topic"] == key.topic]
        assert [(h["partition"], h["offset"], h["reason"]) for h in listed] == [
            (key.partition, held.offset, "ORIGIN_UNPROVEN")]
        now = dt.datetime.now(dt.UTC)
        with pytest.raises(HoldRefused) as elsewhere:
            holds.release(operations, key.topic, key.partition, held.offset + 1,
                          actor="user:ana", reason="r", now=now)
        assert elsewhere.value.code == "NOT_HELD"
        with pytest.raises(HoldRefused) as unexplained:
            holds.release(operations, key.topic, key.partition, held.offset,
                          actor="user:ana", reason=" ", now=now)
        assert unexplained.value.code == "REASON_REQUIRED"
        if not held_while_released:
            consumer.close()

        if held_while_released:
            action_id = holds.release(operations, key.topic, key.partition, held.offset,
                                      actor="user:ana", reason="row restored from a backup",
                                      now=now)
        else:  # as an operator does it
            assert main(["shore", "cdc", "release", "--topic", key.topic, "--partition",
                         str(key.partition), "--offset", str(held.offset), "--actor",
                         "user:ana", "--reason", "row restored from a backup"]) == 0
            action_id = uuid.UUID(json.loads(capsys.readouterr().out)["operator_action"])

        assert holds.release(operations, key.topic, key.partition, held.offset,
                             actor="user:bob", reason="again", now=now) == action_id
        assert [h for h in holds.holds() if h.topic == key.topic] == []
        if not held_while_released:
            consumer = shore.consumer(downlink, applier, releases=holds)
        consumer.refresh()  # what the running consumer does every few seconds
        drain(consumer)
        assert consumer.blocked == {}
    finally:
        consumer.close()
        holds.close()
    # The forged write is skipped on record; the local edit after it reaches every node.
    assert cdc_results(pg_database, shore.name) == [("SKIPPED", 0), ("FORWARDED", 2)]
    for node in shore.nodes:
        ((_, payload),) = payloads(downlink, node)
        assert payload.operation is Operation.UPDATE and dict(payload.values)["qty"] == 2
    with pg_database.connect() as conn:
        (reason,) = conn.execute("SELECT reason_code FROM shore_cdc_event WHERE topic = %s"
                                 " AND result = 'SKIPPED'", (key.topic,)).fetchone()
    assert reason == "OPERATOR_RELEASED"
    action = operations.action(action_id)
    operations.close()
    assert (action.action, action.outcome, action.requested_by, action.reason) == (
        "RELEASE_SHORE_CDC_HOLD", "COMPLETED", "user:ana", "row restored from a backup")
    assert action.details == {"hold_reason": "ORIGIN_UNPROVEN"}


def test_star_targets_every_active_registered_node(pg_database: PostgresDatabase) -> None:
    from tests.integration.test_ingress import ACTOR, FakeClock, node_service

    config = make_config(pg_database)
    clock = FakeClock()
    kept, revoked = f"it-cdc-{secrets.token_hex(3)}", f"it-cdc-{secrets.token_hex(3)}"
    with node_service(config) as nodes:
        nodes.register(kept, ACTOR, clock())
        nodes.register(revoked, ACTOR, clock())
        nodes.revoke(revoked, ACTOR, clock())
    from tidesync.apps.nodes import NodesApplication

    targets = TargetNodes(("*",), lambda: NodesApplication(env=event_store_env(config.event_store)))
    try:
        found = targets()
    finally:
        targets.close()
    assert kept in found and revoked not in found
    assert TargetNodes([" a", "b "], lambda: None)() == ["a", "b"]


def test_shore_work_runs_the_consumer_beside_the_apply_processor(
        shore: ShoreSide, downlink: DownlinkService, pg_database: PostgresDatabase) -> None:
    """`tidesync shore work` as `build_worker` composes it, run in a thread and stopped."""
    config = dataclasses.replace(
        make_config(pg_database),
        target=TargetConfig(host=shore.instance.host, port=shore.instance.port,
                            user=shore.instance.user, password=shore.instance.password,
                            node_id=SHORE),
        downlink=DownlinkConfig(
            kafka_bootstrap_servers=shore.bootstrap,
            topic_pattern="^" + re.escape(shore.name) + r"\.",
            consumer_group=f"work-{shore.name}", source_connector_id="shore-builtin",
            bidirectional_tables=(f"{shore.database}.parts",), nodes=tuple(shore.nodes)))
    shore.execute("INSERT INTO parts (id, name, qty, price) VALUES (5, 'filter', 3, 7.25)")
    shore.capture()
    worker, close = build_worker(config, build_target_applier(config.target))
    assert worker.shore_cdc is not None
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        for _ in range(600):  # Wait for the consumer's first batch (not a timing assertion).
            if all(downlink.commands_for(node_id) for node_id in shore.nodes):
                break
            time.sleep(0.1)
    finally:
        worker.stop_event.set()
        thread.join()
        close()
    assert not thread.is_alive()
    for node_id in shore.nodes:
        (command,) = downlink.commands_for(node_id)
        assert command.sequence == 1
        assert isinstance(command.payload, RowChangePayload)
        assert dict(command.payload.values or {}) == {
            "name": "filter", "qty": 3, "price": Decimal("7.25")}
