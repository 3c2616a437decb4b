"""Binlog capture of tables related by foreign keys, routed to one topic per database: the
records keep the source commit order in one partition, carry the source transaction (id and
order) and say when the source ran a change with foreign key checks off."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.capture_support import normalize_all, read_records, settings_for
from tests.integration.test_capture_mariadb import column_types
from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureStart, TopicRouting
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

PARENT_DDL = ("CREATE TABLE parent (id INT NOT NULL PRIMARY KEY, note VARCHAR(20) NOT NULL)"
              " ENGINE=InnoDB")
CHILD_DDL = ("CREATE TABLE child (id INT NOT NULL PRIMARY KEY, parent_id INT NOT NULL,"
             " FOREIGN KEY (parent_id) REFERENCES parent (id)) ENGINE=InnoDB")


@pytest.fixture
def related_tables(ship_mariadb, make_mariadb_database) -> Iterator[tuple[Any, str]]:
    database = make_mariadb_database(ship_mariadb)
    connection = ship_mariadb.connect(database=database, autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute(PARENT_DDL)
        cursor.execute(CHILD_DDL)
    for table in ("parent", "child"):
        enable_mysql_table(connection, database, table, "ship-1")
    yield connection, database
    connection.close()


def capture_once(instance: Any, database: str, bootstrap: str, position: Any, name: str) -> None:
    settings = BinlogSettings(instance.host, instance.port, instance.user, instance.password,
                              9131, (database,), start_from=CaptureStart.CURRENT)
    # Three partitions: a database's records must still all go to partition 0.
    publisher = KafkaEnvelopePublisher(bootstrap, partitions=3)
    store = SQLitePositionStore(position)
    checkpointer = Checkpointer(publisher, store, name, "mariadb", max_records=50)
    writer = DebeziumEnvelopeWriter(name, routing=TopicRouting.DATABASE)
    try:
        MySQLBinlogCapture(settings, writer, checkpointer).run(until_caught_up=True)
    finally:
        publisher.close()
        store.close()


def test_one_topic_per_database_keeps_commit_order_transactions_and_the_fk_flag(
        ship_mariadb, kafka_broker, related_tables, tmp_path) -> None:
    connection, database = related_tables
    name = f"sync.cdc.t{secrets.token_hex(4)}"
    position = tmp_path / "position.sqlite"
    bootstrap = kafka_broker.bootstrap_servers
    capture_once(ship_mariadb, database, bootstrap, position, name)

    with connection.cursor() as cursor:
        connection.begin()
        cursor.execute("INSERT INTO parent (id, note) VALUES (1, 'p1')")
        cursor.execute("INSERT INTO child (id, parent_id) VALUES (10, 1), (11, 1)")
        connection.commit()
        # A load with the checks off: the child first, its parent after (a dump's order).
        cursor.execute("SET SESSION foreign_key_checks = 0")
        connection.begin()
        cursor.execute("INSERT INTO child (id, parent_id) VALUES (12, 2)")
        cursor.execute("INSERT INTO parent (id, note) VALUES (2, 'p2')")
        connection.commit()
        cursor.execute("SET SESSION foreign_key_checks = 1")
        cursor.execute("UPDATE parent SET note = 'p1-new' WHERE id = 1")
    capture_once(ship_mariadb, database, bootstrap, position, name)

    records = read_records(bootstrap, [f"{name}.{database}"])
    assert {record.partition for record in records} == {0}
    events, _ = normalize_all(records, settings_for(
        {(database, "parent"), (database, "child")}, column_types(connection, database)))
    events.sort(key=lambda event: event.source_position)
    assert [(e.record.table, e.record.primary_key) for e in events] == [
        ("parent", (("id", 1),)), ("child", (("id", 10),)), ("child", (("id", 11),)),
        ("child", (("id", 12),)), ("parent", (("id", 2),)), ("parent", (("id", 1),))]
    first, second, third = events[:3], events[3:5], events[5:]
    for transaction in (first, second, third):
        assert len({e.transaction_id for e in transaction}) == 1
        assert [e.transaction_order for e in transaction] == list(
            range(1, len(transaction) + 1))
    assert len({e.transaction_id for e in events}) == 3
    assert first[0].transaction_id is not None
    assert [e.source_details["transaction_data_collection_order"] for e in first] == [1, 1, 2]
    assert [e.source_details.get("fk_checks", True) for e in events] == [
        True, True, True, False, False, True]
