"""The ship's answering side of reconciliation (`[ship_target]`), loaded when first used.

Answering a reconciliation needs SQLAlchemy and the digest code; a `tidesync ship run` that is
never asked for one does not load them (about 13 MiB of its resident memory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from tidesync.bootstrap.business_db import business_connection
from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.settings import CaptureSource
from tidesync.config import Config
from tidesync.domain.clock import utc_now
from tidesync.domain.downlink_command import ReconcilePayload, SnapshotKeysPayload
from tidesync.ship.downlink import CommandOutcome, CommandReconciler

if TYPE_CHECKING:
    from tidesync.ship.reconcile import AnswerLink
    from tidesync.target.digests import Key


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
