"""Publishing a capture's records and saving its position once they are acknowledged.

Delivery is at-least-once, as with Debezium. The resume position (MariaDB: the GTID state;
MySQL: binlog file/pos after the transaction's XID; SQLite: the changelog seq) is saved in a
small SQLite file (WAL, synchronous=FULL) only after the producer has acknowledged every record
up to that transaction's commit, so a transaction is never lost. A crash between that flush and
the save re-emits the transactions after the saved position: each re-emitted record carries the
same source coordinates (server_id, gtid, file, pos, row; for SQLite the changelog seq as pos)
as the first copy, so consumers can recognise and drop the duplicates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tidesync import failpoints
from tidesync.capture.change_records import RowChange, change_records
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import CapturePosition, SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.domain.clock import Clock, utc_now

logger = logging.getLogger(__name__)

FAILPOINT_AFTER_FLUSH = "capture_after_flush"
"""Hit after the producer flushed a batch and before its position is saved (also as
`capture_after_flush#N` for the N-th checkpoint of the process)."""
FAILPOINT_AFTER_SAVE = "capture_after_save"


@dataclass
class CaptureStats:
    """What one run of capture did."""

    row_changes: int = 0
    records: int = 0
    transactions: int = 0
    checkpoints: int = 0
    position: CapturePosition | None = None


@dataclass
class Checkpointer:
    """Publishes records and saves the position of the last whole transaction, but only once
    the producer has acknowledged every record produced before it."""

    publisher: KafkaEnvelopePublisher
    store: SQLitePositionStore
    name: str
    source: str
    max_records: int = 2000
    interval_seconds: float = 0.5
    tombstones: bool = True
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    stats: CaptureStats = field(default_factory=CaptureStats)
    after_save: Callable[[CapturePosition], None] | None = None
    _position: CapturePosition | None = None
    _saved: CapturePosition | None = None
    _unsaved_records: int = 0
    _last_checkpoint: float = 0.0

    def __post_init__(self) -> None:
        self._last_checkpoint = self.monotonic()

    def start_at(self, position: CapturePosition, *, save: bool) -> None:
        """Where this run starts; a first start saves it at once (nothing to flush yet), so a
        restart never skips what was written while capture was down."""
        self._position = self._saved = self.stats.position = position
        if save:
            self.store.save(self.name, self.source, position, self.clock())

    def publish(self, writer: DebeziumEnvelopeWriter, change: RowChange) -> None:
        records = change_records(writer, change, self.clock(), tombstones=self.tombstones)
        for record, headers in records:
            self.publisher.publish(record, headers)
        self.stats.row_changes += 1
        self.stats.records += len(records)
        self._unsaved_records += len(records)

    def transaction_done(self, position: CapturePosition) -> None:
        """A transaction (or DDL) is complete up to `position`; checkpoint when due."""
        self._position = position
        self.stats.transactions += 1
        if self.due():
            self.checkpoint()

    def due(self) -> bool:
        if self._unsaved_records >= self.max_records:
            return True
        return (self._position != self._saved
                and self.monotonic() - self._last_checkpoint >= self.interval_seconds)

    def checkpoint(self) -> None:
        """Flush, then save the position of the last whole transaction."""
        self._last_checkpoint = self.monotonic()
        if self._unsaved_records:
            self.publisher.flush()
            self._unsaved_records = 0
        if self._position is None or self._position == self._saved:
            return
        self.stats.checkpoints += 1
        failpoints.hit(FAILPOINT_AFTER_FLUSH)
        failpoints.hit(f"{FAILPOINT_AFTER_FLUSH}#{self.stats.checkpoints}")
        self.store.save(self.name, self.source, self._position, self.clock())
        failpoints.hit(FAILPOINT_AFTER_SAVE)
        self._saved = self.stats.position = self._position
        if self.after_save is not None:
            self.after_save(self._position)
        logger.debug("capture %s saved position %s", self.name, self._position.describe())

    @property
    def saved(self) -> CapturePosition | None:
        return self._saved

    def describe_saved(self) -> str:
        return self._saved.describe() if self._saved is not None else "(none)"
