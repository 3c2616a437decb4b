"""An operator action that changes no other aggregate (a projection rebuild): what was asked on
which target, by whom and why, then how it ended.
"""

from __future__ import annotations

import datetime as dt
import uuid

from eventsourcing.domain import Aggregate, event

from tidesync.domain.errors import ErrorCode, TidesyncError


class OperatorActionError(TidesyncError):
    """An operator action that cannot be recorded as asked (no actor or reason)."""

    code = ErrorCode.INVALID_INPUT


class OperatorAction(Aggregate):
    """One operator action: what was asked on which target, by whom and why, then how it
    ended. The id is passed in, so the caller decides what makes a request the same."""

    @staticmethod
    def create_id(action_id: uuid.UUID, **_: object) -> uuid.UUID:
        return action_id

    @event("Requested")
    def __init__(self, action_id: uuid.UUID, action: str, target: str, at: dt.datetime,
                 actor: str, reason: str, trace_id: str = "") -> None:
        self.action = action
        self.target = target
        self.requested_at = at
        self.requested_by = actor
        self.reason = reason
        self.outcome = "REQUESTED"
        self.details: dict[str, object] = {}
        self.finished_at: dt.datetime | None = None

    @classmethod
    def request(cls, action_id: uuid.UUID, action: str, target: str, at: dt.datetime,
                actor: str, reason: str, trace_id: str = "") -> OperatorAction:
        if not actor.strip():
            raise OperatorActionError("an operator action needs an actor")
        if not reason.strip():
            raise OperatorActionError("an operator action needs a reason")
        return cls(action_id=action_id, action=action, target=target, at=at, actor=actor,
                   reason=reason, trace_id=trace_id)

    @event("Completed")
    def complete(self, at: dt.datetime, details: dict[str, object], actor: str, reason: str,
                 trace_id: str = "") -> None:
        self.outcome = "COMPLETED"
        self.details = dict(details)
        self.finished_at = at

    @event("Failed")
    def fail(self, at: dt.datetime, error: str, actor: str, reason: str,
             trace_id: str = "") -> None:
        """`error` is a class of failure (an exception type or reason code), never values."""
        self.outcome = "FAILED"
        self.details = {"error": error}
        self.finished_at = at
