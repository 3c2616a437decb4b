"""Auditor replay (§17.3): the events of any aggregate with who, why and when; its state as of
any version or time, replayed from its stream; and what changed between two versions.

States are shown with the kind's renderers, so fields that may hold business data (row images,
record keys, secrets) appear as digests. `state_digest` equals the audit view's digests.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from eventsourcing.application import AggregateNotFoundError, Application

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import AggregateKind, Catalogue
from tidesync.projections.states import aggregate_fields, event_type, state_digest


class HistoryError(TidesyncError, LookupError):
    """What cannot be replayed as asked; `code` is stable: UNKNOWN_KIND, NOT_FOUND,
    NO_SUCH_VERSION, NOT_YET_EXISTING, BAD_REQUEST."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


@dataclass(frozen=True)
class HistoryEvent:
    version: int
    event_type: str
    actor: str | None
    reason: str | None
    trace_id: str | None
    occurred_at: dt.datetime

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "occurred_at": self.occurred_at.isoformat()}


@dataclass(frozen=True)
class AggregateState:
    """An aggregate as of one version: its rendered state and the digest of its full state."""

    kind: str
    aggregate_id: uuid.UUID
    version: int
    modified_on: dt.datetime
    digest: str
    state: dict[str, object]

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "aggregate_id": str(self.aggregate_id),
                "version": self.version, "modified_on": self.modified_on.isoformat(),
                "digest": self.digest, "state": self.state}


@dataclass(frozen=True)
class FieldChange:
    """One difference between two versions: `path` is `field`, `field.key` or `field[i]`."""

    path: str
    change: str
    """added, removed or changed"""
    before: object = None
    after: object = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _catalogue(catalogue: Catalogue | None) -> Catalogue:
    if catalogue is not None:
        return catalogue
    return default_catalogue()


def _resolve(apps: Mapping[str, Application[Any]], kind: str, aggregate_id: uuid.UUID | str,
             catalogue: Catalogue | None) -> tuple[AggregateKind, Application[Any], uuid.UUID]:
    catalogue = _catalogue(catalogue)
    try:
        spec = catalogue.kind(kind)
    except LookupError as error:
        raise HistoryError("UNKNOWN_KIND", str(error)) from None
    try:
        parsed = aggregate_id if isinstance(aggregate_id, uuid.UUID) else uuid.UUID(aggregate_id)
    except ValueError:
        raise HistoryError("BAD_REQUEST", "an aggregate id is a UUID") from None
    return spec, apps[spec.application], parsed


def aggregate_events(apps: Mapping[str, Application[Any]], kind: str,
                     aggregate_id: uuid.UUID | str,
                     catalogue: Catalogue | None = None) -> list[HistoryEvent]:
    """Every event of the aggregate, oldest first, with version, type, actor, reason, time."""
    _, app, parsed = _resolve(apps, kind, aggregate_id, catalogue)
    events = [_history_event(event) for event in app.events.get(parsed)]
    if not events:
        raise HistoryError("NOT_FOUND", f"no {kind} {parsed}")
    return events


def aggregate_at(apps: Mapping[str, Application[Any]], kind: str,
                 aggregate_id: uuid.UUID | str, *, version: int | None = None,
                 at: dt.datetime | None = None, catalogue: Catalogue | None = None) -> Any:
    """The aggregate object as of `version` or time `at` (default: now), with every value.
    For trusted callers (tests, tools); show people `state_at`."""
    _, app, parsed = _resolve(apps, kind, aggregate_id, catalogue)
    if version is not None and at is not None:
        raise HistoryError("BAD_REQUEST", "give a version or a time, not both")
    if at is not None:
        version = _version_at(apps, kind, parsed, at, catalogue)
    if version is not None and version < 1:
        raise HistoryError("NO_SUCH_VERSION", "versions start at 1")
    try:
        aggregate: Any = app.repository.get(parsed, version=version)
    except AggregateNotFoundError:
        raise HistoryError("NOT_FOUND", f"no {kind} {parsed}") from None
    if version is not None and aggregate.version != version:
        raise HistoryError("NO_SUCH_VERSION",
                           f"{kind} {parsed} has versions 1..{aggregate.version}")
    return aggregate


def _history_event(event: Any) -> HistoryEvent:
    return HistoryEvent(event.originator_version, event_type(event),
                        _text(getattr(event, "actor", None)), _text(getattr(event, "reason", None)),
                        _text(getattr(event, "trace_id", None)), event.timestamp)


def _version_at(apps: Mapping[str, Application[Any]], kind: str, aggregate_id: uuid.UUID,
                at: dt.datetime, catalogue: Catalogue | None) -> int:
    if at.tzinfo is None:
        raise HistoryError("BAD_REQUEST", "a time needs its UTC offset")
    versions = [event.version for event in aggregate_events(apps, kind, aggregate_id, catalogue)
                if event.occurred_at <= at]
    if not versions:
        raise HistoryError("NOT_YET_EXISTING", f"{kind} {aggregate_id} did not exist yet")
    return versions[-1]


def rendered_state(kind: AggregateKind, aggregate: Any) -> dict[str, object]:
    """The aggregate's fields as the kind lets them be shown."""
    return {name: kind.render(name, value) for name, value in aggregate_fields(aggregate).items()}


def state_at(apps: Mapping[str, Application[Any]], kind: str, aggregate_id: uuid.UUID | str,
             *, version: int | None = None, at: dt.datetime | None = None,
             catalogue: Catalogue | None = None) -> AggregateState:
    """The aggregate as of `version` or time `at` (default: its latest version), rendered."""
    catalogue = _catalogue(catalogue)
    aggregate = aggregate_at(apps, kind, aggregate_id, version=version, at=at,
                             catalogue=catalogue)
    return AggregateState(kind, aggregate.id, aggregate.version, aggregate.modified_on,
                          state_digest(aggregate), rendered_state(catalogue.kind(kind), aggregate))


def diff_versions(apps: Mapping[str, Application[Any]], kind: str,
                  aggregate_id: uuid.UUID | str, from_version: int, to_version: int,
                  catalogue: Catalogue | None = None) -> list[FieldChange]:
    """Field by field (into dicts and lists) what changed from one version to another, on
    the rendered states (so sensitive values compare as digests)."""
    catalogue = _catalogue(catalogue)
    before = state_at(apps, kind, aggregate_id, version=from_version, catalogue=catalogue)
    after = state_at(apps, kind, aggregate_id, version=to_version, catalogue=catalogue)
    changes: list[FieldChange] = []
    _diff("", before.state, after.state, changes)
    return changes


def _diff(path: str, before: object, after: object, out: list[FieldChange]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(key for key in after if key not in before)]:
            child = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(FieldChange(child, "removed", before[key], None))
            elif key not in before:
                out.append(FieldChange(child, "added", None, after[key]))
            else:
                _diff(child, before[key], after[key], out)
    elif isinstance(before, list) and isinstance(after, list):
        for index in range(max(len(before), len(after))):
            child = f"{path}[{index}]"
            if index >= len(after):
                out.append(FieldChange(child, "removed", before[index], None))
            elif index >= len(before):
                out.append(FieldChange(child, "added", None, after[index]))
            else:
                _diff(child, before[index], after[index], out)
    elif before != after:
        out.append(FieldChange(path, "changed", before, after))


def _text(value: object) -> str | None:
    return None if value is None else str(value)
