"""The ship's state store (§7.5, §7.6): SQLite indexes over the CDC queue, never its payloads.

`SQLiteShipState` is the facade the ship client uses; the stores behind it are one module per
concern: `database` (file, transactions, migrations, cursors), `watermarks`, `intake`,
`receipts`, `commands` (shore commands), `dispositions` (blocked records and operator actions)
and `reporting`. The decisions themselves are pure: `tidesync.domain.ship_intake` and
`tidesync.domain.watermarks`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.downlink_command import CommandKind, CommandResult
from tidesync.domain.ship_intake import (
    DONE,
    DUPLICATE_RESULT,
    PLATFORM_WRITE_RESULT,
    RECORD_ID_NAMESPACE,
    SENDABLE,
    EventState,
    StateReason,
    record_id,
)
from tidesync.ship.state.commands import (
    COMMANDS_CURSOR,
    COMMANDS_PAGE_END,
    AppliedCommand,
    CommandState,
    SQLiteCommands,
)
from tidesync.ship.state.database import (
    MIGRATIONS_DIR,
    Direction,
    Migration,
    ShipStateDatabase,
    StateStoreError,
    ship_migrations,
)
from tidesync.ship.state.dispositions import (
    BlockedRecord,
    Disposed,
    DispositionRefused,
    SQLiteDispositions,
)
from tidesync.ship.state.intake import (
    Consumed,
    Recorded,
    SQLiteIntake,
    capture_id,
    platform_write_id,
    queue_key_digest,
    rule_of,
)
from tidesync.ship.state.receipts import (
    RECEIPTS_CURSOR,
    Progress,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteReceipts,
    TerminalResult,
)
from tidesync.ship.state.reporting import Health, PartitionBacklog, SQLiteStateReports
from tidesync.ship.state.retention import SQLiteRetention
from tidesync.ship.state.watermarks import BlockedKeys, FirstOffset, SQLiteWatermarks, Watermark

__all__ = [
    "COMMANDS_CURSOR",
    "COMMANDS_PAGE_END",
    "DONE",
    "DUPLICATE_RESULT",
    "MIGRATIONS_DIR",
    "PLATFORM_WRITE_RESULT",
    "RECEIPTS_CURSOR",
    "RECORD_ID_NAMESPACE",
    "SENDABLE",
    "AppliedCommand",
    "BlockedRecord",
    "CommandState",
    "Consumed",
    "Direction",
    "Disposed",
    "DispositionRefused",
    "EventState",
    "Health",
    "Migration",
    "PartitionBacklog",
    "Progress",
    "ReceiveAnswer",
    "ReceiveOutcome",
    "Recorded",
    "SQLiteShipState",
    "StateReason",
    "StateStoreError",
    "TerminalResult",
    "Watermark",
    "capture_id",
    "platform_write_id",
    "queue_key_digest",
    "record_id",
    "rule_of",
    "ship_migrations",
]


class SQLiteShipState:
    """The ship state store over one SQLite file (WAL, synchronous=FULL, foreign keys).

    One instance per process and consumer group; it composes the stores of each concern over
    one connection. Methods that write run one transaction each. `durable=False`
    (synchronous=OFF) exists for property tests only.
    """

    def __init__(self, path: str | Path, origin_node_id: str, consumer_group: str, *,
                 direction: Direction = Direction.UPLINK, durable: bool = True,
                 read_only: bool = False, clock: Clock = utc_now) -> None:
        self.database = ShipStateDatabase(path, origin_node_id, consumer_group,
                                          direction=direction, durable=durable,
                                          read_only=read_only, clock=clock)
        blocked_keys = BlockedKeys(self.database)
        watermarks = SQLiteWatermarks(self.database, blocked_keys)
        self.partition_watermarks = watermarks
        self.intake = SQLiteIntake(self.database, watermarks, blocked_keys)
        self.receipts = SQLiteReceipts(self.database, watermarks, blocked_keys)
        self.commands = SQLiteCommands(self.database)
        self.dispositions = SQLiteDispositions(self.database, watermarks, blocked_keys)
        self.reports = SQLiteStateReports(self.database)
        self.retention = SQLiteRetention(self.database)
        if not read_only:
            self.migrate()

    # ------------------------------------------------------------------ the file

    @property
    def path(self) -> Path:
        return self.database.path

    @property
    def origin_node_id(self) -> str:
        return self.database.origin_node_id

    @property
    def consumer_group(self) -> str:
        return self.database.consumer_group

    @property
    def direction(self) -> Direction:
        return self.database.direction

    @property
    def clock(self) -> Clock:
        return self.database.clock

    @property
    def conn(self) -> sqlite3.Connection:
        return self.database.conn

    def close(self) -> None:
        self.database.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.database.transaction() as conn:
            yield conn

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        return self.database.migrate(migrations)

    def cursor(self, name: str = RECEIPTS_CURSOR) -> str:
        return self.database.cursor(name)

    # ------------------------------------------------------------------ watermarks

    def watermarks(self) -> list[Watermark]:
        return self.partition_watermarks.watermarks()

    def watermark(self, key: PartitionKey) -> Watermark | None:
        return self.partition_watermarks.watermark(key)

    def start_partition(self, key: PartitionKey, replay_epoch: int,
                        first_offset: FirstOffset | None = None) -> Watermark | None:
        return self.partition_watermarks.start_partition(key, replay_epoch, first_offset)

    def mark_committed(self, offsets: dict[PartitionKey, int]) -> None:
        self.partition_watermarks.mark_committed(offsets)

    def set_end_offsets(self, offsets: dict[PartitionKey, int]) -> None:
        self.partition_watermarks.set_end_offsets(offsets)

    # ------------------------------------------------------------------ intake and answers

    def record(self, items: Sequence[Consumed], replay_epoch: int) -> Recorded:
        return self.intake.record(items, replay_epoch)

    def mark(self, event_ids: Iterable[uuid.UUID], state: EventState) -> None:
        self.receipts.mark(event_ids, state)

    def apply_answers(self, answers: Sequence[ReceiveAnswer]) -> Progress:
        return self.receipts.apply_answers(answers)

    def apply_receipts(self, results: Sequence[TerminalResult], cursor: str) -> Progress:
        return self.receipts.apply_receipts(results, cursor)

    # ------------------------------------------------------------------ shore commands

    def command_progress(self, applied_id: bytes | None,
                         command_id: bytes) -> tuple[str | None, bool]:
        return self.commands.command_progress(applied_id, command_id)

    def begin_command(self, applied_id: bytes, command_id: bytes, sequence: int,
                      kind: CommandKind) -> None:
        self.commands.begin_command(applied_id, command_id, sequence, kind)

    def finish_command(self, applied_id: bytes | None, command_id: bytes, sequence: int,
                       result: CommandResult, reason: str, local_revision: bytes,
                       ack: bytes) -> None:
        self.commands.finish_command(applied_id, command_id, sequence, result, reason,
                                     local_revision, ack)

    def pending_acks(self, limit: int) -> list[tuple[bytes, bytes]]:
        return self.commands.pending_acks(limit)

    def pending_ack_count(self) -> int:
        return self.commands.pending_ack_count()

    def acks_answered(self, answered: Iterable[bytes]) -> None:
        self.commands.acks_answered(answered)

    def page_processed(self, next_cursor: str) -> None:
        self.commands.page_processed(next_cursor)

    def applied_command(self, applied_id: bytes) -> tuple[str, str | None, str | None] | None:
        return self.commands.applied_command(applied_id)

    def applied_command_record(self, applied_id: bytes) -> AppliedCommand | None:
        return self.commands.applied_command_record(applied_id)

    def command_counts(self) -> dict[str, int]:
        return self.commands.command_counts()

    # ------------------------------------------------------------------ blocked records

    def blocked_records(self, limit: int = 100) -> list[BlockedRecord]:
        return self.dispositions.blocked_records(limit)

    def blocked_reasons(self) -> Counter[str]:
        return self.dispositions.blocked_reasons()

    def expire_blocked(self, topic: str, partition: int, offset: int, *, actor: str,
                       reason: str, two_way_rules: frozenset[str] = frozenset()) -> Disposed:
        return self.dispositions.expire_blocked(topic, partition, offset, actor=actor,
                                                reason=reason, two_way_rules=two_way_rules)

    def confirm_origin(self, topic: str, partition: int, offset: int, *, actor: str,
                       reason: str) -> Disposed:
        return self.dispositions.confirm_origin(topic, partition, offset, actor=actor,
                                                reason=reason)

    def operator_actions(self, limit: int = 100) -> list[dict[str, object]]:
        return self.dispositions.operator_actions(limit)

    # ------------------------------------------------------------------ reporting

    def set_health(self, items: Iterable[Health]) -> None:
        self.reports.set_health(items)

    def health(self) -> list[Health]:
        return self.reports.health()

    def state_counts(self) -> dict[str, int]:
        """Events per state; those this process has on their way count as IN_FLIGHT."""
        return self.receipts.with_in_flight(self.reports.state_counts())

    def prune(self, watermarks: Iterable[Watermark], retain_offsets: int, limit: int) -> int:
        """Prune up to `limit` applied events behind the queue commits (see `retention`)."""
        return self.retention.prune(watermarks, retain_offsets, limit)

    def awaits_receipts(self) -> bool:
        return self.reports.awaits_receipts()

    def backlog(self, watermark: Watermark) -> PartitionBacklog:
        return self.reports.backlog(watermark)

    def average_bytes(self) -> float:
        return self.reports.average_bytes()

    def record_metrics(self, sampled_at: dt.datetime) -> None:
        self.reports.record_metrics(sampled_at)
