"""The ship client process (`tidesync ship run`) from the `[ship]` and `[ship_target]` settings:
queue consumer, state store, shore link and, with a business database, the downlink."""

from __future__ import annotations

import dataclasses
import logging
import re
import ssl
from pathlib import Path

from tidesync.bootstrap.sync_states import SnapshotSyncStates
from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.settings import CaptureSource, other_side_topics, sample_topic
from tidesync.capture.snapshot_activation import ActivationSnapshots
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, QueueSettings, QueueUnavailable
from tidesync.config import Config, ShipConfig, ShipTargetConfig, ShipTargetKind
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.node import secret_from_text
from tidesync.ship.batcher import BatchLimits, BodyCompressor
from tidesync.ship.client import ShipClient
from tidesync.ship.client_settings import ClientSettings
from tidesync.ship.consumer import QueueConsumer
from tidesync.ship.dictionaries import BatchDictionaries, DictionaryLink
from tidesync.ship.downlink import DownlinkSettings
from tidesync.ship.measured_rate import MeasuredRate
from tidesync.ship.pacing import UplinkPacer
from tidesync.ship.remote_apply import DownlinkOnlyTables, ShipTargets
from tidesync.ship.replay import ReplaySettings, ShipReplays
from tidesync.ship.rule_schema import MySQLSchemaSource, SQLiteSchemaSource
from tidesync.ship.rules import Activated, MaskKeyFile, SchemaSource, ShipRules
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.rules import SQLiteRules
from tidesync.ship.transport import HttpShoreLink, ShoreLink, tls_context
from tidesync.target.contract import TargetApplier
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.one_way_mysql import MySQLOneWayApplier
from tidesync.target.one_way_sqlite import SQLiteOneWayApplier
from tidesync.target.sqlite import SQLiteTargetApplier

log = logging.getLogger(__name__)


def client_settings(ship: ShipConfig, compressor: BodyCompressor | None = None
                    ) -> ClientSettings:
    """The client loop's settings; `compressor` makes the bodies of wire version 2."""
    return ClientSettings(
        node_id=ship.node_id, replay_epoch=ship.replay_epoch,
        limits=BatchLimits(ship.batch_max_events, ship.batch_max_bytes, ship.zstd_level,
                           wire_version=ship.wire_version, compressor=compressor),
        window_per_partition=ship.send_window_events,
        window_total=ship.send_window_total_events,
        max_open_per_partition=ship.max_open_per_partition,
        retain_offsets=ship.state_retain_offsets,
        receipts_page_size=ship.receipts_page_size,
        receipts_interval=float(ship.receipts_interval_seconds),
        heartbeat_interval=float(ship.heartbeat_interval_seconds),
        probe_initial_seconds=float(ship.probe_interval_seconds),
        probe_max_seconds=float(ship.probe_max_interval_seconds),
        uploads_in_flight=ship.uploads_in_flight,
        upload_request_seconds=ship.upload_request_ms / 1000,
        topic_refresh_interval=float(ship.topic_refresh_seconds),
        timezone=ship.timezone, clock_jump_seconds=float(ship.clock_jump_seconds),
    )


def uplink_pacer(ship: ShipConfig) -> UplinkPacer:
    """The pacer that writes upload bodies at `uplink_rate_bytes_per_sec`, or at the lower
    limit the shore sets for the node; without either, at the rate the uploads measure
    (`uplink_measured_pace`, else at once)."""
    return UplinkPacer(float(max(0, ship.uplink_rate_bytes_per_sec)),
                       float(ship.uplink_burst_bytes),
                       measured=MeasuredRate() if ship.uplink_measured_pace else None)


def normalizer_for(ship: ShipConfig) -> DebeziumNormalizer:
    types = (InMemoryColumnTypes.from_json_file(ship.column_types_file)
             if ship.column_types_file else None)
    return DebeziumNormalizer(NormalizerSettings(
        origin_node_id=ship.node_id, source_connector_id=ship.source_connector_id,
        replay_epoch=ship.replay_epoch,
        bidirectional_tables=ship.table_set(),
        column_types=types))


