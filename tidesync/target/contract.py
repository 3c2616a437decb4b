"""The target side of applying changes: what an applier promises, and what it answers per event.

Concrete appliers (`MySQLTargetApplier`, `SQLiteTargetApplier`) write compare-and-set statements.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidesync.domain.change_event import ChangeEvent, Revision
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.values import Value

LEDGER_TABLE = "_sync_applied"
"""Event ids applied to a database, written in the same transaction as the row (§10.3 step 6)."""
TRIGGER_MODIFIED = "TRIGGER_MODIFIED"
"""An APPLIED event whose row a business trigger of the target table changed as it was written
(the reason code is this marker, a colon and the columns affected)."""
_NAMED_COLUMNS = 8


class TargetOutcomeKind(enum.StrEnum):
    APPLIED = "APPLIED"
    ALREADY_APPLIED = "ALREADY_APPLIED"
    CONFLICT = "CONFLICT"
    REJECTED = "REJECTED"


class RejectReason(enum.StrEnum):
    """Why an event can never be applied as it is (retrying the same event cannot help)."""

    UNKNOWN_DATABASE = "UNKNOWN_DATABASE"
    UNKNOWN_TABLE = "UNKNOWN_TABLE"
    UNKNOWN_COLUMN = "UNKNOWN_COLUMN"
    TABLE_NOT_ENABLED = "TABLE_NOT_ENABLED"
    PRIMARY_KEY_MISMATCH = "PRIMARY_KEY_MISMATCH"
    PRIMARY_KEY_CHANGED = "PRIMARY_KEY_CHANGED"
    MISSING_BASE_REVISION = "MISSING_BASE_REVISION"
    MISSING_RESULT_REVISION = "MISSING_RESULT_REVISION"
    ORIGIN_IS_TARGET = "ORIGIN_IS_TARGET"
    UNSUPPORTED_TYPE = "UNSUPPORTED_TYPE"
    INVALID_VALUE = "INVALID_VALUE"
    DATA_TOO_LONG = "DATA_TOO_LONG"
    VALUE_OUT_OF_RANGE = "VALUE_OUT_OF_RANGE"
    MISSING_VALUE = "MISSING_VALUE"
    CONSTRAINT_VIOLATION = "CONSTRAINT_VIOLATION"
    DUPLICATE_UNIQUE_KEY = "DUPLICATE_UNIQUE_KEY"
    INVALID_NAME = "INVALID_NAME"
    DUPLICATE_COLUMN = "DUPLICATE_COLUMN"
    METADATA_COLUMN = "METADATA_COLUMN"
    GENERATED_COLUMN = "GENERATED_COLUMN"
    PACKET_TOO_LARGE = "PACKET_TOO_LARGE"
    DATABASE_REFUSED = "DATABASE_REFUSED"
    """The database refused the statement with an error no other reason names."""
    STATEMENT_NOT_BUILT = "STATEMENT_NOT_BUILT"
    """The applier could not turn the event's values into a statement."""
    ROW_MISSING = "ROW_MISSING"
    """A one-way table lacks the row an UPDATE carrying only its changed columns names
    (the table missed the row's insert: snapshot it, then replay)."""


@dataclass(frozen=True)
class TargetOutcome:
    """The answer for one event. `detail` is for people and never holds column values.

    A CONFLICT carries the target row as evidence (`current_row` is None when the row does not
    exist) and its revision. An APPLIED event whose written columns a business trigger changed
    names them in `trigger_modified` (see `trigger_modified_outcome`).
    """

    event_id: uuid.UUID
    kind: TargetOutcomeKind
    reason_code: str = ""
    detail: str = ""
    current_row: Mapping[str, Value] | None = None
    current_revision: Revision | None = None
    trigger_modified: tuple[str, ...] = ()


def trigger_modified_outcome(event_id: uuid.UUID, columns: Sequence[str]) -> TargetOutcome:
    """APPLIED (the row was written), marked with the columns a business trigger changed."""
    named = ",".join(columns[:_NAMED_COLUMNS])
    more = f",+{len(columns) - _NAMED_COLUMNS} more" if len(columns) > _NAMED_COLUMNS else ""
    return TargetOutcome(
        event_id, TargetOutcomeKind.APPLIED, f"{TRIGGER_MODIFIED}:{named}{more}",
        f"a business trigger of the target table changed column(s) {', '.join(columns)}"
        " as the row was written", trigger_modified=tuple(columns))


class TargetError(TidesyncError):
    """The chunk could not be applied and nothing of it was committed; `reason_code` is stable.

    Raised as is only for failures that are neither transient nor a lost commit (a fault of
    this program or of the database that an operator must look at).
    """

    code = ErrorCode.TARGET_ERROR

    def __init__(self, reason_code: str, message: str = "") -> None:
        super().__init__(f"{reason_code}: {message}" if message else reason_code)
        self.reason_code = reason_code
        self.message = message


class TransientTargetError(TargetError):
    """Deadlock, lock wait timeout, lost connection, server going away: retry the chunk later."""

    code = ErrorCode.TARGET_TRANSIENT


class CommitOutcomeUnknown(TargetError):
    """The connection broke during COMMIT: consult `applied_event_ids` to learn what landed."""

    code = ErrorCode.COMMIT_OUTCOME_UNKNOWN


Route = Callable[[str, str], tuple[str, str]]
"""(source database, table) → (target database, table): how a ship's names map to the target's."""


def same_names(database: str, table: str) -> tuple[str, str]:
    """The default route: the target uses the source's database and table names."""
    return database, table


class TargetApplier(Protocol):
    """Applies change events to a business database with compare-and-set writes (§10.3, §11.1)."""

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        """Apply the events in order in one transaction; one outcome per event, same order.

        Raises TransientTargetError (nothing committed) or CommitOutcomeUnknown.
        """
        ...

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of `event_ids` the target's ledger holds (committed applies)."""
        ...

    def current_row(
        self, database: str, table: str, primary_key: Mapping[str, Value],
    ) -> tuple[Mapping[str, Value] | None, Revision | None]:
        """The target row (source names, routed) and its revision; (None, None) if absent."""
        ...

    def close(self) -> None: ...
