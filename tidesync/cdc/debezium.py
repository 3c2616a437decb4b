"""Debezium MySQL records → standard change events (§6.1, §7.3), or a named reason not to.

Every Kafka record yields exactly one outcome (Normalized, Skip or Block); no input raises.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tidesync.cdc.column_types import ColumnTypeSource
from tidesync.cdc.debezium_fields import (
    captured_at_of,
    check_source,
    check_unicode,
    key_from_image,
    required_text,
    revision_in_image,
    same_value,
    snapshot_marker,
    source_details,
    table_name,
    transaction_of,
)
from tidesync.cdc.debezium_schemas import (
    EnvelopeSchema,
    RowPlan,
    SchemaCache,
    StructSchema,
    types_plan,
)
from tidesync.cdc.debezium_values import DecimalHandling
from tidesync.cdc.outcomes import (
    Block,
    Blocked,
    BlockReason,
    Normalized,
    Outcome,
    Skip,
    SkipReason,
)
from tidesync.cdc.strict_json import utf8_text
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    captured_event,
    event_id_of,
    tombstone_revision,
)
from tidesync.domain.slots import slot_builder
from tidesync.domain.values import Value, canonical_text

REVISION_COLUMN = "_sync_revision"
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"
FOREIGN_KEY_CHECKS_HEADER = "__tidesync.foreign_key_checks"
"""Set to "0" by the built-in capture on a change the source made with foreign key checks off
(the binlog rows event's NO_FOREIGN_KEY_CHECKS flag); the event's source details then say
`fk_checks = false`. Debezium does not report the flag."""
ROUTER_KEY_FIELD = "__dbz__physicalTableIdentifier"
"""The key field Debezium's ByLogicalTableRouter adds when several tables share a topic: not a
column of the table, so it is dropped from the record key."""


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record as read from the queue: coordinates, raw key and value, headers."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class NormalizerSettings:
    """What the normalizer needs to know beyond the record itself.

    `decimal_handling` matters only for payload-only records: left None, both the base64
    (precise) and the text (string) forms are accepted where they cannot be confused, and a
    digits-only text in a scale-0 column, which could be either, blocks.
    """

    origin_node_id: str
    source_connector_id: str
    replay_epoch: int = 0
    bidirectional_tables: frozenset[tuple[str, str]] = frozenset()
    column_types: ColumnTypeSource | None = None
    decimal_handling: DecimalHandling | None = None
    revision_column: str = REVISION_COLUMN

    def __post_init__(self) -> None:
        if not self.origin_node_id:
            raise ValueError("origin_node_id is required")
        if not self.source_connector_id:
            raise ValueError("source_connector_id is required")
        if self.replay_epoch < 0:
            raise ValueError("replay_epoch must be >= 0")


# --- records --------------------------------------------------------------------------------

_OPERATIONS = {"c": Operation.INSERT, "u": Operation.UPDATE, "d": Operation.DELETE,
               "r": Operation.SNAPSHOT}
_CONNECT_OFFSET_FIELDS = frozenset({"file", "pos"})
_QUOTED_NAME = re.compile(r'"((?:[^"]|"")*)"')
_RECORD_KEY = slot_builder(RecordKey, ["database", "table", "primary_key", "schema"])


class DebeziumNormalizer:
    """Turns Debezium MySQL Kafka records into change events, skips or blocks.

    Decoders are built once per distinct schema text (records with schemas) or per
    column-types mapping (payload-only records) and reused, so the per-record cost is one
    parse of the payload plus one decoder call per column. One instance per consumer thread.
    """

    def __init__(self, settings: NormalizerSettings) -> None:
        self.settings = settings
        self._value_schemas: SchemaCache[EnvelopeSchema] = SchemaCache(EnvelopeSchema)
        self._key_schemas: SchemaCache[StructSchema] = SchemaCache(
            functools.partial(StructSchema, described="the key schema"))
        self._table_plans: dict[tuple[str, str], tuple[Mapping[str, str], RowPlan]] = {}

    def normalize(self, record: KafkaRecord, *, key_columns: Sequence[str] | None = None
                  ) -> Outcome:
        """The one outcome of `record`.

        `key_columns` names primary key columns to read from the row image, only for records
        that carry no Kafka key (e.g. a value file inspected on its own).
        """
        try:
            return self._normalize(record, key_columns)
        except Blocked as blocked:
            return Block(blocked.reason, blocked.detail)

    def _normalize(self, record: KafkaRecord, key_columns: Sequence[str] | None) -> Outcome:
        if record.partition < 0 or record.offset < 0:
            raise Blocked(BlockReason.INVALID_COORDINATES,
                          "record partition and offset must be >= 0")
        if not record.value:
            return Skip(SkipReason.TOMBSTONE, "null value: the tombstone after a delete")
        value = record.value
        schema, payload, clean = self._value_schemas.load_bytes(value, "value")
        if payload is None:
            return Skip(SkipReason.TOMBSTONE, "null payload: the tombstone after a delete")
        if type(payload) is not dict:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, "value payload is not a JSON object")
        if "op" not in payload:
            return _not_a_row_change(record, payload, schema)
        event = self._row_change(record, schema, payload, key_columns)
        # A payload the fast parser read holds no lone surrogate (and one in the key fails
        # its event id): only a payload the strict parser read, or headers, can need it.
        if (not clean or record.headers) and (b"\\ud" in value or b"\\uD" in value):
            check_unicode(event)
        return Normalized(event)

    def _row_change(self, record: KafkaRecord, schema: EnvelopeSchema | None,
                    payload: dict[str, Any], key_columns: Sequence[str] | None) -> ChangeEvent:
        op = payload["op"]
        if type(op) is not str:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, "op is not a string")
        if schema is not None and schema.problem is not None:
            raise schema.problem
        source = payload.get("source")
        if type(source) is not dict:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, "the source block is missing")
        check_source(source)
        if op == "t":
            raise Blocked(BlockReason.TRUNCATE_NOT_SYNCED,
                          f"TRUNCATE of {table_name(source)}: a table-wide delete cannot be "
                          "synced as row events; reconcile the table")
        operation = _OPERATIONS.get(op)
        if operation is None:
            raise Blocked(BlockReason.UNKNOWN_OPERATION, f"unknown op {op[:20]!r}")
        database, table = required_text(source, "db"), required_text(source, "table")
        snapshot = snapshot_marker(source.get("snapshot"))
        if operation is Operation.INSERT and snapshot not in (None, "false"):
            operation = Operation.SNAPSHOT  # legacy v1 and ReadToInsertEvent: snapshot as c
        before, after = self._images(schema, payload, operation, database, table)
        key = self._record_key(record, schema, database, table, before, after, key_columns)
        settings = self.settings
        try:
            # The coordinates were checked above (the node and epoch by the settings).
            event_id = event_id_of(settings.origin_node_id, settings.replay_epoch, record.topic,
                                   record.partition, record.offset, key, operation)
        except UnicodeEncodeError:
            raise Blocked(BlockReason.UNSUPPORTED_TYPE,
                          "the key holds a lone surrogate, which is not valid Unicode") from None
        base_revision, result_revision = self._revisions(
            database, table, operation, before, after, event_id)
        transaction_id, transaction_order, table_order = transaction_of(payload.get("transaction"))
        details = source_details(source, snapshot, record.timestamp_ms, table_order)
        if record.headers:
            details.update(self._key_change(record, operation, schema, database, table))
            if (FOREIGN_KEY_CHECKS_HEADER, b"0") in record.headers:
                details["fk_checks"] = False
        # What the constructor would check holds: `_images` matched the images to the
        # operation, the capture time is UTC, and the images and details are new dicts of this
        # record, frozen without a copy.
        return captured_event(
            event_id, settings.origin_node_id, settings.source_connector_id, record.topic,
            record.partition, record.offset, key, operation, captured_at_of(payload, source),
            None if before is None else MappingProxyType(before),
            None if after is None else MappingProxyType(after),
            base_revision, result_revision, transaction_id, transaction_order,
            settings.replay_epoch, MappingProxyType(details),
        )

    def _images(self, schema: EnvelopeSchema | None, payload: dict[str, Any],
                operation: Operation, database: str, table: str
                ) -> tuple[dict[str, Value] | None, dict[str, Value] | None]:
        raw_before, raw_after = payload.get("before"), payload.get("after")
        if operation in (Operation.UPDATE, Operation.DELETE) and raw_before is None:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE,
                          f"{operation} needs a before image (binlog_row_image=FULL)")
        if operation in (Operation.INSERT, Operation.SNAPSHOT) and raw_before is not None:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE,
                          f"{operation} must not carry a before image")
        if (raw_after is None) != (operation is Operation.DELETE):
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, f"{operation} must not carry an "
                          "after image" if raw_after is not None else
                          f"{operation} needs an after image")
        types = self._column_types(database, table)
        before = None if raw_before is None else self._image_plan(
            schema, "before", database, table, types).decode(raw_before, "before")
        after = None if raw_after is None else self._image_plan(
            schema, "after", database, table, types).decode(raw_after, "after")
        return before, after

    def _image_plan(self, schema: EnvelopeSchema | None, image: str, database: str, table: str,
                    types: Mapping[str, str] | None) -> RowPlan:
        return (schema.plan(image, types) if schema is not None
                else self._payload_plan(database, table, types))

    def _column_types(self, database: str, table: str) -> Mapping[str, str] | None:
        source = self.settings.column_types
        return None if source is None else source.column_types(database, table)

    def _payload_plan(self, database: str, table: str, types: Mapping[str, str] | None
                      ) -> RowPlan:
        if types is None:
            raise Blocked(BlockReason.TYPE_INFO_MISSING,
                          f"payload-only record and no column types known for "
                          f"{database}.{table}")
        cached = self._table_plans.get((database, table))
        if cached is not None and cached[0] is types:
            return cached[1]
        plan = types_plan(types, self.settings.decimal_handling,
                          f"the column types of {database}.{table}")
        self._table_plans[(database, table)] = (types, plan)
        return plan

    def _key_plan(self, key_schema: StructSchema | None, value_schema: EnvelopeSchema | None,
                  database: str, table: str, image: str) -> tuple[RowPlan, BlockReason | None]:
        """A key with a schema decodes by it; a payload-only key by the row's own columns."""
        types = self._column_types(database, table)
        if key_schema is not None:
            return key_schema.plan(types), None
        if value_schema is not None:
            return value_schema.plan(image, types), BlockReason.TYPE_INFO_MISSING
        return self._payload_plan(database, table, types), None

    def _record_key(self, record: KafkaRecord, schema: EnvelopeSchema | None, database: str,
                    table: str, before: dict[str, Value] | None, after: dict[str, Value] | None,
                    key_columns: Sequence[str] | None) -> RecordKey:
        if not record.key:
            if key_columns:
                image = after if after is not None else before
                return key_from_image(database, table, image or {}, key_columns)
            raise Blocked(BlockReason.MISSING_PRIMARY_KEY, "the record has no key")
        key_schema, payload, _ = self._key_schemas.load_bytes(record.key, "key")
        columns = self._decode_key(payload, key_schema, schema, database, table,
                                   "after" if after is not None else "before")
        for image_name, image in (("before", before), ("after", after)):
            if image is None:
                continue
            for column, value in columns.items():
                if column in image and not same_value(image[column], value):
                    raise Blocked(BlockReason.KEY_MISMATCH,
                                  f"key column {column!r} differs from the {image_name} image")
        # `_decode_key` made sure of what RecordKey checks: some columns, each named once.
        return _RECORD_KEY(database, table, tuple(columns.items()), None)

    def _decode_key(self, payload: Any, key_schema: StructSchema | None,
                    schema: EnvelopeSchema | None, database: str, table: str, image: str
                    ) -> dict[str, Value]:
        if payload is None:
            raise Blocked(BlockReason.MISSING_PRIMARY_KEY, "the key is null")
        if type(payload) is not dict:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, "the key is not a JSON object")
        if ROUTER_KEY_FIELD in payload:
            payload = {name: value for name, value in payload.items() if name != ROUTER_KEY_FIELD}
        if not payload:
            raise Blocked(BlockReason.MISSING_PRIMARY_KEY, "the key has no columns")
        plan, unknown_reason = self._key_plan(key_schema, schema, database, table, image)
        columns = plan.decode(payload, "key", unknown_reason)
        if None in columns.values():  # no Value equals None but None itself
            column = next(column for column, value in columns.items() if value is None)
            raise Blocked(BlockReason.MISSING_PRIMARY_KEY, f"key column {column!r} is null")
        return columns

    def _revisions(self, database: str, table: str, operation: Operation,
                   before: Mapping[str, Value] | None, after: Mapping[str, Value] | None,
                   event_id: uuid.UUID) -> tuple[Revision | None, Revision | None]:
        if (database, table) not in self.settings.bidirectional_tables:
            return None, None
        column = self.settings.revision_column
        base = None if before is None else revision_in_image(before, "before", column)
        if operation is Operation.DELETE:
            return base, tombstone_revision(event_id)
        return base, revision_in_image(after, "after", column)

    def _key_change(self, record: KafkaRecord, operation: Operation,
                    schema: EnvelopeSchema | None, database: str, table: str
                    ) -> dict[str, Value]:
        """A primary key update arrives as a d carrying the new key and a c carrying the old."""
        for header, raw in record.headers:
            if header not in (NEW_KEY_HEADER, OLD_KEY_HEADER):
                continue
            expected = Operation.DELETE if header == NEW_KEY_HEADER else Operation.INSERT
            if operation is not expected:
                raise Blocked(BlockReason.MALFORMED_ENVELOPE,
                              f"header {header} on a {operation} event")
            change: dict[str, Value] = {"primary_key_change": (
                "DELETE_OF_OLD_KEY" if expected is Operation.DELETE else "INSERT_OF_NEW_KEY")}
            change.update(self._paired_key(raw, header, schema, database, table))
            return change
        return {}

    def _paired_key(self, raw: bytes | None, header: str, schema: EnvelopeSchema | None,
                    database: str, table: str) -> dict[str, Value]:
        """The other key of the pair as RecordKey.key_text(), or the header text if opaque."""
        if raw is None:
            return {"paired_key": None}
        text = utf8_text(raw, f"header {header}")
        try:
            key_schema, payload = self._key_schemas.load(text, "header")
            columns = self._decode_key(payload, key_schema, schema, database, table, "after")
        except Blocked:
            # The default SimpleHeaderConverter writes text such as "Struct{id=1005}".
            return {"paired_key_text": text}
        return {"paired_key": canonical_text(columns.items())}


