"""The root of tidesync's errors.

Every error tidesync raises on purpose derives from `TidesyncError`, so an entrypoint can tell
"tidesync refused or could not do this, for a reason it names" from a bug. Errors that mean a
store, service, peer or server cannot be reached now (the same call may work later) derive from
`Unavailable`. `code` is a stable, upper-case reason code from `ErrorCode`: a family on each
class, narrowed by some errors for the one case they report.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """Every code a `TidesyncError` carries. Families first, then the specific reasons."""

    # Families.
    TIDESYNC_ERROR = "TIDESYNC_ERROR"
    UNAVAILABLE = "UNAVAILABLE"
    INVALID_INPUT = "INVALID_INPUT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    REFUSED = "REFUSED"
    CHANGED_MEANWHILE = "CHANGED_MEANWHILE"
    CONFIG_INVALID = "CONFIG_INVALID"
    MIGRATION_FAILED = "MIGRATION_FAILED"
    WIRE_INVALID = "WIRE_INVALID"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    MASTER_KEY = "MASTER_KEY"
    TARGET_ERROR = "TARGET_ERROR"
    TARGET_TRANSIENT = "TARGET_TRANSIENT"
    COMMIT_OUTCOME_UNKNOWN = "COMMIT_OUTCOME_UNKNOWN"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    CAPTURE_FAILED = "CAPTURE_FAILED"
    STATE_IN_USE = "STATE_IN_USE"
    STATE_STORE = "STATE_STORE"
    LINK_DOWN = "LINK_DOWN"
    SHORE_REFUSED = "SHORE_REFUSED"
    INTERNAL = "INTERNAL"
    # Conflict commands.
    CASE_CHANGED = "CASE_CHANGED"
    REVISION_UNAVAILABLE = "REVISION_UNAVAILABLE"
    INVALID_VALUE = "INVALID_VALUE"
    UNSTORABLE_TEXT = "UNSTORABLE_TEXT"
    NOT_DECIDABLE = "NOT_DECIDABLE"
    NOT_CANCELLABLE = "NOT_CANCELLABLE"
    NOT_AUTO_DECIDABLE = "NOT_AUTO_DECIDABLE"
    LEASE_HELD = "LEASE_HELD"
    # Apply leases.
    APPLY_LEASE_LOST = "APPLY_LEASE_LOST"
    NOT_DISPATCHABLE = "NOT_DISPATCHABLE"
    NOT_REDISPATCHABLE = "NOT_REDISPATCHABLE"
    REASON_REQUIRED = "REASON_REQUIRED"
    EVIDENCE_STALE = "EVIDENCE_STALE"
    REPLACEMENT_REQUIRED = "REPLACEMENT_REQUIRED"
    REPLACEMENT_UNEXPECTED = "REPLACEMENT_UNEXPECTED"
    REPLACEMENT_COLUMNS = "REPLACEMENT_COLUMNS"
    REPLACEMENT_TYPE = "REPLACEMENT_TYPE"
    SHIP_ROW_INCOMPLETE = "SHIP_ROW_INCOMPLETE"
    NOT_REFRESHABLE = "NOT_REFRESHABLE"
    NOT_RETARGETABLE = "NOT_RETARGETABLE"
    # The read side: history, views, rebuilds.
    BAD_REQUEST = "BAD_REQUEST"
    NOT_YET_EXISTING = "NOT_YET_EXISTING"
    NO_SUCH_VERSION = "NO_SUCH_VERSION"
    UNKNOWN_KIND = "UNKNOWN_KIND"
    UNKNOWN_APPLICATION = "UNKNOWN_APPLICATION"
    UNKNOWN_VIEW = "UNKNOWN_VIEW"
    REBUILD_RUNNING = "REBUILD_RUNNING"
    SWITCH_TIMEOUT = "SWITCH_TIMEOUT"
    # Console users.
    LAST_ADMIN = "LAST_ADMIN"
    # Operator holds and dispositions.
    NOT_HELD = "NOT_HELD"
    NOT_RELEASABLE = "NOT_RELEASABLE"
    NOT_ORIGIN_UNPROVEN = "NOT_ORIGIN_UNPROVEN"
    WAITS_BEHIND = "WAITS_BEHIND"
    NOT_BLOCKED = "NOT_BLOCKED"
    TWO_WAY_RULE = "TWO_WAY_RULE"
    USE_CONFIRM_ORIGIN = "USE_CONFIRM_ORIGIN"
    # Sync rules.
    RULE_FILTER_INVALID = "RULE_FILTER_INVALID"
    RULE_INVALID = "RULE_INVALID"
    RULE_TRANSFORM_INVALID = "RULE_TRANSFORM_INVALID"
    # Rule releases.
    RELEASE_STATE = "RELEASE_STATE"
    FOUR_EYES = "FOUR_EYES"
    ROLLOUT_IN_PROGRESS = "ROLLOUT_IN_PROGRESS"
    RELEASE_OUTDATED = "RELEASE_OUTDATED"
    NOTHING_TO_ROLL_BACK = "NOTHING_TO_ROLL_BACK"


class TidesyncError(Exception):
    """An error tidesync raises on purpose; `code` names the reason for machines."""

    code: ErrorCode = ErrorCode.TIDESYNC_ERROR


class Unavailable(TidesyncError):
    """Something tidesync needs cannot be reached now; the same call may succeed later."""

    code: ErrorCode = ErrorCode.UNAVAILABLE
