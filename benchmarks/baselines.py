"""Raw baselines: the fastest plain way to do each job our code does, measured the same way.

Later benchmarks divide their own rate by one of these. Each sets up its own table, times only the
work itself, and returns rows (or records) per second.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

PG_TABLE = "baseline_rows"
MARIADB_TABLE = "baseline_cas"


class BaselineFailed(RuntimeError):
    """A baseline did not do all its work (a lost compare-and-set, a record not delivered)."""


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def _fresh_pg_table(conn: psycopg.Connection[Any], table: str) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id uuid PRIMARY KEY, payload bytea NOT NULL)")
    conn.commit()


def pg_unnest_insert(
    conn: psycopg.Connection[Any], rows: Sequence[bytes], batch: int = 500,
    table: str = PG_TABLE,
) -> float:
    """Rows/s for `INSERT … SELECT * FROM unnest(…) ON CONFLICT DO NOTHING`, one txn per batch.

    The arrays go as binary parameters (%b); as text they were ten times slower.
    """
    _fresh_pg_table(conn, table)
    ids = [uuid.uuid4() for _ in rows]
    statement = (f"INSERT INTO {table} (id, payload) SELECT * FROM unnest(%b::uuid[], %b::bytea[])"
                 " ON CONFLICT DO NOTHING")
    started = time.perf_counter()
    with conn.cursor() as cursor:
        for start in range(0, len(rows), batch):
            cursor.execute(statement, [ids[start:start + batch], list(rows[start:start + batch])])
            conn.commit()
    return _rate(len(rows), time.perf_counter() - started)


def pg_binary_copy(
    conn: psycopg.Connection[Any], rows: Sequence[bytes], batch: int = 500,
    table: str = PG_TABLE,
) -> float:
    """Rows/s for `COPY … FROM STDIN (FORMAT BINARY)`, one txn per batch: the bulk-load floor."""
    _fresh_pg_table(conn, table)
    ids = [uuid.uuid4() for _ in rows]
    started = time.perf_counter()
    with conn.cursor() as cursor:
        for start in range(0, len(rows), batch):
            with cursor.copy(f"COPY {table} (id, payload) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["uuid", "bytea"])
                for index in range(start, min(start + batch, len(rows))):
                    copy.write_row((ids[index], rows[index]))
            conn.commit()
    return _rate(len(rows), time.perf_counter() - started)


def _seed_cas_table(conn: Any, n: int, table: str) -> list[bytes]:
    """A fresh table of n rows with a BINARY(16) `_sync_revision`; returns the revisions."""
    revisions = [uuid.uuid4().bytes for _ in range(n)]
    with conn.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL,"
                       " _sync_revision BINARY(16) NOT NULL) ENGINE=InnoDB")
        cursor.executemany(f"INSERT INTO {table} (id, v, _sync_revision) VALUES (%s, %s, %s)",
                           [(index, "seed", revisions[index]) for index in range(n)])
    conn.commit()
    return revisions


def mariadb_cas_update(conn: Any, n: int, batch: int = 500, table: str = MARIADB_TABLE) -> float:
    """Rows/s for compare-and-set UPDATEs (checked row count each), committing every `batch`.

    `conn` is a pymysql connection with autocommit off, on a database to create the table in.
    """
    revisions = _seed_cas_table(conn, n, table)
    statement = (f"UPDATE {table} SET v = %s, _sync_revision = %s"
                 " WHERE id = %s AND _sync_revision = %s")
    started = time.perf_counter()
    with conn.cursor() as cursor:
        for index in range(n):
            if cursor.execute(statement, ("updated", uuid.uuid4().bytes, index,
                                          revisions[index])) != 1:
                raise BaselineFailed(f"compare-and-set lost on row {index}")
            if (index + 1) % batch == 0:
                conn.commit()
    conn.commit()
    return _rate(n, time.perf_counter() - started)


@dataclass(frozen=True)
class KafkaRates:
    """Records/s producing (idempotent, acks=all, until flushed) and consuming back."""

    produce: float
    consume: float

    @property
    def end_to_end(self) -> float:
        """Records/s over the produce and the consume phases together."""
        return 1.0 / (1.0 / self.produce + 1.0 / self.consume)


def kafka_produce_consume(bootstrap: str, topic: str, n: int, size: int) -> KafkaRates:
    """Produce n records of `size` bytes to an existing topic, then read them all back."""
    return KafkaRates(produce=kafka_produce(bootstrap, topic, n, size),
                      consume=kafka_consume(bootstrap, topic, n))


def kafka_produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    """Records/s for an idempotent producer with acks=all, timed until every record is acked."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    payload = bytes(size)
    started = time.perf_counter()
    for index in range(n):
        _produce_one(producer, topic, b"%d" % index, payload, delivered)
    if producer.flush(60) != 0 or failures:
        raise BaselineFailed(f"{len(failures)} records failed; first: {failures[:1]}")
    return _rate(n, time.perf_counter() - started)


def _produce_one(
    producer: Producer, topic: str, key: bytes, value: bytes, on_delivery: Any,
) -> None:
    # A full local queue is back-pressure, not failure: serve callbacks and try again.
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.05)


def kafka_consume(bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> float:
    """Records/s reading n records from the start of every partition (assigned, no group join)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"baseline-{topic}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        started = time.perf_counter()
        _read(consumer, n, deadline=started + timeout)
        return _rate(n, time.perf_counter() - started)
    finally:
        consumer.close()


def _read(consumer: Consumer, n: int, deadline: float) -> None:
    received = 0
    while received < n:
        if time.perf_counter() > deadline:
            raise BaselineFailed(f"read {received} of {n} records before the deadline")
        for message in consumer.consume(num_messages=min(1000, n - received), timeout=0.5):
            if message.error() is not None:
                raise BaselineFailed(f"consume error: {message.error()}")
            received += 1
