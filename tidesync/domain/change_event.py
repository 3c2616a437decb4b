"""The standard change event of §6.1, its record key and revision tokens, and stable ids (§7.4).

Pure value objects: constructing one validates it; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from tidesync.domain.slots import slot_builder, slot_copier
from tidesync.domain.values import (
    Row,
    Value,
    canonical_text,
    canonical_value,
    frozen_row,
    require_utc,
)

SCHEMA_VERSION = "1.0"
"""Platform event protocol version (major.minor). Receivers refuse an unknown major."""

EVENT_ID_NAMESPACE = uuid.UUID("5d0f6a1e-8c3b-5b7e-9a41-7e2c1d9b6f30")
TOMBSTONE_NAMESPACE = uuid.UUID("9b2d4c6e-1f3a-5d8b-8e7c-2a4f6b8d0c12")


class Operation(enum.StrEnum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    SNAPSHOT = "SNAPSHOT"



def table_rule(database: str, table: str) -> str:
    """The rule id of a table; without a rule runtime each table is its own rule."""
    return f"table:{database}.{table}"

@dataclass(frozen=True, slots=True)
class Revision:
    """A row revision token (`_sync_revision`): always 16 bytes on the wire and in the model.

    Databases store it as CHAR(36) (UUID text) or BINARY(16); both map here.
    """

    value: bytes

    def __post_init__(self) -> None:
        if len(self.value) != 16:
            raise ValueError(f"a revision is 16 bytes, got {len(self.value)}")

    @classmethod
    def parse(cls, raw: str | bytes) -> Revision:
        """From a column value: 36-char UUID text, 32 hex digits, or 16 raw bytes."""
        if isinstance(raw, bytes):
            return cls(raw)
        return cls(uuid.UUID(raw).bytes)

    @property
    def text(self) -> str:
        """The UUID text form (`str(uuid.UUID(bytes=value))`, written without the UUID)."""
        h = self.value.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class RecordKey:
    """Where a business record lives: database, schema (None on MySQL), table and primary key.

    The primary key keeps the source's column order; that order is part of its identity.
    """

    database: str
    table: str
    primary_key: tuple[tuple[str, Value], ...]
    schema: str | None = None

    def __post_init__(self) -> None:
        if not self.primary_key:
            raise ValueError("a record key needs at least one primary key column")
        if len(self.primary_key) > 1 and len({name for name, _ in self.primary_key}) != len(
                self.primary_key):
            raise ValueError("duplicate primary key column")

    @classmethod
    def of(
        cls, database: str, table: str,
        primary_key: Mapping[str, Value] | Iterable[tuple[str, Value]], schema: str | None = None,
    ) -> RecordKey:
        items = primary_key.items() if isinstance(primary_key, Mapping) else primary_key
        return cls(database, table, tuple(items), schema)

    def key_text(self) -> str:
        """Canonical text of the primary key alone (typed, column order kept)."""
        return canonical_text(self.primary_key)

    def canonical(self) -> str:
        """Canonical text of the whole key: stable across processes and versions."""
        return _table_text(self.database, self.schema, self.table) + self.key_text()

    def as_dict(self) -> dict[str, Value]:
        return dict(self.primary_key)


@functools.lru_cache(maxsize=4096)
def _table_text(database: str, schema: str | None, table: str) -> str:
    """The table part of `RecordKey.canonical()`, the same for every row of a table."""
    return canonical_text([("database", database), ("schema", schema), ("table", table)])


@dataclass(frozen=True, slots=True)
class SourceCoordinates:
    """Where a captured record sits in the queue, plus the replay epoch (§7.4)."""

    origin_node_id: str
    replay_epoch: int
    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        if not self.origin_node_id:
            raise ValueError("origin_node_id is required")
        if self.replay_epoch < 0 or self.partition < 0 or self.offset < 0:
            raise ValueError("replay_epoch, partition and offset must be >= 0")


def event_id_for(source: SourceCoordinates, key: RecordKey, operation: Operation) -> uuid.UUID:
    """event_id = UUIDv5(origin + replay_epoch + topic + partition + offset + db + table + pk + op).

    Each part is length-prefixed so that no two different coordinate tuples share a name.
    """
    return event_id_of(source.origin_node_id, source.replay_epoch, source.topic,
                       source.partition, source.offset, key, operation)


def event_id_of(origin_node_id: str, replay_epoch: int, topic: str, partition: int, offset: int,
                key: RecordKey, operation: Operation) -> uuid.UUID:
    """`event_id_for` of coordinates already checked as `SourceCoordinates` checks them."""
    position, key_text = str(offset), key.key_text()
    # The parts shared by a partition's records and by a table's rows are written once.
    name = (f"{_stream_parts(origin_node_id, replay_epoch, topic, partition)}"
            f"{len(position)}:{position};{_table_parts(key.database, key.schema, key.table)}"
            f"{len(key_text)}:{key_text};{_OPERATION_PARTS[operation]}")
    return uuid5(_EVENT_ID_NAMESPACE_BYTES, name)


def _parts(*parts: str) -> str:
    """The length-prefixed parts of an event id's name."""
    return "".join(f"{len(part)}:{part};" for part in parts)


