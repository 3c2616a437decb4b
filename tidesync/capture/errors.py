"""Why built-in capture stopped: a stable reason code and a message without business values.

Capture stops rather than guesses; each reason names what an operator has to fix.
"""

from __future__ import annotations

import enum

from tidesync.domain.errors import ErrorCode, TidesyncError


class CaptureErrorReason(enum.StrEnum):
    CONFIGURATION = "CONFIGURATION"
    SOURCE_UNAVAILABLE = "SOURCE_UNAVAILABLE"
    SOURCE_UNSUITABLE = "SOURCE_UNSUITABLE"
    NO_PRIMARY_KEY = "NO_PRIMARY_KEY"
    UNMAPPABLE_COLUMN = "UNMAPPABLE_COLUMN"
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
    POSITION_MISMATCH = "POSITION_MISMATCH"
    PUBLISH_FAILED = "PUBLISH_FAILED"


class CaptureError(TidesyncError):
    """Capture cannot go on; nothing past the last saved position counts as published."""

    code = ErrorCode.CAPTURE_FAILED

    def __init__(self, reason: CaptureErrorReason, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message