# --- records that are not row changes -------------------------------------------------------


def _not_a_row_change(record: KafkaRecord, payload: dict[str, Any],
                      schema: EnvelopeSchema | None) -> Skip:
    if (record.topic.startswith(HEARTBEAT_TOPIC_PREFIX) or payload.keys() == {"ts_ms"}
            or (schema is not None and schema.name == "io.debezium.connector.common.Heartbeat")):
        return Skip(SkipReason.HEARTBEAT, "connector heartbeat")
    status = payload.get("status")
    if status in ("BEGIN", "END") and "id" in payload:
        return Skip(SkipReason.TRANSACTION_BOUNDARY, _transaction_detail(status, payload))
    if "ddl" in payload or "tableChanges" in payload:
        tables = _changed_tables(payload)
        named = ", ".join(f"{database}.{table}" for database, table in tables)
        database = payload.get("databaseName")
        return Skip(SkipReason.SCHEMA_CHANGE,
                    f"schema change of {named}; refresh their column types" if tables else
                    f"schema change in database {str(database)[:64]!r} naming no table",
                    tables)
    if payload.keys() >= _CONNECT_OFFSET_FIELDS and "source" not in payload:
        raise Blocked(BlockReason.NOT_A_CHANGE_EVENT,
                      "a Kafka Connect source offset record, not a change event: the "
                      "connect-offsets topic must not be consumed")
    raise Blocked(BlockReason.MALFORMED_ENVELOPE, "no op field: not a Debezium change event")


