"""The shore worker process (`tidesync shore work`): apply processor, views, arbiter and shore
CDC consumer over the configured event store and business database."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.nodes import NodeNotFound, NodesApplication
from tidesync.bootstrap.business_db import business_connection
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.bootstrap.reconcile import reconcile_schedule
from tidesync.bootstrap.rules import (
    LazyRuleReleases,
    build_rule_activations,
    open_rule_releases,
)
from tidesync.bootstrap.target import build_target_applier
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, QueueSettings
from tidesync.config import Config, TargetConfig
from tidesync.domain.arbitration import Policy, PolicyName
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.rules.release import ReleasedRules
from tidesync.ingress.routes import Ingress
from tidesync.migrations import migrate_postgres
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import ViewSettings
from tidesync.shore.arbiter import Arbiter, ArbiterSettings, Pool
from tidesync.shore.conflicts import PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.downlink import LazyDownlink, open_downlink
from tidesync.shore.downlink_rules import DownlinkRules
from tidesync.shore.gap_resend import DownlinkGapResends
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.reconcile_link import ExchangeStore, ReconcileLink
from tidesync.shore.reconcile_repair import ReconcileStep
from tidesync.shore.rule_activation import RuleActivationStep
from tidesync.shore.rule_scope import NodeProfiles
from tidesync.shore.settings import TieBreak
from tidesync.shore.shore_cdc import (
    ClosingConsumer,
    PostgresConsumerLock,
    ShoreCdcConsumer,
    ShoreCdcRunner,
    TargetNodes,
)
from tidesync.shore.shore_cdc_holds import ShoreCdcHolds
from tidesync.shore.work_queue import PostgresWorkQueue, WorkQueue
from tidesync.shore.worker import ShoreApps, ShoreWorker
from tidesync.target.contract import TargetApplier
from tidesync.target.one_way_mysql import MySQLOneWayApplier
from tidesync.target.one_way_sqlite import SQLiteOneWayApplier


def view_settings(config: Config) -> ViewSettings:
    """The views' settings: `conflicts.manual_sla_hours` and `[projections]`."""
    return ViewSettings(dt.timedelta(hours=config.conflicts.manual_sla_hours),
                        float(config.projections.refresh_seconds), config.projections.batch_size)


def open_pool(config: Config) -> ConnectionPool[psycopg.Connection[TupleRow]]:
    """The PostgreSQL event store's database, its tidesync tables migrated."""
    conninfo = postgres_conninfo(config.event_store)
    migrate_postgres(conninfo)
    return ConnectionPool(conninfo, min_size=1, max_size=config.event_store.postgres_pool_size,
                          open=True)


def open_work_queue(config: Config) -> WorkQueue:
    """The apply work tables of the event store; `close()` releases its connections."""
    return PostgresWorkQueue(open_pool(config))


def build_worker(config: Config, applier: TargetApplier,
                 clock: Clock = utc_now,
                 settings: ProcessorSettings | None = None, *,
                 rules: ReleasedRules | None = None,
                 profiles: NodeProfiles | None = None) -> tuple[ShoreWorker, Any]:
    """A worker over the configured event store; returns it and a closer.

    `rules`: the released sync rules that authorize and shape each event, decide conflict
    policies and send one-way tables to an applier by key on the `[target]` database (by
    default the rule releases of the event store); while none is released each table is its
    own implicit rule (`[apply.node_tables]`, `[conflicts].policies`). `profiles`: nodes'
    groups and tags for rule selectors (by default the registered nodes')."""
    queue = open_work_queue(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    # A sequence gap stalled past its deadline asks the ship to resend (a RESEND command).
    resends = DownlinkGapResends(open_downlink(event_store_env(config.event_store),
                                               postgres_conninfo(config.event_store),
                                               config.downlink.max_page_size))
    owned: list[Callable[[], None]] = []
    nodes = NodesApplication(env=event_store_env(config.event_store))
    owned.append(nodes.close)
    if rules is None:
        releases = open_rule_releases(config)
        owned.append(releases.close)
        rules = releases
    if profiles is None:
        profiles = NodeProfileLookup(nodes)
    reports = build_rule_activations(config)
    owned.append(reports.close)
    one_way = build_one_way_applier(config.target)
    processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, queue, applier, clock, settings,
                               resends=resends, rules=rules, profiles=profiles,
                               one_way=one_way)
    assert isinstance(queue, PostgresWorkQueue)
    pool = queue.pool
    # Every registered view runs here, each with its position tracked (see projections/).
    catalogue = default_catalogue(view_settings(config))
    views = catalogue.open_applications(
        event_store_env(config.event_store),
        existing={"apply_jobs": apps.apply_jobs, "conflict_cases": apps.conflicts})
    worker = ShoreWorker(processor, list(catalogue.runners(views, pool)))
    worker.arbiter, close_arbiter = build_arbiter(config, apps.conflicts, pool, clock, rules)
    # Offered releases become ACTIVE once every node they select reports running them.
    worker.rule_activation = RuleActivationStep(rules, reports, nodes)
    # Reconciliation over the link: ships' answers taken up, `[reconcile]`'s schedule.
    link = ReconcileLink(ExchangeStore(pool), resends.downlink,
                         business_connection(config.target), clock,
                         config.reconcile.answer_timeout)
    worker.reconcile = ReconcileStep(link, reconcile_schedule(config, link, rules, nodes, clock))

    def close_views() -> None:
        close_arbiter()
        views.close()

    worker.shore_cdc = shore_cdc_runner(config)

    def close() -> None:
        if worker.shore_cdc is not None:
            worker.shore_cdc.close()
        applier.close()
        one_way.close()
        close_views()
        resends.close()
        for closer in reversed(owned):
            closer()
        apps.close()
        queue.close()

    return worker, close


