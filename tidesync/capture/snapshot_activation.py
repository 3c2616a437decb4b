"""Snapshots asked for by rule activations: when a version of a rule with `snapshot =
"on_activation"` becomes active on the ship, the binlog capture is asked for a snapshot of the
rule's source table, once per rule version.

The ship client calls this after it stored the switch to the new rule generation (see
`tidesync.ship.rules`); the request goes into the capture's position file like one from
`tidesync snapshot start`, naming the rule and its version.
"""

from __future__ import annotations

import datetime as dt
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from tidesync.capture.errors import CaptureError
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.domain.rules.sync_rule import SyncRule

log = logging.getLogger(__name__)

ACTOR = "system:rule-activation"
DEFAULT_CHUNK_ROWS = 1000


class ActivationSnapshots:
    """Queues one whole-table snapshot per activated rule version for the capture `capture`
    (its topic prefix) keeping its position in `position_path`."""

    def __init__(self, position_path: str | Path, capture: str,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
        self.position_path = Path(position_path)
        self.capture = capture
        self.chunk_rows = chunk_rows

    def __call__(self, rules: Sequence[SyncRule], now: dt.datetime) -> None:
        try:
            store = SnapshotStore(self.position_path)
        except (sqlite3.Error, OSError) as error:
            log.error("cannot open the capture's position file to ask for rule activation"
                      " snapshots (%s); asked again with the next offered config",
                      type(error).__name__)
            return
        try:
            for rule in rules:
                self._ask(store, rule, now)
        finally:
            store.close()

    def _ask(self, store: SnapshotStore, rule: SyncRule, now: dt.datetime) -> None:
        try:
            created = store.request_once_for_rule(
                self.capture, rule.source_database, rule.source_table,
                (rule.rule_id, rule.version), chunk_rows=self.chunk_rows, actor=ACTOR, now=now)
        except (sqlite3.Error, CaptureError) as error:
            log.error("rule %s@%d: the activation snapshot could not be queued (%s); asked"
                      " again with the next offered config", rule.rule_id, rule.version,
                      type(error).__name__)
            return
        if created is not None:
            log.info("rule %s@%d activated: snapshot %d of %s.%s queued for the capture",
                     rule.rule_id, rule.version, created, rule.source_database,
                     rule.source_table)
