"""Built-in change capture (`tidesync ship capture`) from the `[capture]` settings.

Two sources share one publishing path: the MySQL/MariaDB binlog (`capture.binlog`) and a SQLite
changelog filled by triggers (`capture.sqlite`). Every row change becomes the record Debezium's
MySQL connector writes (`capture.envelope_writer`) on topic `<prefix>.<logical name>.<db>.
<table>`, keyed by the primary key so one row always lands in one partition; a delete is followed
by a tombstone unless switched off.
"""

from __future__ import annotations

import contextlib
import threading

from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import CaptureStats, Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureSource
from tidesync.capture.sqlite import SQLiteChangelogCapture
from tidesync.config import Config
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.table_names import table_set


def topic_prefix(config: Config) -> str:
    """`<capture.topic_prefix>.<logical name>`: Debezium's `topic.prefix` (its server name)."""
    logical_name = config.capture.logical_name or config.ship.node_id
    if not logical_name:
        raise CaptureError(CaptureErrorReason.CONFIGURATION,
                           "capture.logical_name (or ship.node_id) must be set")
    return f"{config.capture.topic_prefix}.{logical_name}"


def binlog_settings(config: Config) -> BinlogSettings:
    capture = config.capture
    databases = capture.databases
    tables = table_set(capture.tables)
    return BinlogSettings(
        host=capture.mysql_host, port=capture.mysql_port, user=capture.mysql_user,
        password=capture.mysql_password, server_id=capture.server_id,
        databases=databases or tuple(sorted({database for database, _ in tables})),
        tables=tables, start_from=capture.start_from,
        heartbeat_seconds=capture.heartbeat_seconds,
    )


def run_capture(config: Config, *, until_caught_up: bool = False,
                stop: threading.Event | None = None,
                clock: Clock = utc_now) -> CaptureStats:
    """Run the configured capture (binlog or SQLite changelog) until stopped or caught up."""
    capture = config.capture
    prefix = topic_prefix(config)
    with contextlib.ExitStack() as resources:
        publisher = KafkaEnvelopePublisher(
            capture.kafka_bootstrap_servers or config.ship.kafka_bootstrap_servers,
            partitions=capture.topic_partitions,
            replication_factor=capture.topic_replication_factor,
        )
        resources.callback(publisher.close)
        store = SQLitePositionStore(capture.position_path)
        resources.callback(store.close)
        checkpointer = Checkpointer(
            publisher, store, prefix, source=capture.source.value,
            max_records=capture.batch_max_records,
            interval_seconds=capture.flush_interval_ms / 1000,
            tombstones=capture.tombstones_on_delete, clock=clock,
        )
        writer = DebeziumEnvelopeWriter(prefix, routing=capture.topic_routing)
        if capture.source is CaptureSource.MYSQL:
            binlog = MySQLBinlogCapture(binlog_settings(config), writer, checkpointer)
            return binlog.run(until_caught_up=until_caught_up, stop=stop)
        changelog = SQLiteChangelogCapture(
            capture.sqlite_path, writer, checkpointer,
            poll_interval_seconds=capture.sqlite_poll_interval_ms / 1000,
            keep_rows=capture.changelog_keep_rows,
        )
        return changelog.run(until_caught_up=until_caught_up, stop=stop)
