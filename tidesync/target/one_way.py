"""Applying one-way tables, which carry no sync metadata (§5.3): by key, idempotent. On the
shore the targets of UPLINK rules; on a ship the tables of DOWNLINK-only rules (positions there
are the shore's command sequences, `tidesync.ship.remote_apply`).

Such a table has no `_sync_*` columns and no triggers; nothing on it can be compared and set,
so no conflict is ever recorded for it. Each event is written by its primary key: an insert,
update or snapshot as an upsert of its after image, a delete as a plain DELETE. Two guards keep
that exact:

An UPDATE arrives with its key and changed columns only: it is an UPDATE by key, and one
that finds no row is REJECTED `ROW_MISSING` (it cannot make a whole row); one that carries
every column of the table is an upsert like an insert.

* the `_sync_applied` ledger, in the same transaction as the row: an event is written once;
* `_sync_key_position`, one row per table and key digest holding the source coordinates of
  the last event written to that key (origin node, topic, partition, replay epoch, position):
  an event older than it from the same source partition (a late replay, say) is answered
  `ALREADY_APPLIED` (`SUPERSEDED`) without writing, so it never overwrites a newer one. Events
  from another partition or node write over it: their order is not known here.

A delete keeps the key's position row, so an older insert arriving later cannot bring the row
back. Backends supply the statements (`one_way_mysql`, `one_way_sqlite`); this module plans
the writes and decides every outcome.
"""

from __future__ import annotations

import abc
import datetime as dt
import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidesync.domain.change_event import ChangeEvent, Operation, Revision
from tidesync.domain.clock import Clock
from tidesync.domain.errors import TidesyncError
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.domain.value_checks import event_problem
from tidesync.domain.values import Value
from tidesync.target.cas import (
    DuplicatePrimaryKey,
    StatementRejected,
    key_in_table_order,
    reject_template,
    rejected,
)
from tidesync.target.contract import (
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
    TargetOutcomeKind,
)
from tidesync.target.table_state import TableShape

KEY_POSITION_TABLE = "_sync_key_position"
"""Per one-way table and key digest: the source coordinates of the last event written."""
MAX_TOPIC = 255
MAX_ORIGIN = 64
_MAX_BIGINT = 2**63
_LEDGER_RETRIES = 3
_METADATA = frozenset(METADATA_COLUMNS)


@dataclass(frozen=True, slots=True)
class OneWayShape:
    """A one-way table as the applier needs it: the table's shape (without metadata) and
    whether it has a unique index besides the primary key (an upsert must then not let the
    other index pick the row)."""

    table: TableShape
    other_unique_keys: bool = False


@dataclass(frozen=True, slots=True)
class SourcePosition:
    """Where an event was captured: its source partition and position in it."""

    origin_node_id: str
    topic: str
    partition: int
    replay_epoch: int
    position: int

    @classmethod
    def of(cls, event: ChangeEvent) -> SourcePosition:
        return cls(event.origin_node_id, event.source_topic, event.source_partition,
                   event.replay_epoch, event.source_position)

    def supersedes(self, other: SourcePosition) -> bool:
        """Whether this position is at or after `other` in the same source partition (a later
        replay epoch counts as later)."""
        return ((self.origin_node_id, self.topic, self.partition)
                == (other.origin_node_id, other.topic, other.partition)
                and (self.replay_epoch, self.position) >= (other.replay_epoch, other.position))


@dataclass(frozen=True, slots=True)
class OneWayWrite:
    """One event planned: its key in table order, the columns and values it writes (empty for
    a delete) and the key digest its position is kept under."""

    event: ChangeEvent
    shape: OneWayShape
    key: tuple[Value, ...]
    columns: tuple[str, ...]
    values: tuple[Value, ...]
    digest: str
    complete: bool = True
    """The columns cover the whole row (every column the database does not compute)."""
    source: SourcePosition = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", SourcePosition.of(self.event))

    @property
    def database(self) -> str:
        return self.shape.table.database

    @property
    def table(self) -> str:
        return self.shape.table.table

    @property
    def deletes(self) -> bool:
        return self.event.operation is Operation.DELETE

    @property
    def changes(self) -> list[tuple[str, Value]]:
        """The columns and values written besides the primary key."""
        key_columns = self.shape.table.key_columns
        return [(column, value) for column, value in zip(self.columns, self.values, strict=True)
                if column not in key_columns]


POSITION_COLUMNS = ("origin_node_id", "source_topic", "source_partition", "replay_epoch",
                    "source_position")
"""The source coordinates a `_sync_key_position` row keeps, in `SourcePosition` order."""


def position_row(write: OneWayWrite, updated_at: object) -> list[object]:
    """The `_sync_key_position` row of a write: table_name, key_digest, the POSITION_COLUMNS,
    event_id and `updated_at` (as the backend stores moments)."""
    source = write.source
    return [write.table, write.digest, source.origin_node_id, source.topic, source.partition,
            source.replay_epoch, source.position, str(write.event.event_id), updated_at]


