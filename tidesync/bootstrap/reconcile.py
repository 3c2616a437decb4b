"""Reconciliation over the link, wired from the configuration: the shore's exchanges (store,
downlink, `[target]` database, schedule). The ship's answering side is
`tidesync.bootstrap.ship_reconcile`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from psycopg_pool import ConnectionPool

from tidesync.apps.nodes import NodesApplication
from tidesync.bootstrap.business_db import business_connection
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.config import Config
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.rules.release import ReleasedRules
from tidesync.migrations import migrate_postgres
from tidesync.shore.downlink import open_downlink
from tidesync.shore.reconcile_link import ExchangeStore, ReconcileLink
from tidesync.shore.reconcile_repair import ReconcileSchedule


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