def target_applier(ship: ShipConfig, ship_target: ShipTargetConfig) -> TargetApplier:
    """The applier of the ship's business database; its node id is the ship's."""
    target = ship_target.as_target(ship.node_id)
    if ship_target.kind is ShipTargetKind.SQLITE:
        return SQLiteTargetApplier(ship_target.sqlite_path, node_id=ship.node_id)
    return MySQLTargetApplier(host=target.host, port=target.port, user=target.user,
                              password=target.password, database=target.database or None,
                              node_id=target.node_id)


def by_key_applier(ship: ShipConfig, ship_target: ShipTargetConfig) -> TargetApplier:
    """The by-key applier of the ship's tables without sync metadata (DOWNLINK-only rules)."""
    target = ship_target.as_target(ship.node_id)
    if ship_target.kind is ShipTargetKind.SQLITE:
        return SQLiteOneWayApplier(ship_target.sqlite_path, node_id=ship.node_id)
    return MySQLOneWayApplier(host=target.host, port=target.port, user=target.user,
                              password=target.password, database=target.database or None,
                              node_id=target.node_id)


def build_client(ship: ShipConfig, link: ShoreLink | None = None, *,
                 clock: Clock = utc_now,
                 ship_target: ShipTargetConfig | None = None,
                 activated: Activated | None = None) -> ShipClient:
    """The client of this configuration; `link` replaces the HTTP link (benchmarks).

    With an enabled `ship_target` the client also pulls and applies shore commands;
    `activated` asks for the snapshots of rules activated with `snapshot = "on_activation"`
    (`activation_snapshots`)."""
    if not ship.node_id:
        raise ValueError("ship.node_id is required")
    if not ship.kafka_bootstrap_servers:
        raise ValueError("ship.kafka_bootstrap_servers is required")
    dictionaries = None
    if link is None:
        if not ship.secret:
            raise ValueError("ship.secret is required (the node's signing secret)")
        http = HttpShoreLink(ship.shore_url, ship.node_id, secret_from_text(ship.secret),
                             clock=clock, timeout=float(ship.request_timeout_seconds),
                             ssl_context=ship_tls_context(ship),
                             keep_alive=float(ship.keep_alive_seconds),
                             pacer=uplink_pacer(ship))
        link = http
        if ship.wire_version >= 2 and ship.zstd_dictionary_bytes:
            dictionaries = BatchDictionaries(ship.zstd_dictionary_bytes)
            link = DictionaryLink(http, dictionaries, ship.node_id)
    state = SQLiteShipState(Path(ship.state_path), ship.node_id, ship.group_id, clock=clock)
    queue = KafkaQueue(QueueSettings(ship.kafka_bootstrap_servers, ship.group_id,
                                     ship.topic_pattern,
                                     dict(ship.kafka_consumer_options)))
    warn_of_shore_topics(ship, queue)
    rules = ship_rules(ship, state, ship_target, activated)
    consumer = QueueConsumer(queue, normalizer_for(ship), state, ship.replay_epoch, rules)
    consumer.side = ship_replays(ship, state, rules)
    client = ShipClient(client_settings(ship, dictionaries), consumer, state, link, clock=clock,
                        rules=rules)
    client.sync_states = SnapshotSyncStates(*_snapshot_capture(activated),
                                            lambda: rules.current.rules.rules, state.watermarks)
    if ship_target is not None and ship_target.enabled:
        client.enable_downlink(downlink_settings(ship), ShipTargets(
            target_applier(ship, ship_target), by_key_applier(ship, ship_target),
            DownlinkOnlyTables(lambda: rules.current.rules.rules)))
    return client


def _snapshot_capture(activated: Activated | None) -> tuple[Path | None, str]:
    """The position file and topic prefix of the capture that takes this ship's snapshots
    (the one rule activations ask), whose requests the heartbeat reports; none without."""
    if isinstance(activated, ActivationSnapshots):
        return activated.position_path, activated.capture
    return None, ""