def read_positions(rows: Iterable[Sequence[Any]]) -> dict[str, SourcePosition]:
    """Key digest → position, from rows of key_digest and the POSITION_COLUMNS."""
    return {str(digest): SourcePosition(str(origin), str(topic), int(partition), int(epoch),
                                        int(position))
            for digest, origin, topic, partition, epoch, position in rows}


def not_prepared(table: str) -> TargetOutcome:
    """The answer for a table the one-way applier cannot use as it is."""
    return reject_template(RejectReason.TABLE_NOT_ENABLED,
                           f"table {table} is not prepared for one-way sync"
                           " (tidesync target enable --direction UPLINK, or DOWNLINK on a ship)")


def key_digest(event: ChangeEvent) -> str:
    """sha256 hex of the canonical primary key (typed, in the event's column order)."""
    return hashlib.sha256(event.record.key_text().encode()).hexdigest()


def plan_one_way(event: ChangeEvent, shape: OneWayShape) -> OneWayWrite | TargetOutcome:
    """The write of an event, or its REJECTED outcome when it cannot be written."""
    table = shape.table
    try:
        key = key_in_table_order(table, event.primary_key)
    except ValueError as mismatch:
        return rejected(event, RejectReason.PRIMARY_KEY_MISMATCH, str(mismatch))
    position_problem = _position_problem(event)
    if position_problem:
        return rejected(event, RejectReason.INVALID_NAME, position_problem)
    digest = key_digest(event)
    if event.operation is Operation.DELETE:
        return OneWayWrite(event, shape, key, (), (), digest)
    assert event.after is not None
    columns: list[str] = []
    values: list[Value] = []
    for name, value in event.after.items():
        if name in _METADATA or table.is_generated(name):
            continue
        column = table.column_named(name)
        if column is None:
            return rejected(event, RejectReason.UNKNOWN_COLUMN,
                             f"column {name} does not exist in {table.table}")
        if column in table.key_columns and value != key[table.primary_key.index(column)]:
            return rejected(event, RejectReason.PRIMARY_KEY_CHANGED,
                             f"the change moves the row to another primary key ({column})")
        columns.append(column)
        values.append(value)
    for index, column in enumerate(table.primary_key):
        if column not in columns:
            columns.append(column)
            values.append(key[index])
    complete = all(column in columns for column in table.columns
                   if column not in _METADATA and not table.is_generated(column))
    return OneWayWrite(event, shape, key, tuple(columns), tuple(values), digest, complete)


def _position_problem(event: ChangeEvent) -> str:
    if len(event.source_topic) > MAX_TOPIC:
        return f"the source topic is longer than {MAX_TOPIC} characters"
    if len(event.origin_node_id) > MAX_ORIGIN:
        return f"the origin node id is longer than {MAX_ORIGIN} characters"
    if max(event.source_partition, event.replay_epoch, event.source_position) >= _MAX_BIGINT:
        return "a source coordinate does not fit in 63 bits"
    return ""


class _LedgerRace(TidesyncError):
    """Another writer recorded one of these event ids meanwhile: run the chunk again."""


