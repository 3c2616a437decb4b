"""Reconciliation over the link, wired from the configuration: the shore's exchanges (store,
downlink, `[target]` database, schedule) and the ship's answering side (`[ship_target]`
database, the capture's snapshot requests)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from psycopg_pool import ConnectionPool

from tidesync.apps.nodes import NodesApplication
from tidesync.bootstrap.capture import topic_prefix
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.capture.settings import CaptureSource
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.config import Config, TargetConfig
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.rules.release import ReleasedRules
from tidesync.migrations import migrate_postgres
from tidesync.ship.reconcile import AnswerLink, BusinessConnection, ShipReconciler
from tidesync.shore.downlink import open_downlink
from tidesync.shore.reconcile_link import ExchangeStore, ReconcileLink
from tidesync.shore.reconcile_repair import ReconcileSchedule
from tidesync.target import digests
from tidesync.target.digests import Key


def business_connection(target: TargetConfig) -> BusinessConnection:
    """Opens a SQLAlchemy connection to a business database (MySQL, or `sqlite_path`)."""
    if target.sqlite_path:
        url = sa.URL.create("sqlite", database=target.sqlite_path)
    else:
        url = sa.URL.create("mysql+pymysql", username=target.user, password=target.password,
                            host=target.host, port=target.port,
                            database=target.database or None,
                            query={"charset": "utf8mb4",
                                   "connect_timeout": str(target.connect_timeout_seconds)})

    @contextlib.contextmanager
    def connect() -> Iterator[sa.Connection]:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            with engine.connect() as connection:
                digests.prepare_connection(connection)
                yield connection
        finally:
            engine.dispose()
    return connect


@contextlib.contextmanager
def reconcile_link(config: Config, clock: Clock = utc_now) -> Iterator[ReconcileLink]:
    """The shore's exchanges over the configured event store and `[target]` database."""
    conninfo = postgres_conninfo(config.event_store)
    migrate_postgres(conninfo)
    pool: ConnectionPool = ConnectionPool(conninfo, min_size=1, max_size=2, open=True)
    downlink = open_downlink(event_store_env(config.event_store), conninfo,
                             config.downlink.max_page_size)
    try:
        yield ReconcileLink(ExchangeStore(pool), downlink, business_connection(config.target),
                            clock, config.reconcile.answer_timeout)
    finally:
        downlink.close()
        pool.close()


def reconcile_schedule(config: Config, link: ReconcileLink, rules: ReleasedRules,
                       nodes: NodesApplication, clock: Clock = utc_now
                       ) -> ReconcileSchedule | None:
    """The shore worker's schedule (None when `[reconcile] interval_seconds` is 0)."""
    if not config.reconcile.interval_seconds:
        return None
    return ReconcileSchedule(link, rules, nodes.active_profiles,
                             config.reconcile.interval_seconds, clock)


def ship_reconciler(config: Config, link: object) -> ShipReconciler | None:
    """The ship's answering side over `[ship_target]`, with snapshots when the binlog
    capture runs here (None: the link cannot post answers, e.g. a benchmark's)."""
    if not isinstance(link, AnswerLink):
        return None
    target = config.ship_target.as_target(config.ship.node_id or "ship")
    snapshots = None
    if config.capture.source is CaptureSource.MYSQL:
        prefix, position_path = topic_prefix(config), config.capture.position_path

        def snapshots_of(database: str, table: str, keys: Sequence[Key], actor: str,
                         reason: str) -> int:
            store = SnapshotStore(position_path)
            try:
                return store.request(prefix, database, table, keys=list(keys),
                                     chunk_rows=1000, reason=reason, actor=actor,
                                     now=utc_now())
            finally:
                store.close()
        snapshots = snapshots_of
    return ShipReconciler(config.ship.node_id, business_connection(target), link, snapshots)
