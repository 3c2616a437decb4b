"""The compare-and-set apply loop the target appliers share: plan each event, write, judge, commit.

Backends supply the statements; this module decides every outcome and keeps one commit per chunk.
"""

from __future__ import annotations

import abc
import datetime as dt
import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Protocol, runtime_checkable

from tidesync.domain.change_event import ChangeEvent, Operation, Revision, tombstone_revision
from tidesync.domain.clock import Clock
from tidesync.domain.errors import TidesyncError
from tidesync.domain.replay import original_event_id
from tidesync.domain.sync_columns import METADATA_COLUMNS, ORIGIN_COLUMN
from tidesync.domain.value_checks import event_problem
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.target.contract import (
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
    TargetOutcomeKind,
    TransientTargetError,
    trigger_modified_outcome,
)
from tidesync.target.table_state import TableShape
from tidesync.target.trigger_checks import changed_columns

log = logging.getLogger(__name__)

NOT_ENABLED_RECHECK = dt.timedelta(seconds=60)
"""How long a table found missing or not enabled stays refused before it is inspected again."""

_METADATA = frozenset(METADATA_COLUMNS)
_PLAIN_VALUE_TYPES = (bool, int, str, bytes, Decimal, dt.date, dt.time, JsonText, BitString)



class StatementRejected(TidesyncError):
    """A statement failed for a reason that retrying the same event cannot fix."""

    def __init__(self, reason: RejectReason, detail: str, position: int = 0) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.position = position  # which statement of a batch failed


class ForeignKeyViolation(StatementRejected):
    """A statement broke a foreign key: the parent row is missing (MySQL 1452/1216, SQLite's
    FOREIGN KEY constraint failed) or a child row still refers to the row (1451/1217)."""

    def __init__(self, detail: str, position: int = 0) -> None:
        super().__init__(RejectReason.CONSTRAINT_VIOLATION, detail, position)


FK_WAITING = "FK_WAITING"
"""The reason code of a chunk waiting for a foreign key to resolve (see ForeignKeyPending)."""


class ForeignKeyPending(TransientTargetError):
    """An event broke a foreign key while the applier waits for foreign keys: the chunk was
    rolled back (nothing of it committed). The parent may simply not be applied yet (another
    partition, a later event), so the caller retries later, and gives the event up as
    REJECTED CONSTRAINT_VIOLATION only after its own deadline."""

    def __init__(self, event_id: uuid.UUID, detail: str, table: str = "") -> None:
        super().__init__(FK_WAITING, detail)
        self.event_id = event_id
        self.detail = detail
        self.table = table
        """The target table (database.table) of the event's statement."""


@runtime_checkable
class WaitsForForeignKeys(Protocol):
    """An applier that can answer a broken foreign key with ForeignKeyPending."""

    def wait_for_foreign_keys(self, enabled: bool = True) -> None: ...


def foreign_key_checks(event: ChangeEvent) -> bool:
    """Whether the source ran the change with foreign key checks on (the default); the built-in
    capture says `fk_checks = false` for a binlog rows event with NO_FOREIGN_KEY_CHECKS."""
    return event.source_details.get("fk_checks") is not False


class DuplicatePrimaryKey(TidesyncError):
    """An INSERT met an existing row with the same primary key (the row, or a ledger entry)."""


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """One event turned into the values of its compare-and-set statement.

    `columns`/`values` are the business columns written (all of the after image for an insert,
    the changed ones for an update); `key` holds the primary key in the table's key order.
    """

    event: ChangeEvent
    shape: TableShape
    key: tuple[Value, ...]
    columns: tuple[str, ...]
    values: tuple[Value, ...]
    overwrite_base: Revision | None = None
    """Set when a SNAPSHOT overwrites a row last written from the event's origin: the write
    is then a compare-and-set UPDATE of every column against this revision."""

    @property
    def operation(self) -> Operation:
        return Operation.UPDATE if self.overwrite_base is not None else self.event.operation

    @property
    def base_revision(self) -> Revision | None:
        """The revision the compare-and-set statement expects the row to hold."""
        return self.overwrite_base if self.overwrite_base is not None else (
            self.event.base_revision)


class _Retry(TidesyncError):
    """The transaction was rolled back after settling one more event: run the chunk again."""


def rejected(event: ChangeEvent, reason: RejectReason, detail: str) -> TargetOutcome:
    return TargetOutcome(event.event_id, TargetOutcomeKind.REJECTED, reason.value, detail)


