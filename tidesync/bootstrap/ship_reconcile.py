"""The ship's answering side of reconciliation (`[ship_target]`), loaded when first used.

Answering a reconciliation needs SQLAlchemy and the digest code; a `tidesync ship run` that is
never asked for one does not load them (about 13 MiB of its resident memory). The business
database connection is shared with the shore's side (`tidesync.bootstrap.reconcile`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.settings import CaptureSource
from tidesync.config import Config, TargetConfig
from tidesync.domain.clock import utc_now
from tidesync.domain.downlink_command import ReconcilePayload, SnapshotKeysPayload
from tidesync.ship.downlink import CommandOutcome, CommandReconciler

if TYPE_CHECKING:
    import sqlalchemy as sa

    from tidesync.ship.reconcile import AnswerLink, BusinessConnection
    from tidesync.target.digests import Key


def business_connection(target: TargetConfig) -> BusinessConnection:
    """Opens a SQLAlchemy connection to a business database (MySQL, or `sqlite_path`)."""

    @contextlib.contextmanager
    def connect() -> Iterator[sa.Connection]:
        import sqlalchemy as sa  # loaded by the first reconciliation

        from tidesync.target import digests  # needs SQLAlchemy

        if target.sqlite_path:
            url = sa.URL.create("sqlite", database=target.sqlite_path)
        else:
            url = sa.URL.create("mysql+pymysql", username=target.user,
                                password=target.password, host=target.host, port=target.port,
                                database=target.database or None,
                                query={"charset": "utf8mb4",
                                       "connect_timeout": str(target.connect_timeout_seconds)})
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            with engine.connect() as connection:
                digests.prepare_connection(connection)
                yield connection
        finally:
            engine.dispose()
    return connect


class DeferredReconciler:
    """A `CommandReconciler` built on its first turn."""

    def __init__(self, build: Callable[[], CommandReconciler]) -> None:
        self._build = build
        self._built: CommandReconciler | None = None

    @property
    def loaded(self) -> bool:
        return self._built is not None

    def _reconciler(self) -> CommandReconciler:
        if self._built is None:
            self._built = self._build()
        return self._built

    def answer(self, turn: ReconcilePayload, command_id: bytes) -> CommandOutcome:
        return self._reconciler().answer(turn, command_id)

    def snapshot(self, request: SnapshotKeysPayload) -> CommandOutcome:
        return self._reconciler().snapshot(request)


def ship_reconciler(config: Config, link: object) -> CommandReconciler | None:
    """The ship's answering side over `[ship_target]`, with snapshots when the binlog
    capture runs here (None: the link cannot post answers, e.g. a benchmark's)."""
    if not callable(getattr(link, "reconcile_answer", None)):
        return None
    target = config.ship_target.as_target(config.ship.node_id or "ship")
    snapshots = None
    if config.capture.source is CaptureSource.MYSQL:
        prefix, position_path = topic_prefix(config), config.capture.position_path

        def snapshots_of(database: str, table: str, keys: Sequence[Key], actor: str,
                         reason: str) -> int:
            from tidesync.capture.snapshot_store import SnapshotStore

            store = SnapshotStore(position_path)
            try:
                return store.request(prefix, database, table, keys=list(keys),
                                     chunk_rows=1000, reason=reason, actor=actor,
                                     now=utc_now())
            finally:
                store.close()
        snapshots = snapshots_of

    def build() -> CommandReconciler:
        from tidesync.ship.reconcile import ShipReconciler

        return ShipReconciler(config.ship.node_id, business_connection(target),
                              cast("AnswerLink", link), snapshots)
    return DeferredReconciler(build)