class NodeProfileLookup:
    """Nodes' groups and tags for rule selectors, from the Node aggregates (an unknown node
    has none, so only rules naming every node select it)."""

    def __init__(self, nodes: NodesApplication) -> None:
        self.nodes = nodes

    def profile(self, node_id: str) -> tuple[frozenset[str], frozenset[str]]:
        try:
            profile = self.nodes.node(node_id).profile
        except NodeNotFound:
            return frozenset(), frozenset()
        return profile.groups, profile.tags


def shore_cdc_runner(config: Config) -> ShoreCdcRunner | None:
    """The shore CDC consumer when `downlink.kafka_bootstrap_servers` is set."""
    if not config.downlink.kafka_bootstrap_servers:
        return None
    return build_shore_cdc(config)


def build_one_way_applier(target: TargetConfig) -> TargetApplier:
    """The applier by key of one-way (UPLINK) rules' tables on the `[target]` database."""
    if target.sqlite_path:
        return SQLiteOneWayApplier(target.sqlite_path, node_id=target.node_id)
    return MySQLOneWayApplier(host=target.host, port=target.port, user=target.user,
                              password=target.password, database=target.database or None,
                              node_id=target.node_id,
                              connect_timeout=target.connect_timeout_seconds,
                              read_timeout=target.read_timeout_seconds,
                              write_timeout=target.write_timeout_seconds,
                              lock_wait_timeout=target.lock_wait_timeout_seconds)


def build_arbiter(config: Config, conflicts: ConflictCasesApplication, pool: Pool,
                  clock: Clock, rules: ReleasedRules | None = None,
                  ) -> tuple[Arbiter, Callable[[], None]]:
    """The arbiter of `[conflicts]` over the PostgreSQL event store; returns it and a closer.

    Decisions are written to the shore target by an applier of their own: its node id is not
    the shore's, so that a decision keeping the shore's origin passes the guard that stops a
    shore change from being applied back to the shore."""
    env = event_store_env(config.event_store)
    downlink = open_downlink(env, postgres_conninfo(config.event_store),
                             config.downlink.max_page_size)
    keys = PostgresRecordKeys(pool)
    reader = TargetRevisionReader(lambda: build_target_applier(config.target), keys)
    nodes = TargetNodes(config.downlink.nodes, lambda: NodesApplication(env=env))
    settings = config.conflicts

    def policy_for(database: str, table: str) -> Policy:
        chosen = settings.policy_for(database, table)
        return Policy(PolicyName(chosen.policy.value), chosen.time_column,
                      dt.timedelta(seconds=settings.max_clock_skew_seconds),
                      settings.tie_break is TieBreak.LOWER_NODE_ID)

    arbiter = Arbiter(
        conflicts, downlink, pool, PostgresWorkQueue(pool), reader, keys,
        lambda: build_target_applier(dataclasses.replace(
            config.target, node_id=f"{config.target.node_id}.arbiter")),
        nodes,
        ArbiterSettings(shore_node_id=config.target.node_id, policy_for=policy_for,
                        max_clock_skew=dt.timedelta(seconds=settings.max_clock_skew_seconds),
                        lower_node_id_wins=settings.tie_break is TieBreak.LOWER_NODE_ID,
                        lease=dt.timedelta(seconds=settings.auto_decide_lease_seconds),
                        manual_sla=dt.timedelta(hours=settings.manual_sla_hours)),
        clock, rules=rules)

    def close() -> None:
        arbiter.close()
        reader.close()
        nodes.close()
        downlink.close()

    return arbiter, close


def build_shore_cdc(config: Config) -> ShoreCdcRunner:
    """The shore CDC runner of `[downlink]` and `[target]` (PostgreSQL event store only).

    While rules are offered, the rule releases and the registered nodes' groups and tags
    decide which nodes get a change and in what shape (`[downlink].nodes` does not)."""
    downlink_config, store = config.downlink, config.event_store
    env = event_store_env(store)
    conninfo = postgres_conninfo(store)

    def open_consumer() -> ShoreCdcConsumer:
        types = (InMemoryColumnTypes.from_json_file(downlink_config.column_types_file)
                 if downlink_config.column_types_file else None)
        normalizer = DebeziumNormalizer(NormalizerSettings(
            origin_node_id=config.target.node_id,
            source_connector_id=downlink_config.source_connector_id,
            bidirectional_tables=downlink_config.table_set(), column_types=types))
        downlink = open_downlink(env, conninfo, downlink_config.max_page_size)
        try:
            applier = build_target_applier(config.target)
        except Exception:
            downlink.close()
            raise
        queue = KafkaQueue(QueueSettings(
            downlink_config.kafka_bootstrap_servers, downlink_config.consumer_group,
            downlink_config.topic_pattern, dict(downlink_config.kafka_consumer_options)))
        return ClosingConsumer(
            queue, normalizer, applier, downlink,
            TargetNodes(downlink_config.nodes, lambda: NodesApplication(env=env)),
            config.target.node_id, releases=ShoreCdcHolds.open(conninfo),
            rules=DownlinkRules(LazyRuleReleases(config), lambda: NodesApplication(env=env)))

    return ShoreCdcRunner(open_consumer, PostgresConsumerLock(conninfo))


def attach_downlink(config: Config, sync_api: Ingress) -> None:
    """Serve GET /sync/v1/commands and POST /sync/v1/command-acks from the event store's
    PostgreSQL database (opened on first use)."""
    env = event_store_env(config.event_store)
    conninfo = postgres_conninfo(config.event_store)
    sync_api.use_downlink(LazyDownlink(
        lambda: open_downlink(env, conninfo, config.downlink.max_page_size)))
