"""Built-in change capture (`tidesync ship capture`) from the `[capture]` settings.

Two sources share one publishing path: the MySQL/MariaDB binlog (`capture.binlog`) and a SQLite
changelog filled by triggers (`capture.sqlite`). Every row change becomes the record Debezium's
MySQL connector writes (`capture.envelope_writer`) on topic `<prefix>.<logical name>.<db>.
<table>`, keyed by the primary key so one row always lands in one partition; a delete is followed
by a tombstone unless switched off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading

from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import CaptureStats, Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import (
    SHIP_TOPIC_PATTERN,
    CaptureConfig,
    CaptureSource,
    sample_topic,
)
from tidesync.capture.sqlite import SQLiteChangelogCapture
from tidesync.config import Config
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.table_names import table_set

log = logging.getLogger(__name__)


def shore_capture_config(config: Config) -> Config:
    """The configuration `run_capture` takes for the shore's own capture: `[shore_capture]`
    as the capture, its broker defaulting to the downlink's and its databases to those of
    `downlink.bidirectional_tables`."""
    shore = config.shore_capture
    databases = shore.databases or tuple(sorted(
        {database for database, _ in config.downlink.table_set()}))
    capture = CaptureConfig(**{
        **{f.name: getattr(shore, f.name) for f in dataclasses.fields(CaptureConfig)},
        "logical_name": shore.logical_name or config.target.node_id,
        "kafka_bootstrap_servers": (shore.kafka_bootstrap_servers
                                    or config.downlink.kafka_bootstrap_servers),
        "databases": databases,
    })
    return dataclasses.replace(config, capture=capture)


def shore_capture_warnings(config: Config) -> list[str]:
    """The shore capture's topics must be the ones `shore work` reads and no ship's."""
    capture = shore_capture_config(config).capture
    topic = sample_topic(capture.logical_name, capture.topic_prefix)
    warnings = []
    if not re.search(config.downlink.topic_pattern, topic):
        warnings.append(f"downlink.topic_pattern {config.downlink.topic_pattern!r} does not"
                        f" match the shore capture's topics ({topic!r} …): shore work will"
                        " not read them")
    if re.search(SHIP_TOPIC_PATTERN, topic):
        warnings.append(f"the shore capture's topics ({topic!r} …) match the ships' default"
                        " topic pattern: a ship on the same broker would read them")
    return warnings


def downlink_topic_warnings(config: Config) -> list[str]:
    """At the start of `shore work` with a downlink: its pattern must not read a ship's
    topics (their changes would go down again as the shore's)."""
    if not config.downlink.kafka_bootstrap_servers:
        return []
    ships = [node for node in config.downlink.nodes if node != "*"] or ["ship-1"]
    warnings = [f"downlink.topic_pattern {config.downlink.topic_pattern!r} also matches a"
                f" ship capture's topics ({sample_topic(node)!r} …)" for node in ships
                if re.search(config.downlink.topic_pattern, sample_topic(node))]
    return warnings


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
        snapshot_rows_per_sec=capture.snapshot_rows_per_sec,
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
