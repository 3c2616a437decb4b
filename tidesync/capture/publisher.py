"""Capture records onto the Kafka API: an idempotent acks=all producer that creates missing
topics, and the bytes Kafka's JsonConverter writes for each record document.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # typed here; confluent_kafka.admin hides it from mypy

from tidesync.capture.change_records import Headers
from tidesync.capture.envelope_writer import DebeziumRecord
from tidesync.capture.errors import CaptureError, CaptureErrorReason

logger = logging.getLogger(__name__)

Delivered = Callable[[str, int, int], None]
"""(topic, partition, offset) of a record the queue acknowledged."""


def producer_settings(bootstrap_servers: str) -> dict[str, object]:
    """An idempotent, acks=all producer that partitions keys as Java clients do (murmur2),
    so a switch between Debezium and built-in capture keeps every key in its partition."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "message.timeout.ms": 300_000,
    }


class KafkaEnvelopePublisher:
    """Produces Debezium records to the Kafka API and creates topics that do not exist yet."""

    def __init__(self, bootstrap_servers: str, *, partitions: int = 1,
                 replication_factor: int = 1, settings: Mapping[str, object] | None = None,
                 flush_timeout_seconds: float = 120.0) -> None:
        if not bootstrap_servers:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               "no Kafka bootstrap servers configured (capture."
                               "kafka_bootstrap_servers or ship.kafka_bootstrap_servers)")
        self._config = {**producer_settings(bootstrap_servers), **(settings or {})}
        self._producer = Producer(self._config)
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 4})
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._flush_timeout = flush_timeout_seconds
        self._topics: set[str] | None = None
        self._failures = 0
        self._first_failure = ""
        self._converter = JsonConverter()
        self.produced = 0

    def publish(self, record: DebeziumRecord, headers: Headers = (),
                on_delivery: Delivered | None = None) -> None:
        """Produce one record; `on_delivery` hears (topic, partition, offset) once the queue
        acknowledged it."""
        self._ensure_topic(record.topic)
        key, value = self._converter.encode(record.key), self._converter.encode(record.value)
        callback = self._delivered if on_delivery is None else self._reporting(on_delivery)
        while True:
            try:
                if record.partition is None:
                    self._producer.produce(record.topic, key=key, value=value,
                                           headers=list(headers) or None,
                                           on_delivery=callback)
                else:  # one topic per database: one partition keeps the commit order
                    self._producer.produce(record.topic, key=key, value=value,
                                           partition=record.partition,
                                           headers=list(headers) or None,
                                           on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
        self._producer.poll(0)
        self.produced += 1

    def flush(self) -> None:
        """Wait until every record produced so far is acknowledged; raise if any was not."""
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"{remaining} records not acknowledged within "
                               f"{self._flush_timeout:.0f}s")
        if self._failures:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"{self._failures} records failed; first: {self._first_failure}")

    def _reporting(self, on_delivery: Delivered) -> Callable[[KafkaError | None, Any], None]:
        def delivered(error: KafkaError | None, message: Any) -> None:
            self._delivered(error, message)
            if error is None:
                on_delivery(str(message.topic()), int(message.partition()),
                            int(message.offset()))

        return delivered

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._failures += 1
            self._first_failure = self._first_failure or f"{error.name()} ({error.str()})"

    def _ensure_topic(self, topic: str) -> None:
        if self._topics is None:
            self._topics = set(self._list_topics())
        if topic in self._topics:
            return
        futures = self._admin.create_topics(
            [NewTopic(topic, num_partitions=self._partitions,
                      replication_factor=self._replication_factor)],
            operation_timeout=30,
        )
        try:
            futures[topic].result(timeout=60)
            logger.info("created topic %s (%d partitions)", topic, self._partitions)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                                   f"cannot create topic {topic}: {error.args[0].str()}") from None
        self._topics.add(topic)

    def _list_topics(self) -> list[str]:
        try:
            return list(self._admin.list_topics(timeout=30).topics)
        except KafkaException as error:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"cannot list topics: {error.args[0].str()}") from None

    def close(self) -> None:
        self._producer.flush(min(self._flush_timeout, 10.0))


class JsonConverter:
    """Record documents as Kafka's JsonConverter writes them (the same bytes as
    DebeziumRecord.key_bytes/value_bytes); the schema part, shared by every record of a
    table, is serialized once."""

    def __init__(self) -> None:
        self._schema_texts: dict[int, tuple[object, bytes]] = {}

    def encode(self, document: dict[str, Any] | None) -> bytes | None:
        if document is None:
            return None
        schema = document["schema"]
        cached = self._schema_texts.get(id(schema))
        if cached is None or cached[0] is not schema:
            cached = (schema, b'{"schema":' + _compact(schema) + b',"payload":')
            self._schema_texts[id(schema)] = cached
        return cached[1] + _compact(document["payload"]) + b"}"


def _compact(document: object) -> bytes:
    # As Kafka's JsonConverter writes it (and DebeziumRecord.value_bytes): compact UTF-8 JSON.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