def _transaction_detail(status: str, payload: Mapping[str, Any]) -> str:
    transaction_id = payload.get("id")
    detail = f"transaction {status}"
    if isinstance(transaction_id, str):
        detail += f" {transaction_id[:100]}"
    count = payload.get("event_count")
    if status == "END" and type(count) is int:
        detail += f" ({count} events)"
    return detail


def _changed_tables(payload: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(database, table) pairs from tableChanges ids such as "inventory"."customers"."""
    tables: list[tuple[str, str]] = []
    changes = payload.get("tableChanges")
    for change in changes if isinstance(changes, list) else ():
        identifier = change.get("id") if isinstance(change, dict) else None
        if not isinstance(identifier, str):
            continue
        names = [name.replace('""', '"') for name in _QUOTED_NAME.findall(identifier)]
        if not names:
            names = identifier.replace(",", ".").split(".")
        tables.extend(zip(names[0::2], names[1::2], strict=False))
    if not tables:
        source = payload.get("source")
        database = payload.get("databaseName")
        table = source.get("table") if isinstance(source, dict) else None
        if isinstance(database, str) and database and isinstance(table, str) and table:
            tables.append((database, table))
    return tuple(dict.fromkeys(tables))


def source_of(value: bytes | None) -> tuple[str | None, str | None, str | None]:
    """(source.name, source.db, source.table) of a record value, where readable; else None."""
    try:
        document = json.loads(value or b"null")
    except (ValueError, RecursionError):
        return None, None, None
    if isinstance(document, dict) and "payload" in document and "schema" in document:
        document = document["payload"]
    source = document.get("source") if isinstance(document, dict) else None
    if not isinstance(source, dict):
        return None, None, None
    found = (source.get("name"), source.get("db"), source.get("table"))
    name, database, table = (item if isinstance(item, str) and item else None for item in found)
    return name, database, table