class OneWayApplier(abc.ABC):
    """Applies a chunk of one-way events in one transaction, in order (a `TargetApplier`).

    A statement refused for an event's own reason rejects that event only: the database
    undoes just that statement, and the event's position is written only after its row.
    """

    def __init__(self, node_id: str, route: Route, clock: Clock) -> None:
        self.node_id = node_id
        self._route = route
        self._clock = clock
        self._shapes: dict[tuple[str, str], OneWayShape | TargetOutcome] = {}

    # -- what a backend provides --------------------------------------------------------------

    @abc.abstractmethod
    def _inspect(self, database: str, table: str) -> OneWayShape | TargetOutcome:
        """The table ready for one-way apply, or a REJECTED outcome template."""

    @abc.abstractmethod
    def _begin(self) -> None: ...

    @abc.abstractmethod
    def _commit(self) -> None: ...

    @abc.abstractmethod
    def _rollback(self) -> None: ...

    @abc.abstractmethod
    def _ledger_holds(self, database: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        ...

    @abc.abstractmethod
    def _positions(self, database: str, table: str,
                   digests: Sequence[str]) -> dict[str, SourcePosition]:
        """The stored positions of these key digests of a table."""

    @abc.abstractmethod
    def _upsert(self, write: OneWayWrite) -> None:
        """Insert the row or overwrite its columns by primary key (StatementRejected)."""

    @abc.abstractmethod
    def _update(self, write: OneWayWrite) -> int:
        """UPDATE the written columns by primary key; the rows matched (0 or 1)."""

    @abc.abstractmethod
    def _delete(self, write: OneWayWrite) -> None:
        """Delete the row by primary key (absent is fine)."""

    @abc.abstractmethod
    def _save_position(self, write: OneWayWrite, now: dt.datetime) -> None:
        """Insert or overwrite the key's position row with the write's source position."""

    @abc.abstractmethod
    def _insert_ledger(self, database: str, writes: Sequence[OneWayWrite],
                       now: dt.datetime) -> None:
        """One ledger INSERT of the writes' event ids; DuplicatePrimaryKey when one is there."""

    # -- the shared loop ----------------------------------------------------------------------

    def forget_tables(self) -> None:
        """Inspect every table again on next use (after `tidesync target enable`)."""
        self._shapes.clear()

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        if not events:
            return []
        plans = [self._plan(event) for event in events]
        for _ in range(_LEDGER_RETRIES):
            try:
                return self._attempt(plans)
            except _LedgerRace:
                continue
        raise TargetError("LEDGER_DUPLICATE", "the ledger kept refusing event ids")

    def _plan(self, event: ChangeEvent) -> OneWayWrite | TargetOutcome:
        if event.origin_node_id == self.node_id:
            return rejected(event, RejectReason.ORIGIN_IS_TARGET,
                             "an event that originated on this node is never applied back to it")
        problem = event_problem(event)
        if problem:
            return rejected(event, RejectReason(problem[0].value), problem[1])
        database, table = self._route(event.database, event.table)
        shape = self._shapes.get((database, table))
        if shape is None:
            shape = self._inspect(database, table)
            if isinstance(shape, OneWayShape):
                self._shapes[(database, table)] = shape
        if isinstance(shape, TargetOutcome):
            return TargetOutcome(event.event_id, shape.kind, shape.reason_code, shape.detail)
        return plan_one_way(event, shape)

    def _attempt(self, plans: Sequence[OneWayWrite | TargetOutcome]) -> list[TargetOutcome]:
        now = self._clock()
        writes = [plan for plan in plans if isinstance(plan, OneWayWrite)]
        outcomes: dict[uuid.UUID, TargetOutcome] = {}
        self._begin()
        try:
            in_ledger = self._in_ledger(writes)
            positions = self._stored_positions(writes)
            applied: dict[uuid.UUID, OneWayWrite] = {}
            for write in writes:
                event_id = write.event.event_id
                if event_id in in_ledger or event_id in applied:
                    outcomes[event_id] = _outcome(write, TargetOutcomeKind.ALREADY_APPLIED,
                                                  "IN_LEDGER")
                    continue
                row = (write.database, write.table, write.digest)
                stored = positions.get(row)
                if stored is not None and stored.supersedes(write.source):
                    outcomes[event_id] = _outcome(write, TargetOutcomeKind.ALREADY_APPLIED,
                                                  "SUPERSEDED")
                    continue
                try:
                    missing = self._write(write)
                except StatementRejected as failure:
                    outcomes[event_id] = rejected(write.event, failure.reason, failure.detail)
                    continue
                if missing:
                    outcomes[event_id] = rejected(write.event, RejectReason.ROW_MISSING,
                                                  "an update of a row this table does not have")
                    continue
                self._save_position(write, now)
                positions[row] = write.source
                applied[event_id] = write
                outcomes[event_id] = _outcome(write, TargetOutcomeKind.APPLIED)
            self._write_ledger(list(applied.values()), now)
            self._commit()
        except Exception:
            self._rollback()
            raise
        return [plan if isinstance(plan, TargetOutcome) else outcomes[plan.event.event_id]
                for plan in plans]

    def _write(self, write: OneWayWrite) -> bool:
        """Write the event's row; True when an UPDATE of part of a row found no row."""
        if write.deletes:
            self._delete(write)
        elif write.event.operation is Operation.UPDATE and not write.complete:
            return self._update(write) == 0
        else:
            self._upsert(write)
        return False

    def _in_ledger(self, writes: Sequence[OneWayWrite]) -> set[uuid.UUID]:
        by_database: dict[str, list[uuid.UUID]] = {}
        for write in writes:
            by_database.setdefault(write.database, []).append(write.event.event_id)
        found: set[uuid.UUID] = set()
        for database, event_ids in by_database.items():
            found |= self._ledger_holds(database, event_ids)
        return found

    def _stored_positions(self, writes: Sequence[OneWayWrite],
                          ) -> dict[tuple[str, str, str], SourcePosition]:
        by_table: dict[tuple[str, str], set[str]] = {}
        for write in writes:
            by_table.setdefault((write.database, write.table), set()).add(write.digest)
        positions: dict[tuple[str, str, str], SourcePosition] = {}
        for (database, table), digests in by_table.items():
            for digest, position in self._positions(database, table, sorted(digests)).items():
                positions[(database, table, digest)] = position
        return positions

    def _write_ledger(self, writes: Sequence[OneWayWrite], now: dt.datetime) -> None:
        by_database: dict[str, list[OneWayWrite]] = {}
        for write in writes:
            by_database.setdefault(write.database, []).append(write)
        for database, group in by_database.items():
            try:
                self._insert_ledger(database, group, now)
            except DuplicatePrimaryKey:
                raise _LedgerRace from None  # rolled back by the caller, then run again

    # -- the rest of TargetApplier ------------------------------------------------------------

    def current_row(
        self, database: str, table: str, primary_key: Mapping[str, Value],
    ) -> tuple[Mapping[str, Value] | None, Revision | None]:
        """One-way tables keep no revisions: nothing is ever compared with them."""
        return None, None


def _outcome(write: OneWayWrite, kind: TargetOutcomeKind, reason: str = "") -> TargetOutcome:
    return TargetOutcome(write.event.event_id, kind, reason)