def shore_topic_pattern(ship: ShipConfig) -> str:
    """The topics of the shore's own capture (logical name = the shore's node id)."""
    return rf"^{re.escape(sample_topic(ship.shore_node_id).removesuffix('db.table'))}"


def shore_topic_warnings(ship: ShipConfig, topics: list[str]) -> list[str]:
    """What to warn of when `ship.topic_pattern` would read the shore capture's topics: its
    changes would go back up as this ship's."""
    shore = shore_topic_pattern(ship)
    warnings = []
    if re.search(ship.topic_pattern, sample_topic(ship.shore_node_id)):
        warnings.append(f"ship.topic_pattern {ship.topic_pattern!r} also matches the shore"
                        f" capture's topics ({sample_topic(ship.shore_node_id)!r} …): on a"
                        " broker the shore's capture writes to, exclude them")
    found = other_side_topics(ship.topic_pattern, topics, shore)
    if found:
        shown = ", ".join(found[:5]) + (" …" if len(found) > 5 else "")
        warnings.append(f"ship.topic_pattern matches {len(found)} topics of the shore's"
                        f" capture: {shown}")
    return warnings


def warn_of_shore_topics(ship: ShipConfig, queue: KafkaQueue) -> None:
    try:
        topics = sorted({key.topic for key in queue.partitions()})
    except QueueUnavailable:
        topics = []  # the client reports an unreachable broker itself
    for warning in shore_topic_warnings(ship, topics):
        log.warning("%s", warning)


def ship_replays(ship: ShipConfig, state: SQLiteShipState, rules: ShipRules) -> ShipReplays:
    """Replays by range beside the consumer: each run reads under a consumer group of its own."""
    def open_queue(group: str) -> KafkaQueue:
        return KafkaQueue(QueueSettings(ship.kafka_bootstrap_servers, group, ship.topic_pattern,
                                        dict(ship.kafka_consumer_options)))

    return ShipReplays(state, open_queue,
                       lambda epoch: normalizer_for(dataclasses.replace(ship, replay_epoch=epoch)),
                       rules, ReplaySettings(float(ship.replay_rate_records_per_sec)))


def ship_rules(ship: ShipConfig, state: SQLiteShipState,
               ship_target: ShipTargetConfig | None,
               activated: Activated | None = None) -> ShipRules:
    """The rule runtime of this ship: rules are checked against `[ship_target]`'s tables, or
    only statically without one."""
    return ShipRules(SQLiteRules(state.database), rule_schema_source(ship_target),
                     MaskKeyFile(ship.rules_mask_key_path(ship.state_path)), activated)


def activation_snapshots(config: Config) -> Activated | None:
    """Rule activation snapshots go to this node's built-in binlog capture (None without one:
    a rule's `snapshot` then asks for nothing, and the client says so once)."""
    if config.capture.source is not CaptureSource.MYSQL:
        return None
    return ActivationSnapshots(config.capture.position_path, topic_prefix(config))


def rule_schema_source(ship_target: ShipTargetConfig | None) -> SchemaSource | None:
    if ship_target is None or not ship_target.enabled:
        return None
    if ship_target.kind is ShipTargetKind.SQLITE:
        return SQLiteSchemaSource(ship_target.sqlite_path)
    return MySQLSchemaSource(ship_target.host, ship_target.port, ship_target.user,
                             ship_target.password)


def downlink_settings(ship: ShipConfig) -> DownlinkSettings:
    return DownlinkSettings(node_id=ship.node_id, shore_node_id=ship.shore_node_id,
                            page_size=ship.commands_page_size,
                            interval=float(ship.commands_interval_seconds))


def ship_tls_context(ship: ShipConfig) -> ssl.SSLContext | None:
    """The TLS context of an https shore URL from the `[ship]` TLS files (None for http)."""
    if not ship.shore_url.startswith("https://"):
        return None
    return tls_context(ship.tls_ca_file, ship.tls_client_cert_file, ship.tls_client_key_file)
