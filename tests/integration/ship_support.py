"""Helpers for ship client tests: Debezium envelopes of an `items` table written into the real
broker the way the MySQL connector would, with chained `_sync_revision` values per row."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from confluent_kafka import Producer

from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)

TOPIC_PREFIX = "sync.cdc"
CAPTURED_AT = dt.datetime(2019, 11, 1, 8, 0, tzinfo=dt.UTC)


def items_table(database: str) -> TableDefinition:
    return TableDefinition(database, "items", (
        ColumnDefinition.parse("id", "int", nullable=False),
        ColumnDefinition.parse("name", "varchar(20)", nullable=False),
        ColumnDefinition.parse("qty", "int", nullable=False),
        ColumnDefinition.parse("price", "decimal(10,2)", nullable=False),
        ColumnDefinition.parse("_sync_revision", "char(36)", nullable=False),
    ), ("id",))


@dataclass
class ItemsCapture:
    """Row changes of `items` as Debezium records, with binlog coordinates that only grow."""

    database: str
    writer: DebeziumEnvelopeWriter = field(
        default_factory=lambda: DebeziumEnvelopeWriter(TOPIC_PREFIX))
    rows: dict[int, dict[str, object]] = field(default_factory=dict)
    positions: Iterator[int] = field(default_factory=lambda: itertools.count(4, 100))

    @property
    def table(self) -> TableDefinition:
        return items_table(self.database)

    @property
    def topic(self) -> str:
        return self.writer.topic(self.table)

    def _source(self) -> SourceInfo:
        return SourceInfo(server_id=101, file="mysql-bin.000001", pos=next(self.positions),
                          ts_ms=int(CAPTURED_AT.timestamp() * 1000), thread=7)

    def insert(self, key: int, name: str, qty: int, price: str) -> DebeziumRecord:
        row: dict[str, object] = {"id": key, "name": name, "qty": qty, "price": Decimal(price),
                                  "_sync_revision": str(uuid.uuid4())}
        self.rows[key] = row
        return self.writer.change(self.table, EnvelopeOp.CREATE, before=None, after=row,
                                  source=self._source(), processed_at=CAPTURED_AT)

    def update(self, key: int, **changes: object) -> DebeziumRecord:
        before = self.rows[key]
        after = {**before, **changes, "_sync_revision": str(uuid.uuid4())}
        self.rows[key] = after
        return self.writer.change(self.table, EnvelopeOp.UPDATE, before=before, after=after,
                                  source=self._source(), processed_at=CAPTURED_AT)

    def delete(self, key: int) -> list[DebeziumRecord]:
        """The delete and the tombstone that follows it."""
        before = self.rows.pop(key)
        return [self.writer.change(self.table, EnvelopeOp.DELETE, before=before, after=None,
                                   source=self._source(), processed_at=CAPTURED_AT),
                self.writer.tombstone(self.table, before)]


def produce(bootstrap: str, records: list[DebeziumRecord], partitions: int = 1,
            raw: list[tuple[str, bytes | None, bytes | None]] | None = None) -> None:
    """Write records (keyed, so one row stays in one partition) and wait for every ack."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    failures: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(error)

    items = [(r.topic, r.key_bytes(), r.value_bytes()) for r in records] + (raw or [])
    for topic, key, value in items:
        partition = zlib.crc32(key) % partitions if key else 0
        producer.produce(topic, key=key, value=value, partition=partition,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0 and not failures, failures


# ----------------------------------------------------------------------------- a running shore


@dataclass
class RunningShore:
    """A real shore for ship tests: the /sync/v1 server, a registered node, an apply worker
    writing `database` on the shore MariaDB, all on real PostgreSQL."""

    url: str
    node_id: str
    secret_text: str
    database: str
    config: object
    start_worker: Callable[[], None]