def reject_template(reason: RejectReason, detail: str) -> TargetOutcome:
    """A REJECTED outcome not yet tied to an event (per table; copied onto each event)."""
    return TargetOutcome(uuid.UUID(int=0), TargetOutcomeKind.REJECTED, reason.value, detail)


def plan_write(event: ChangeEvent, shape: TableShape) -> PlannedWrite | TargetOutcome:
    """The statement values for an event, or its REJECTED outcome when it cannot be written."""
    key = _key_values(event, shape)
    if isinstance(key, TargetOutcome):
        return key
    operation = event.operation
    if operation is not Operation.DELETE and event.result_revision is None:
        return rejected(event, RejectReason.MISSING_RESULT_REVISION,
                        f"{operation} carries no result revision")
    if operation in (Operation.UPDATE, Operation.DELETE) and event.base_revision is None:
        return rejected(event, RejectReason.MISSING_BASE_REVISION,
                        f"{operation} carries no base revision")
    if operation is Operation.DELETE:
        return PlannedWrite(event, shape, key, (), ())
    assert event.after is not None
    if operation is Operation.UPDATE:
        names = [name for name in event.changed_columns() if name not in _METADATA]
    else:
        names = [name for name in event.after if name not in _METADATA]
    if shape.generated:
        # The database computes generated columns; a ship's image carries them as it read them.
        names = [name for name in names if not shape.is_generated(name)]
    return _with_columns(event, shape, key, names)


def key_in_table_order(shape: TableShape, primary_key: Mapping[str, Value]) -> tuple[Value, ...]:
    """The key's values in the table's key order; ValueError when the columns differ."""
    given = {shape.column_named(name): value for name, value in primary_key.items()}
    if set(given) != set(shape.primary_key):
        raise ValueError(f"the key columns do not match the primary key of {shape.table}")
    return tuple(given[name] for name in shape.primary_key)


def _key_values(event: ChangeEvent, shape: TableShape) -> tuple[Value, ...] | TargetOutcome:
    pairs = event.record.primary_key
    if tuple(name for name, _ in pairs) == shape.primary_key:
        key = tuple(value for _, value in pairs)  # the usual case: same names, same order
    else:
        try:
            key = key_in_table_order(shape, event.primary_key)
        except ValueError as mismatch:
            return rejected(event, RejectReason.PRIMARY_KEY_MISMATCH, str(mismatch))
    problem = _value_problem(key)
    return rejected(event, *problem) if problem else key


def _with_columns(event: ChangeEvent, shape: TableShape, key: tuple[Value, ...],
                  names: list[str]) -> PlannedWrite | TargetOutcome:
    assert event.after is not None
    columns = names
    if not all(name in shape.columns for name in names):
        columns = []
        for name in names:
            column = shape.column_named(name)
            if column is None:
                return rejected(event, RejectReason.UNKNOWN_COLUMN,
                                f"column {name} does not exist in {shape.table}")
            columns.append(column)
    values = tuple(event.after[name] for name in names)
    key_position = {column: index for index, column in enumerate(columns)
                    if column in shape.key_columns}
    for column, index in key_position.items():
        if event.operation is Operation.UPDATE or values[index] != key[
                shape.primary_key.index(column)]:
            return rejected(event, RejectReason.PRIMARY_KEY_CHANGED,
                            f"the change moves the row to another primary key ({column})")
    problem = _value_problem(values)
    if problem:
        return rejected(event, *problem)
    if event.operation is not Operation.UPDATE:
        # An insert must write the key even when the after image left it out.
        missing = [c for c in shape.primary_key if c not in key_position]
        columns += missing
        values += tuple(key[shape.primary_key.index(c)] for c in missing)
    return PlannedWrite(event, shape, key, tuple(columns), values)


def _value_problem(values: Sequence[Value]) -> tuple[RejectReason, str] | None:
    for value in values:
        if isinstance(value, dt.datetime):
            if value.tzinfo is None or value.utcoffset() is None:
                return RejectReason.INVALID_VALUE, "a datetime value has no time zone"
            continue
        if value is None or isinstance(value, _PLAIN_VALUE_TYPES):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return RejectReason.INVALID_VALUE, "a float value is NaN or infinite"
            continue
        return RejectReason.UNSUPPORTED_TYPE, f"value of type {type(value).__name__}"
    return None


def delete_mark(write: PlannedWrite) -> Revision:
    """The revision a remote DELETE stamps on the row just before deleting it.

    A remote DELETE is a compare-and-set UPDATE that sets `_sync_revision` to
    tombstone_revision(event id), `_sync_origin` and `_sync_event_id`, then a DELETE of that
    marked row, in one transaction: so the binlog's DELETE carries a before image that proves
    the platform wrote it (§12 loop suppression), which a plain DELETE could not.
    """
    return tombstone_revision(write.event.event_id)


