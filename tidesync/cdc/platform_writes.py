"""Loop suppression's one question (§12): was this captured change written by the platform?

A remote apply keeps the event's id in `_sync_event_id`; a remote delete first marks the row
with that id and `tombstone_revision(id)` ("mark then delete"). So an INSERT/UPDATE whose after
image has `_sync_event_id` = X, or a DELETE whose before image has `_sync_event_id` = X and
`_sync_revision` = tombstone_revision(X), is the platform's write with id X. A local delete of
a row last written remotely keeps the old X but not the tombstone revision: a local change.
Whether X is proven (the side's record of applied ids holds it) is each side's to check.
"""

from __future__ import annotations

import uuid

from tidesync.domain.change_event import ChangeEvent, Operation, Revision, tombstone_revision
from tidesync.domain.sync_columns import EVENT_ID_COLUMN, REVISION_COLUMN
from tidesync.domain.values import Value


class Unreadable:
    """A `_sync_event_id` that is not a UUID: the write can never be proven."""


UNREADABLE = Unreadable()


def platform_event_id(event: ChangeEvent) -> uuid.UUID | Unreadable | None:
    """X when the change is the platform's write with id X; None for a local change."""
    if event.operation is Operation.DELETE:
        before = event.before or {}
        event_id = _uuid(before.get(EVENT_ID_COLUMN))
        if not isinstance(event_id, uuid.UUID):
            return event_id
        revision = _revision(before.get(REVISION_COLUMN))
        return event_id if revision == tombstone_revision(event_id) else None
    return _uuid((event.after or {}).get(EVENT_ID_COLUMN))


def _uuid(raw: Value) -> uuid.UUID | Unreadable | None:
    if raw is None:
        return None
    try:
        if isinstance(raw, bytes) and len(raw) == 16:
            return uuid.UUID(bytes=raw)
        return uuid.UUID(raw.decode("ascii") if isinstance(raw, bytes) else str(raw))
    except (ValueError, UnicodeDecodeError):
        return UNREADABLE


def _revision(raw: Value) -> Revision | None:
    try:
        return Revision.parse(raw) if isinstance(raw, str | bytes) else None
    except ValueError:
        return None
