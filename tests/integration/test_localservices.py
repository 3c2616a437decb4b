"""The local services behave as the rest of the suite assumes: fresh, isolated, binlogged, durable.

These are the checks a user would make by hand before trusting a test run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from tidesync.localservices import MariaDBInstance, PostgresDatabase, TansuBroker

pytestmark = pytest.mark.services

RECORDS = 40
COMMITTED_OFFSET = 17


def test_postgres_round_trip_in_a_fresh_database(pg_database: PostgresDatabase) -> None:
    with pg_database.connect() as connection:
        assert connection.execute("SELECT current_database()").fetchone() == (pg_database.dbname,)
        connection.execute("CREATE TABLE probe (id int PRIMARY KEY, payload bytea)")
        connection.execute("INSERT INTO probe VALUES (1, %b)", [b"\x00\xff"])
        assert connection.execute("SELECT payload FROM probe").fetchall() == [(b"\x00\xff",)]
    assert pg_database.dbname.startswith("tidesync_test_")
    assert pg_database.eventsourcing_env()["POSTGRES_DBNAME"] == pg_database.dbname


def _variables(instance: MariaDBInstance) -> dict[str, str]:
    connection = instance.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format',"
                " 'binlog_row_image', 'binlog_row_metadata', 'server_id')"
            )
            return {name: str(value) for name, value in cursor.fetchall()}
    finally:
        connection.close()


@pytest.mark.parametrize("which", ["ship_mariadb", "shore_mariadb"])
def test_mariadb_writes_a_full_row_based_binlog(
    which: str, request: pytest.FixtureRequest,
) -> None:
    variables = _variables(request.getfixturevalue(which))
    assert variables["log_bin"] == "ON"
    assert variables["binlog_format"] == "ROW"
    assert variables["binlog_row_image"] == "FULL"
    assert variables["binlog_row_metadata"] == "FULL"


def test_ship_and_shore_are_distinct_servers(
    ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
) -> None:
    assert _variables(ship_mariadb)["server_id"] != _variables(shore_mariadb)["server_id"]
    assert ship_mariadb.port != shore_mariadb.port


def _execute(instance: MariaDBInstance, database: str, statement: str) -> list[Any]:
    connection = instance.connect(database, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
            return list(cursor.fetchall())
    finally:
        connection.close()


def test_a_row_written_on_the_ship_is_not_on_the_shore(
    ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
    make_mariadb_database: Callable[[MariaDBInstance], str],
) -> None:
    ship_db = make_mariadb_database(ship_mariadb)
    shore_db = make_mariadb_database(shore_mariadb)
    for instance, database in ((ship_mariadb, ship_db), (shore_mariadb, shore_db)):
        _execute(instance, database, "CREATE TABLE cargo (id INT PRIMARY KEY, name VARCHAR(20))")
    _execute(ship_mariadb, ship_db, "INSERT INTO cargo VALUES (1, 'written on the ship')")
    assert _execute(ship_mariadb, ship_db, "SELECT id FROM cargo") == [(1,)]
    assert _execute(shore_mariadb, shore_db, "SELECT id FROM cargo") == []
    assert shore_db not in {row[0] for row in _execute(ship_mariadb, ship_db, "SHOW DATABASES")}


def _produce(broker: TansuBroker, topic: str, count: int) -> None:
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers,
        "enable.idempotence": True, "acks": "all",
    })
    failures: list[str] = []

    def delivered(error: Any, message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    for index in range(count):
        producer.produce(topic, key=b"k%d" % index, value=b"record %d" % index,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == []


def _consumer(broker: TansuBroker, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        # tansu holds a group join for about half the session timeout.
        "session.timeout.ms": 6000,
    })


def _consume(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Message]:
    messages: list[Message] = []
    for _ in range(int(timeout / 0.5)):
        for message in consumer.consume(num_messages=count - len(messages), timeout=0.5):
            assert message.error() is None, message.error()
            messages.append(message)
        if len(messages) >= count:
            return messages
    raise AssertionError(f"consumed {len(messages)} of {count} records")


def test_a_consumer_group_resumes_at_its_committed_offset(
    kafka_broker: TansuBroker, unique_topic: str,
) -> None:
    kafka_broker.create_topic(unique_topic, partitions=1)
    _produce(kafka_broker, unique_topic, RECORDS)
    group = f"{unique_topic}-group"

    first = _consumer(kafka_broker, group)
    first.subscribe([unique_topic])
    offsets = [message.offset() for message in _consume(first, RECORDS)]
    assert offsets == list(range(RECORDS))
    first.commit(offsets=[TopicPartition(unique_topic, 0, COMMITTED_OFFSET)], asynchronous=False)
    first.close()

    second = _consumer(kafka_broker, group)
    second.subscribe([unique_topic])
    try:
        resumed = _consume(second, RECORDS - COMMITTED_OFFSET)
    finally:
        second.close()
    assert [message.offset() for message in resumed] == list(range(COMMITTED_OFFSET, RECORDS))
    assert resumed[0].value() == b"record %d" % COMMITTED_OFFSET
