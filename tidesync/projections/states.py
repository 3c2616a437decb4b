"""Aggregate states as plain data: canonical JSON, digests, and states replayed event by event.

The audit view and the auditor's history use the same digest, so a digest in the audit view can
be checked by replaying the stream.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import uuid
from collections import OrderedDict
from decimal import Decimal
from typing import Any

from eventsourcing.domain import DomainEventProtocol


def plain(value: object) -> object:
    """The value as JSON-ready data: stable for equal states, whatever the Python types."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes_hex": bytes(value).hex()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(item) for item in value), key=canonical_json)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name))
                for field in dataclasses.fields(value)}
    if hasattr(value, "__dict__"):
        return {key: plain(item) for key, item in vars(value).items()
                if not key.startswith("_")}
    return repr(value)


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=repr)


def digest(value: object) -> str:
    """sha256 hex of the value's canonical JSON (the value itself never leaves)."""
    return hashlib.sha256(canonical_json(plain(value)).encode()).hexdigest()


def aggregate_fields(aggregate: Any) -> dict[str, object]:
    """An aggregate's state: identity, version, times and its public attributes."""
    fields: dict[str, object] = {
        "id": str(aggregate.id), "version": aggregate.version,
        "created_on": plain(aggregate.created_on), "modified_on": plain(aggregate.modified_on),
    }
    for name, value in vars(aggregate).items():
        if not name.startswith("_"):
            fields[name] = plain(value)
    return fields


def state_digest(aggregate: Any) -> str:
    """sha256 of the aggregate's state (aggregate_fields), as the audit view records it."""
    return hashlib.sha256(canonical_json(aggregate_fields(aggregate)).encode()).hexdigest()


def event_type(event: object) -> str:
    """`Aggregate.Event` as people read it."""
    return type(event).__qualname__


def aggregate_topic(event: object) -> str:
    """`module:Aggregate` of an aggregate's event class (nested in the aggregate class)."""
    cls = type(event)
    return f"{cls.__module__}:{cls.__qualname__.rpartition('.')[0]}"


class StreamStates:
    """States of aggregates event by event: kept in memory between events and read from the
    stream (up to the version before) only where a run starts in the middle of one."""

    def __init__(self, repository: Any, capacity: int = 512) -> None:
        self.repository = repository
        self.capacity = capacity
        self._states: OrderedDict[object, Any] = OrderedDict()

    def before(self, event: DomainEventProtocol[Any]) -> Any | None:
        """The aggregate just before `event` (None before its first event). The object is
        the one `advance` mutates next: read what you need from it first."""
        version = event.originator_version
        known = self._states.get(event.originator_id)
        if known is not None and known.version == version - 1:
            return known
        if version <= 1:
            return None
        return self.repository.get(event.originator_id, version=version - 1)

    def advance(self, event: DomainEventProtocol[Any]) -> Any:
        """The aggregate just after `event`."""
        aggregate = event.mutate(self.before(event))  # type: ignore[attr-defined]
        self._states[event.originator_id] = aggregate
        self._states.move_to_end(event.originator_id)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)
        return aggregate