@functools.lru_cache(maxsize=1024)
def _stream_parts(origin_node_id: str, replay_epoch: int, topic: str, partition: int) -> str:
    return _parts(origin_node_id, str(replay_epoch), topic, str(partition))


@functools.lru_cache(maxsize=4096)
def _table_parts(database: str, schema: str | None, table: str) -> str:
    return _parts(database, schema or "", table)


_EVENT_ID_NAMESPACE_BYTES = EVENT_ID_NAMESPACE.bytes
_TOMBSTONE_NAMESPACE_BYTES = TOMBSTONE_NAMESPACE.bytes
_OPERATION_PARTS = {operation: _parts(operation.value) for operation in Operation}
_UUID5_BITS = 0x8000 << 48 | 5 << 76  # RFC 4122 variant, version 5
_UUID5_CLEARED = ~(0xC000 << 48 | 0xF000 << 64)


def uuid5(namespace: bytes, name: str) -> uuid.UUID:
    """`uuid.uuid5` of the namespace with these bytes: the same UUID, built from its integer
    (UUID(bytes=…, version=…) costs more than the hash; this runs twice for every event)."""
    digest = hashlib.sha1(namespace + name.encode("utf-8"), usedforsecurity=False).digest()
    # What UUID(int=…) makes, without its argument checks (16 bytes always fit): a third of
    # the cost.
    made = _new_object(uuid.UUID)
    _SET_UUID_INT(made, int.from_bytes(digest[:16], "big") & _UUID5_CLEARED | _UUID5_BITS)
    _SET_UUID_SAFE(made, _UUID_SAFE_UNKNOWN)
    return made


def uuid_of_bytes(data: bytes) -> uuid.UUID:
    """`uuid.UUID(bytes=data)`, built as `uuid5` builds its UUID (an id read back from a state
    store, made for every event a receipt names); raises ValueError unless 16 bytes."""
    if len(data) != 16:
        return uuid.UUID(bytes=data)
    made = _new_object(uuid.UUID)
    _SET_UUID_INT(made, int.from_bytes(data, "big"))
    _SET_UUID_SAFE(made, _UUID_SAFE_UNKNOWN)
    return made


_new_object = object.__new__
_SET_UUID_INT = vars(uuid.UUID)["int"].__set__
_SET_UUID_SAFE = vars(uuid.UUID)["is_safe"].__set__
_UUID_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def tombstone_revision(event_id: uuid.UUID) -> Revision:
    """The deterministic result revision of a DELETE (§5.1): derived from its event id."""
    return Revision(uuid5(_TOMBSTONE_NAMESPACE_BYTES, str(event_id)).bytes)