def parse_revision(raw: object) -> Revision | None:
    """A stored `_sync_revision` as a Revision; None when absent or not a revision."""
    if not isinstance(raw, str | bytes):
        return None
    try:
        return Revision.parse(raw)
    except ValueError:
        return None


class CompareAndSetApplier(abc.ABC):
    """Apply a chunk in one transaction, in event order, one compare-and-set statement each.

    Statements go to the backend in batches of up to `pipeline_depth` events on distinct rows;
    the events of a batch that touched no row are judged (ledger, evidence) after it.

    When statement i fails permanently the transaction is rolled back and the chunk runs again
    with event i settled as REJECTED, so the other events still land in one commit. Events that
    cannot be planned (unknown table, missing base revision, …) are settled before any write.
    """

    def __init__(self, node_id: str, route: Route, clock: Clock) -> None:
        self.node_id = node_id
        self._route = route
        self._clock = clock
        self._shapes: dict[tuple[str, str], TableShape | tuple[TargetOutcome, dt.datetime]] = {}
        self.pipeline_depth = 1
        self._foreign_key_wait = False

    def wait_for_foreign_keys(self, enabled: bool = True) -> None:
        """Whether an event that breaks a foreign key ends the chunk with ForeignKeyPending
        (nothing committed; the caller retries) instead of its REJECTED outcome."""
        self._foreign_key_wait = enabled

    # -- what a backend provides --------------------------------------------------------------

    @abc.abstractmethod
    def _inspect(self, database: str, table: str) -> TableShape | TargetOutcome:
        """The shape of an enabled target table, or the REJECTED outcome template."""

    @abc.abstractmethod
    def _begin(self) -> None: ...

    @abc.abstractmethod
    def _insert(self, write: PlannedWrite, now: dt.datetime) -> None:
        """INSERT the row with the event's metadata; DuplicatePrimaryKey when it exists."""

    @abc.abstractmethod
    def _update(self, write: PlannedWrite, now: dt.datetime) -> int:
        """The compare-and-set UPDATE; returns the rows matched (0 or 1)."""

    @abc.abstractmethod
    def _delete(self, write: PlannedWrite) -> int:
        """The remote DELETE as "mark then delete" (see `delete_mark`); returns the rows the
        compare-and-set mark matched (0 or 1)."""

    @abc.abstractmethod
    def _read_row(self, shape: TableShape,
                  key: tuple[Value, ...]) -> tuple[Mapping[str, Value] | None, Revision | None]:
        ...

    @abc.abstractmethod
    def _ledger_holds(self, database: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        ...

    @abc.abstractmethod
    def _insert_ledger(self, database: str, writes: Sequence[PlannedWrite],
                       now: dt.datetime) -> None:
        """One multi-row ledger INSERT; DuplicatePrimaryKey when an event id is already there."""

    @abc.abstractmethod
    def _commit(self) -> None: ...

    @abc.abstractmethod
    def _rollback(self) -> None:
        """Roll back the open transaction (best effort: a dead connection is simply dropped)."""

    # -- the shared loop ----------------------------------------------------------------------

    def forget_tables(self) -> None:
        """Inspect every table again on next use (after `tidesync target enable` or DDL)."""
        self._shapes.clear()

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        if not events:
            return []
        plans = [self._plan(event) for event in events]
        settled = {index: plan for index, plan in enumerate(plans)
                   if isinstance(plan, TargetOutcome)}
        writes = [plan if isinstance(plan, PlannedWrite) else None for plan in plans]
        while True:
            try:
                return self._attempt(events, writes, settled)
            except _Retry:
                continue

    def _plan(self, event: ChangeEvent) -> PlannedWrite | TargetOutcome:
        # Check this event may be applied here at all before looking at its values.
        if event.origin_node_id == self.node_id:
            return rejected(event, RejectReason.ORIGIN_IS_TARGET,
                            "an event that originated on this node is never applied back to it")
        problem = event_problem(event)
        if problem:
            return rejected(event, RejectReason(problem[0].value), problem[1])
        shape = self._shape(*self._route(event.database, event.table))
        if isinstance(shape, TargetOutcome):
            return TargetOutcome(event.event_id, shape.kind, shape.reason_code, shape.detail)
        return plan_write(event, shape)

    def _shape(self, database: str, table: str) -> TableShape | TargetOutcome:
        cached = self._shapes.get((database, table))
        if isinstance(cached, TableShape):
            return cached
        if cached is not None and self._clock() - cached[1] < NOT_ENABLED_RECHECK:
            return cached[0]
        found = self._inspect(database, table)
        self._shapes[(database, table)] = (
            found if isinstance(found, TableShape) else (found, self._clock()))
        return found

    def _attempt(self, events: Sequence[ChangeEvent], writes: Sequence[PlannedWrite | None],
                 settled: dict[int, TargetOutcome]) -> list[TargetOutcome]:
        now = self._clock()
        outcomes: dict[int, TargetOutcome] = {}
        applied: dict[uuid.UUID, PlannedWrite] = {}
        self._begin()
        try:
            batch: list[tuple[int, PlannedWrite]] = []
            rows: set[tuple[str, str, tuple[Value, ...]]] = set()
            for index, write in enumerate(writes):
                if write is None or index in settled:
                    outcomes[index] = settled[index]
                    continue
                # A batch never holds one row twice: each event must see its predecessors.
                row = (write.shape.database, write.shape.table, write.key)
                if row in rows or len(batch) >= self.pipeline_depth:
                    self._flush(batch, now, applied, settled, outcomes)
                    batch, rows = [], set()
                batch.append((index, write))
                rows.add(row)
            self._flush(batch, now, applied, settled, outcomes)
            self._write_ledger(events, applied, now, settled)
            self._commit()
        except Exception:
            # Whatever went wrong, nothing of this attempt may stay open on the connection.
            self._rollback()
            raise
        return [outcomes[index] for index in range(len(events))]

    def _flush(self, batch: Sequence[tuple[int, PlannedWrite]], now: dt.datetime,
               applied: dict[uuid.UUID, PlannedWrite], settled: dict[int, TargetOutcome],
               outcomes: dict[int, TargetOutcome]) -> None:
        """Write a batch of events on distinct rows, then judge those that touched no row."""
        todo: list[tuple[int, PlannedWrite]] = []
        for index, write in batch:
            if write.event.event_id in applied:
                outcomes[index] = self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED,
                                                "APPLIED_IN_CHUNK")
            elif self._replay_applied(write):
                outcomes[index] = self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED,
                                                "REPLAY_IN_LEDGER")
            else:
                todo.append((index, write))
        try:
            touched = self._write_many([write for _, write in todo], now)
        except StatementRejected as failure:
            index, write = todo[failure.position]
            if isinstance(failure, ForeignKeyViolation) and self._foreign_key_wait:
                raise ForeignKeyPending(write.event.event_id, failure.detail,
                                        f"{write.shape.database}.{write.shape.table}"
                                        ) from failure
            if failure.reason in (RejectReason.UNKNOWN_TABLE, RejectReason.UNKNOWN_COLUMN):
                self._shapes.pop((write.shape.database, write.shape.table), None)
            settled[index] = rejected(write.event, failure.reason, failure.detail)
            raise _Retry from failure
        for (index, write), hit in zip(todo, touched, strict=True):
            if not hit and write.operation is Operation.SNAPSHOT:
                hit = self._overwrite_snapshot(index, write, now, settled)
            if hit:
                applied[write.event.event_id] = write
                outcomes[index] = self._applied(write)
            else:
                outcomes[index] = self._judge(write)

    def _overwrite_snapshot(self, index: int, write: PlannedWrite, now: dt.datetime,
                            settled: dict[int, TargetOutcome]) -> bool:
        """A SNAPSHOT row whose key exists: upsert-if-not-newer (docs/onboarding.md).

        The row is overwritten only when it holds another revision, was last written from the
        snapshot's origin (not edited here or by another node since), and the event is not in
        the ledger (a snapshot row sent again after newer changes must not undo them). The
        UPDATE is a compare-and-set on the revision just read, so a concurrent write wins.
        """
        event = write.event
        if self._ledger_holds(write.shape.database, [event.event_id]):
            return False
        row, revision = self._read_row(write.shape, write.key)
        if (row is None or revision is None or revision == event.result_revision
                or row.get(ORIGIN_COLUMN) != event.origin_node_id):
            return False
        try:
            return self._update(replace(write, overwrite_base=revision), now) == 1
        except StatementRejected as failure:
            settled[index] = rejected(event, failure.reason, failure.detail)
            raise _Retry from failure

    def _write_many(self, writes: Sequence[PlannedWrite], now: dt.datetime) -> list[bool]:
        """Each write's compare-and-set statement in order; True where it touched its row.

        A StatementRejected carries the `position` of the failing write. Backends with a
        network round trip per statement override this to send several at once.
        """
        touched = []
        for position, write in enumerate(writes):
            try:
                touched.append(self._write(write, now))
            except StatementRejected as failure:
                failure.position = position
                raise
        return touched

    def _write(self, write: PlannedWrite, now: dt.datetime) -> bool:
        """Run the compare-and-set statement; False when it touched no row."""
        if write.operation is Operation.UPDATE:
            return self._update(write, now) == 1
        if write.operation is Operation.DELETE:
            return self._delete(write) == 1
        try:
            self._insert(write, now)
        except DuplicatePrimaryKey:
            return False
        return True

    def _applied(self, write: PlannedWrite) -> TargetOutcome:
        """APPLIED; for a table whose business triggers may change the row as it is written,
        the row is read back (same transaction) and the columns they changed are named."""
        operation = write.operation
        if (Operation.INSERT if operation is Operation.SNAPSHOT else operation
                ) not in write.shape.trigger_rewrites:
            return self._outcome(write, TargetOutcomeKind.APPLIED)
        row, _ = self._read_row(write.shape, write.key)
        changed = changed_columns(write.columns, write.values, row)
        if not changed:
            return self._outcome(write, TargetOutcomeKind.APPLIED)
        log.warning("a business trigger of %s.%s changed column(s) %s as event %s was applied",
                    write.shape.database, write.shape.table, ", ".join(changed),
                    write.event.event_id)
        return trigger_modified_outcome(write.event.event_id, changed)

    def _replay_applied(self, write: PlannedWrite) -> bool:
        """A replayed event whose original was applied here (see `tidesync.domain.replay`)."""
        original = original_event_id(write.event)
        return original is not None and bool(self._ledger_holds(write.shape.database,
                                                                [original]))

    def _judge(self, write: PlannedWrite) -> TargetOutcome:
        """The statement changed nothing: the same event applied earlier, or a conflict."""
        event = write.event
        database = write.shape.database
        if write.operation is not Operation.SNAPSHOT and self._ledger_holds(
                database, [event.event_id]):
            return self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED, "IN_LEDGER")
        row, revision = self._read_row(write.shape, write.key)
        if (write.operation in (Operation.INSERT, Operation.UPDATE) and revision is not None
                and revision == event.result_revision):
            # The row already holds this very version: a conflict decision chose it.
            return self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED, "SAME_REVISION")
        if write.operation is Operation.SNAPSHOT:
            if revision is not None and revision == event.result_revision:
                return self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED, "SAME_REVISION")
            if self._ledger_holds(database, [event.event_id]):
                return self._outcome(write, TargetOutcomeKind.ALREADY_APPLIED, "IN_LEDGER")
        if row is None:
            reason, detail = "ROW_MISSING", "the target row does not exist"
        elif write.operation in (Operation.INSERT, Operation.SNAPSHOT):
            reason, detail = "ROW_EXISTS", "a row with this primary key already exists"
        else:
            reason, detail = "REVISION_MISMATCH", "the target revision differs from the base"
        return TargetOutcome(event.event_id, TargetOutcomeKind.CONFLICT, reason, detail,
                             current_row=row, current_revision=revision)

    @staticmethod
    def _outcome(write: PlannedWrite, kind: TargetOutcomeKind, reason: str = "") -> TargetOutcome:
        return TargetOutcome(write.event.event_id, kind, reason)

    def _write_ledger(self, events: Sequence[ChangeEvent],
                      applied: Mapping[uuid.UUID, PlannedWrite], now: dt.datetime,
                      settled: dict[int, TargetOutcome]) -> None:
        by_database: dict[str, list[PlannedWrite]] = {}
        for write in applied.values():
            by_database.setdefault(write.shape.database, []).append(write)
        for database, writes in by_database.items():
            try:
                self._insert_ledger(database, writes, now)
            except DuplicatePrimaryKey:
                # A replayed event whose statement still matched (e.g. an INSERT after the row
                # was deleted): it was applied before, so it must not be applied again.
                self._rollback()
                self._settle_ledgered(events, database, writes, settled)
                raise _Retry from None

    def _settle_ledgered(self, events: Sequence[ChangeEvent], database: str,
                         writes: Sequence[PlannedWrite], settled: dict[int, TargetOutcome]) -> None:
        known = self._ledger_holds(database, [write.event.event_id for write in writes])
        if not known:
            raise TargetError("LEDGER_DUPLICATE", "the ledger refused event ids it does not hold")
        for index, event in enumerate(events):
            if event.event_id in known and index not in settled:
                settled[index] = TargetOutcome(event.event_id,
                                               TargetOutcomeKind.ALREADY_APPLIED, "IN_LEDGER")
