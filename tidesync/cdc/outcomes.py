"""What the Debezium normalizer makes of one record: Normalized, Skip or Block, with reason codes.

Inside the normalizer a record that cannot become a change event raises Blocked (BadValue for one
column); the normalizer's one public entry point turns it into a Block.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.errors import ErrorCode, TidesyncError


class SkipReason(enum.StrEnum):
    """Records that are not row changes and need no action beyond advancing past them."""

    TOMBSTONE = "TOMBSTONE"
    HEARTBEAT = "HEARTBEAT"
    TRANSACTION_BOUNDARY = "TRANSACTION_BOUNDARY"
    SCHEMA_CHANGE = "SCHEMA_CHANGE"
    RULE_FILTERED = "RULE_FILTERED"  # a change the node's sync rules do not send


class BlockReason(enum.StrEnum):
    """Why a record cannot become a change event; each code names what an operator must fix."""

    MALFORMED_JSON = "MALFORMED_JSON"
    MALFORMED_ENVELOPE = "MALFORMED_ENVELOPE"
    NOT_A_CHANGE_EVENT = "NOT_A_CHANGE_EVENT"
    UNKNOWN_OPERATION = "UNKNOWN_OPERATION"
    UNSUPPORTED_SCHEMA_VERSION = "UNSUPPORTED_SCHEMA_VERSION"
    UNSUPPORTED_CONNECTOR = "UNSUPPORTED_CONNECTOR"
    MISSING_PRIMARY_KEY = "MISSING_PRIMARY_KEY"
    KEY_MISMATCH = "KEY_MISMATCH"
    MISSING_REVISION = "MISSING_REVISION"
    INVALID_REVISION = "INVALID_REVISION"
    DECIMAL_SCALE_MISSING = "DECIMAL_SCALE_MISSING"
    IMPRECISE_DECIMAL = "IMPRECISE_DECIMAL"
    UNSUPPORTED_TYPE = "UNSUPPORTED_TYPE"
    TYPE_INFO_MISSING = "TYPE_INFO_MISSING"
    TRUNCATE_NOT_SYNCED = "TRUNCATE_NOT_SYNCED"
    CAPTURE_TIME_MISSING = "CAPTURE_TIME_MISSING"
    INVALID_COORDINATES = "INVALID_COORDINATES"
    RULE_NOT_APPLICABLE = "RULE_NOT_APPLICABLE"  # the sync rule cannot shape this change


@dataclass(frozen=True, slots=True)
class Normalized:
    event: ChangeEvent


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to sync. For SCHEMA_CHANGE, `tables` lists the (database, table) pairs changed."""

    reason: SkipReason
    detail: str
    tables: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Block:
    """The record cannot be normalized; the partition's checkpoint must not pass it."""

    reason: BlockReason
    detail: str


Outcome: TypeAlias = Normalized | Skip | Block


class Blocked(TidesyncError):
    """Raised inside the normalizer, turned into a Block at its one public entry point."""

    code = ErrorCode.INVALID_INPUT

    def __init__(self, reason: BlockReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class BadValue(Blocked):
    """One column value or column type that cannot be decoded; the row names the column."""

    code = ErrorCode.INVALID_INPUT