def _check_major(schema_version: str) -> None:
    major, _, minor = schema_version.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"schema_version must be major.minor, got {schema_version!r}")


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One normalized row change (§6.1), the unit that crosses the link and is applied.

    `source_sequence` is the contiguous number assigned per source partition after
    normalization (None until the ship's state store assigns it); `rule_id`/`rule_version`
    are set by the rule runtime. `business_occurred_at` is None unless a rule names the
    business-time column. Rows hold only columns the source captured.
    """

    event_id: uuid.UUID
    origin_node_id: str
    source_connector_id: str
    source_topic: str
    source_partition: int
    source_position: int
    record: RecordKey
    operation: Operation
    captured_at: dt.datetime
    before: Row | None = None
    after: Row | None = None
    base_revision: Revision | None = None
    result_revision: Revision | None = None
    source_sequence: int | None = None
    transaction_id: str | None = None
    transaction_order: int | None = None
    rule_id: str | None = None
    rule_version: int | None = None
    business_occurred_at: dt.datetime | None = None
    trace_id: str = ""
    replay_epoch: int = 0
    schema_version: str = SCHEMA_VERSION
    source_details: Mapping[str, Value] = field(default_factory=lambda: frozen_row({}))

    def __post_init__(self) -> None:
        _check_major(self.schema_version)
        # Check each operation carries the images it needs.
        if self.operation in (Operation.INSERT, Operation.SNAPSHOT) and self.after is None:
            raise ValueError(f"{self.operation} needs an after image")
        if self.operation is Operation.UPDATE and (self.after is None or self.before is None):
            raise ValueError("UPDATE needs before and after images")
        if self.operation is Operation.DELETE and (self.before is None or self.after is not None):
            raise ValueError("DELETE needs a before image and no after image")
        # Each field is replaced only when normalizing changes it: decoded events arrive in
        # UTC with frozen images, and this runs for every event applied.
        for name in ("captured_at", "business_occurred_at"):
            moment = getattr(self, name)
            if moment is not None and moment is not (utc := require_utc(moment)):
                object.__setattr__(self, name, utc)
        for name in ("before", "after", "source_details"):
            image = getattr(self, name)
            if image is not None and image is not (frozen := frozen_row(image)):
                object.__setattr__(self, name, frozen)

    def with_source_sequence(self, source_sequence: int | None) -> ChangeEvent:
        """This event with its source sequence set: the same as `dataclasses.replace`, without
        checking again what the constructor checked (the state store does this per event)."""
        if source_sequence == self.source_sequence:
            return self
        return _WITH_SOURCE_SEQUENCE(self, source_sequence)

    @property
    def database(self) -> str:
        return self.record.database

    @property
    def schema(self) -> str | None:
        return self.record.schema

    @property
    def table(self) -> str:
        return self.record.table

    @property
    def primary_key(self) -> dict[str, Value]:
        return self.record.as_dict()

    @property
    def coordinates(self) -> SourceCoordinates:
        return SourceCoordinates(
            self.origin_node_id, self.replay_epoch, self.source_topic, self.source_partition,
            self.source_position,
        )

    def expected_event_id(self) -> uuid.UUID:
        """The id §7.4 gives this event's coordinates; equal to `event_id` when untampered."""
        # The checks of `coordinates`, without building it: this runs for every event sent.
        if not self.origin_node_id:
            raise ValueError("origin_node_id is required")
        if self.replay_epoch < 0 or self.source_partition < 0 or self.source_position < 0:
            raise ValueError("replay_epoch, partition and offset must be >= 0")
        return event_id_of(self.origin_node_id, self.replay_epoch, self.source_topic,
                           self.source_partition, self.source_position, self.record,
                           self.operation)

    def changed_columns(self) -> tuple[str, ...]:
        """Columns whose value differs between before and after (all after columns on insert)."""
        if self.after is None:
            return ()
        if self.before is None:
            return tuple(self.after)
        return tuple(
            name for name, value in self.after.items()
            if name not in self.before or not _same(self.before[name], value)
        )


_EVENT_FIELDS = tuple(ChangeEvent.__dataclass_fields__)
_WITH_SOURCE_SEQUENCE = slot_copier(ChangeEvent, _EVENT_FIELDS, "source_sequence")
_CAPTURED_FIELDS = (
    "event_id", "origin_node_id", "source_connector_id", "source_topic", "source_partition",
    "source_position", "record", "operation", "captured_at", "before", "after", "base_revision",
    "result_revision", "transaction_id", "transaction_order", "replay_epoch", "source_details")
_UNSET_FIELDS = (("source_sequence", None), ("rule_id", None), ("rule_version", None),
                 ("business_occurred_at", None), ("trace_id", ""),
                 ("schema_version", SCHEMA_VERSION))
_BUILD_CAPTURED = slot_builder(ChangeEvent, [*_CAPTURED_FIELDS,
                                             *(name for name, _ in _UNSET_FIELDS)])
_UNSET_VALUES = tuple(value for _, value in _UNSET_FIELDS)


def captured_event(
    event_id: uuid.UUID, origin_node_id: str, source_connector_id: str, source_topic: str,
    source_partition: int, source_position: int, record: RecordKey, operation: Operation,
    captured_at: dt.datetime, before: Row | None, after: Row | None,
    base_revision: Revision | None, result_revision: Revision | None,
    transaction_id: str | None, transaction_order: int | None, replay_epoch: int,
    source_details: Row,
) -> ChangeEvent:
    """A ChangeEvent as a capture normalizes it (no sequence, rule or trace yet), built without
    the constructor's checks: the caller has made sure of what they check — the images its
    operation needs, a UTC `captured_at`, and frozen rows (MappingProxyType) nobody else holds.
    Equal to `ChangeEvent(...)` of the same arguments; it runs for every record consumed."""
    return _BUILD_CAPTURED(
        event_id, origin_node_id, source_connector_id, source_topic, source_partition,
        source_position, record, operation, captured_at, before, after, base_revision,
        result_revision, transaction_id, transaction_order, replay_epoch, source_details,
        *_UNSET_VALUES)


def _same(a: Value, b: Value) -> bool:
    # Equal values of different types or scales (True == 1, 1.0 == 1.00) are still a change.
    if type(a) is not type(b):
        return False
    if isinstance(a, Decimal | float):
        return canonical_value(a) == canonical_value(b)
    return a == b
