"""Writes Debezium MySQL change records (JSON converter, schemas enabled) from row images.

The built-in capture uses it to put the same records on the queue as Debezium's connector.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tidesync.capture.settings import TopicRouting
from tidesync.cdc.debezium import ROUTER_KEY_FIELD
from tidesync.domain.values import BitString, JsonText, Row, Value, require_utc

DEBEZIUM_VERSION = "3.0.7.Final"
"""The connector version this writer imitates (record layout of Debezium 2.7 – 3.1)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_TYPE_PATTERN = re.compile(r"^\s*(\w+)\s*(?:\((.*)\))?\s*(.*)$", re.DOTALL)


class NoDefault(enum.Enum):
    """Marks a column without a DEFAULT clause (a default of NULL is a real default)."""

    NO_DEFAULT = "NO_DEFAULT"


NO_DEFAULT = NoDefault.NO_DEFAULT


class EnvelopeOp(enum.StrEnum):
    """The `op` codes of a Debezium envelope."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"


class SnapshotMarker(enum.StrEnum):
    """`source.snapshot` (io.debezium.data.Enum) as Debezium 2.7+ writes it."""

    TRUE = "true"
    FIRST = "first"
    FIRST_IN_DATA_COLLECTION = "first_in_data_collection"
    LAST_IN_DATA_COLLECTION = "last_in_data_collection"
    LAST = "last"
    FALSE = "false"
    INCREMENTAL = "incremental"


@dataclass(frozen=True, slots=True)
class ColumnDefinition:
    """One MySQL column as information_schema describes it.

    `data_type` is DATA_TYPE in lower case ("int", "decimal", "datetime", ...); `length` is the
    character/binary/bit length, `precision`/`scale` describe DECIMAL, `fsp` the fractional
    seconds of TIME/DATETIME/TIMESTAMP, `allowed` the members of ENUM/SET.
    """

    name: str
    data_type: str
    nullable: bool = True
    unsigned: bool = False
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    fsp: int = 0
    allowed: tuple[str, ...] = ()
    default: Value | NoDefault = NO_DEFAULT

    @classmethod
    def parse(
        cls, name: str, column_type: str, *, nullable: bool = True,
        default: Value | NoDefault = NO_DEFAULT,
    ) -> ColumnDefinition:
        """From information_schema COLUMN_TYPE text, e.g. "decimal(12,2)", "int unsigned",
        "enum('OPEN','CLOSED')", "datetime(3)", "tinyint(1)"."""
        match = _TYPE_PATTERN.match(column_type)
        if match is None:
            raise ValueError(f"unparseable column type for column {name!r}")
        data_type, arguments, suffix = match.group(1).lower(), match.group(2), match.group(3)
        parsed = _type_arguments(data_type, arguments)
        return cls(name, data_type, nullable, "unsigned" in suffix.lower(), default=default,
                   **parsed)


def _type_arguments(data_type: str, arguments: str | None) -> dict[str, Any]:
    # Split the parenthesised part of COLUMN_TYPE by what it means for this type.
    if arguments is None:
        return {"precision": 10, "scale": 0} if data_type in ("decimal", "numeric") else {}
    if data_type in ("enum", "set"):
        return {"allowed": tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'",
                                                                            arguments))}
    numbers = [int(part) for part in arguments.split(",")]
    if data_type in ("decimal", "numeric"):
        return {"precision": numbers[0], "scale": numbers[1] if len(numbers) > 1 else 0}
    if data_type in ("time", "datetime", "timestamp"):
        return {"fsp": numbers[0]}
    return {"length": numbers[0]}


@dataclass(frozen=True, slots=True)
class TableDefinition:
    """A captured table: its columns in table order and its primary key columns in key order."""

    database: str
    table: str
    columns: tuple[ColumnDefinition, ...]
    primary_key: tuple[str, ...]

    def __post_init__(self) -> None:
        names = [column.name for column in self.columns]
        if not self.primary_key or not set(self.primary_key) <= set(names):
            raise ValueError(f"primary key of {self.table!r} must name its own columns")

    def column(self, name: str) -> ColumnDefinition:
        return next(column for column in self.columns if column.name == name)


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """The `transaction` block of a change (`provide.transaction.metadata`): the source
    transaction's id, this change's place in it, and its place among the table's changes."""

    id: str
    total_order: int
    data_collection_order: int


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """The `source` block facts of one row change: binlog coordinates and database time.

    `ts_ms` is when the change was made in the database (seconds resolution for binlog
    events); snapshot reads carry the snapshot's position, server_id 0 and no thread.
    """

    server_id: int
    file: str
    pos: int
    ts_ms: int
    row: int = 0
    gtid: str | None = None
    thread: int | None = None
    query: str | None = None
    snapshot: SnapshotMarker = SnapshotMarker.FALSE
    transaction: TransactionInfo | None = None
    foreign_key_checks: bool = True
    """False when the source ran the change with foreign_key_checks = 0 (the binlog rows
    event's NO_FOREIGN_KEY_CHECKS flag): an applier does the same, as a replica would."""


@dataclass(frozen=True, slots=True)
class DebeziumRecord:
    """One Kafka record: topic, key and value documents (a tombstone has value None).

    Records of one table share their schema dicts: treat the documents as read-only.
    """

    topic: str
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    partition: int | None = None
    """The partition to produce to; None: by key."""

    def key_bytes(self) -> bytes | None:
        return None if self.key is None else _compact_json(self.key)

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else _compact_json(self.value)


@dataclass
class DebeziumEnvelopeWriter:
    """Builds key and value records the way Debezium's MySQL connector does with the JSON
    converter and `schemas.enable=true`, default settings (decimal.handling.mode=precise,
    time.precision.mode=adaptive_time_microseconds, bigint.unsigned.handling.mode=long,
    binary.handling.mode=bytes, include.query off unless a query is given), with the
    `transaction` block of `provide.transaction.metadata=true` when the source says which
    transaction a change belongs to.

    `topic_prefix` is the connector's `topic.prefix` (its logical server name). `routing`
    DATABASE writes every table of a database to one topic, as Debezium's
    `ByLogicalTableRouter` does (with its key field keeping the tables' keys apart).
    """

    topic_prefix: str
    routing: TopicRouting = TopicRouting.TABLE
    connector_version: str = DEBEZIUM_VERSION
    connector: str = "mysql"
    _schemas: dict[tuple[str, str], tuple[TableDefinition, dict[str, Any], dict[str, Any]]] = (
        field(default_factory=dict, init=False, repr=False, compare=False)
    )

    def topic(self, table: TableDefinition) -> str:
        if self.routing is TopicRouting.DATABASE:
            return f"{self.topic_prefix}.{table.database}"
        return f"{self.topic_prefix}.{table.database}.{table.table}"

    @property
    def partition(self) -> int | None:
        """The partition every record goes to (DATABASE routing: 0, so one database's
        changes keep their commit order), or None: by key, as Debezium does."""
        return 0 if self.routing is TopicRouting.DATABASE else None

    def _table_topic(self, table: TableDefinition) -> str:
        return f"{self.topic_prefix}.{table.database}.{table.table}"

    def change(
        self, table: TableDefinition, op: EnvelopeOp, *, before: Row | None, after: Row | None,
        source: SourceInfo, processed_at: dt.datetime,
    ) -> DebeziumRecord:
        """The record of one row change. `processed_at` is the connector's clock (envelope ts)."""
        _check_images(op, before, after)
        key_row = after if after is not None else before
        assert key_row is not None
        key_schema, value_schema = self._table_schemas(table)
        key = {"schema": key_schema, "payload": self._key_payload(table, key_row)}
        transaction = source.transaction
        payload = {
            "before": None if before is None else _row_payload(table, before),
            "after": None if after is None else _row_payload(table, after),
            "source": self._source_payload(table, source),
            "transaction": None if transaction is None else {
                "id": transaction.id, "total_order": transaction.total_order,
                "data_collection_order": transaction.data_collection_order},
            "op": op.value,
            **_timestamps(processed_at),
        }
        return DebeziumRecord(self.topic(table), key, {"schema": value_schema, "payload": payload},
                              self.partition)

    def tombstone(self, table: TableDefinition, before: Row) -> DebeziumRecord:
        """The record that follows a delete when `tombstones.on.delete=true`: key, null value."""
        key_schema, _ = self._table_schemas(table)
        return DebeziumRecord(
            self.topic(table), {"schema": key_schema, "payload": self._key_payload(table, before)},
            None, self.partition)

    def _key_payload(self, table: TableDefinition, row: Row) -> dict[str, Any]:
        payload = _key_payload(table, row)
        if self.routing is TopicRouting.DATABASE:
            payload[ROUTER_KEY_FIELD] = self._table_topic(table)
        return payload

    def _table_schemas(self, table: TableDefinition) -> tuple[dict[str, Any], dict[str, Any]]:
        # Schemas depend only on the table definition: rebuild them only when it changes.
        cached = self._schemas.get((table.database, table.table))
        if cached is None or (cached[0] is not table and cached[0] != table):
            cached = (table, self._key_schema(table), self._envelope_schema(table))
            self._schemas[(table.database, table.table)] = cached
        return cached[1], cached[2]

    def _key_schema(self, table: TableDefinition) -> dict[str, Any]:
        fields = [column_schema(table.column(name)) for name in table.primary_key]
        if self.routing is TopicRouting.DATABASE:
            fields.append({"type": "string", "optional": False, "field": ROUTER_KEY_FIELD})
        return {"type": "struct", "fields": fields, "optional": False,
                "name": f"{self._table_topic(table)}.Key"}

    def _envelope_schema(self, table: TableDefinition) -> dict[str, Any]:
        row_fields = [column_schema(column) for column in table.columns]
        row_name = f"{self._table_topic(table)}.Value"
        return {
            "type": "struct",
            "fields": [
                {"type": "struct", "fields": row_fields, "optional": True, "name": row_name,
                 "field": "before"},
                {"type": "struct", "fields": row_fields, "optional": True, "name": row_name,
                 "field": "after"},
                _SOURCE_SCHEMA,
                _TRANSACTION_SCHEMA,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": f"{self._table_topic(table)}.Envelope",
            "version": 2,
        }

    def _source_payload(self, table: TableDefinition, source: SourceInfo) -> dict[str, Any]:
        return {
            "version": self.connector_version,
            "connector": self.connector,
            "name": self.topic_prefix,
            "ts_ms": source.ts_ms,
            "snapshot": source.snapshot.value,
            "db": table.database,
            "sequence": None,
            "ts_us": source.ts_ms * 1000,
            "ts_ns": source.ts_ms * 1_000_000,
            "table": table.table,
            "server_id": source.server_id,
            "gtid": source.gtid,
            "file": source.file,
            "pos": source.pos,
            "row": source.row,
            "thread": source.thread,
            "query": source.query,
        }


def _check_images(op: EnvelopeOp, before: Row | None, after: Row | None) -> None:
    needs_before = op in (EnvelopeOp.UPDATE, EnvelopeOp.DELETE)
    needs_after = op is not EnvelopeOp.DELETE
    if (before is not None) != needs_before or (after is not None) != needs_after:
        raise ValueError(f"op {op.value!r} has the wrong before/after images")


def _timestamps(moment: dt.datetime) -> dict[str, int]:
    micros = _epoch_micros(moment)
    return {"ts_ms": micros // 1000, "ts_us": micros, "ts_ns": micros * 1000}


def _key_payload(table: TableDefinition, row: Row) -> dict[str, Any]:
    return {name: connect_value(table.column(name), row[name]) for name in table.primary_key}


def _row_payload(table: TableDefinition, row: Row) -> dict[str, Any]:
    return {column.name: connect_value(column, row.get(column.name)) for column in table.columns}


def _compact_json(document: dict[str, Any]) -> bytes:
    # Kafka's JsonConverter writes compact UTF-8 JSON.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": ",".join(marker.value for marker in SnapshotMarker)},
         "default": "false", "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
        {"type": "string", "optional": True, "field": "table"},
        {"type": "int64", "optional": False, "field": "server_id"},
        {"type": "string", "optional": True, "field": "gtid"},
        {"type": "string", "optional": False, "field": "file"},
        {"type": "int64", "optional": False, "field": "pos"},
        {"type": "int32", "optional": False, "field": "row"},
        {"type": "int64", "optional": True, "field": "thread"},
        {"type": "string", "optional": True, "field": "query"},
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.Source",
    "field": "source",
}

_TRANSACTION_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}

# Connect type and logical type per MySQL type, for types without parameters.
_STRING_TYPES = frozenset(
    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
)
_BINARY_TYPES = frozenset(
    {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
)
_LOGICAL: dict[str, tuple[str, str]] = {
    "json": ("string", "io.debezium.data.Json"),
    "year": ("int32", "io.debezium.time.Year"),
    "date": ("int32", "io.debezium.time.Date"),
    "time": ("int64", "io.debezium.time.MicroTime"),
    "timestamp": ("string", "io.debezium.time.ZonedTimestamp"),
}


def column_schema(column: ColumnDefinition) -> dict[str, Any]:
    """The Kafka Connect field schema Debezium writes for a column (key order as emitted)."""
    connect_type, name, parameters = _connect_type(column)
    schema: dict[str, Any] = {"type": connect_type, "optional": column.nullable}
    if name is not None:
        schema.update(name=name, version=1)
    if parameters:
        schema["parameters"] = parameters
    if column.default is not NO_DEFAULT:
        schema["default"] = connect_value(column, column.default)
    schema["field"] = column.name
    return schema


def _connect_type(column: ColumnDefinition) -> tuple[str, str | None, dict[str, str]]:
    kind = column.data_type
    if kind in _STRING_TYPES:
        return "string", None, {}
    if kind in _BINARY_TYPES:
        return "bytes", None, {}
    if kind in _LOGICAL:
        connect_type, name = _LOGICAL[kind]
        return connect_type, name, {}
    if kind in ("enum", "set"):
        name = "io.debezium.data.Enum" if kind == "enum" else "io.debezium.data.EnumSet"
        return "string", name, {"allowed": ",".join(column.allowed)}
    if kind in ("decimal", "numeric"):
        return "bytes", "org.apache.kafka.connect.data.Decimal", {
            "scale": str(column.scale or 0), "connect.decimal.precision": str(column.precision)}
    if kind == "datetime":
        precision = "Timestamp" if column.fsp <= 3 else "MicroTimestamp"
        return "int64", f"io.debezium.time.{precision}", {}
    if kind == "bit":
        if (column.length or 1) == 1:
            return "boolean", None, {}
        return "bytes", "io.debezium.data.Bits", {"length": str(column.length)}
    return _numeric_type(column), None, {}


def _numeric_type(column: ColumnDefinition) -> str:
    kind = column.data_type
    if kind in ("bool", "boolean"):
        return "boolean"
    if kind == "tinyint" or (kind == "smallint" and not column.unsigned):
        return "int16"
    if kind in ("smallint", "mediumint") or (kind == "int" and not column.unsigned):
        return "int32"
    if kind in ("int", "integer", "bigint"):
        return "int64"
    if kind == "float":
        return "float"
    if kind in ("double", "real"):
        return "double"
    raise ValueError(f"unsupported MySQL type {kind!r} for column {column.name!r}")


def connect_value(column: ColumnDefinition, value: Value | NoDefault) -> Any:
    """A column value as Debezium writes it in JSON (see SEMANTICS §5)."""
    if value is None or value is NO_DEFAULT:
        return None
    kind = column.data_type
    if kind in ("decimal", "numeric"):
        return _decimal_bytes(_as_decimal(value), column.scale or 0)
    if kind == "datetime":
        micros = _epoch_micros(_as_datetime(value))
        return micros // 1000 if column.fsp <= 3 else micros
    if kind == "timestamp":
        return _zoned_text(_as_datetime(value), column.fsp)
    if kind == "date":
        return (_as_date(value) - _EPOCH_DATE).days
    if kind == "time":
        return _time_micros(value)
    if kind == "json":
        return value.text if isinstance(value, JsonText) else str(value)
    if kind == "bit":
        return _bit_value(column, value)
    return _plain_value(column, value)


def _plain_value(column: ColumnDefinition, value: Value) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, bool) and _connect_type(column)[0] != "boolean":
        return int(value)
    if isinstance(value, Decimal):
        return float(value) if column.data_type in ("float", "double", "real") else int(value)
    return value


def _bit_value(column: ColumnDefinition, value: Value) -> Any:
    if isinstance(value, BitString):
        bits = value.value
    elif isinstance(value, int):
        bits = int(value)
    else:
        raise TypeError("a BIT column needs a BitString, int or bool value")
    length = column.length or 1
    if length == 1:
        return bool(bits)
    return base64.b64encode(bits.to_bytes((length + 7) // 8, "little")).decode("ascii")


def _decimal_bytes(value: Decimal, scale: int) -> str:
    # BigDecimal.unscaledValue().toByteArray(): minimal big-endian two's complement. Integer
    # arithmetic, not Decimal arithmetic: the context's 28 digits would round DECIMAL(65, 30).
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError("a DECIMAL value must be finite")
    coefficient = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        unscaled = coefficient * 10 ** shift
    else:
        unscaled, remainder = divmod(coefficient, 10 ** -shift)
        if remainder:
            raise ValueError(f"decimal does not fit scale {scale}")
    unscaled = -unscaled if sign else unscaled
    magnitude = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    raw = unscaled.to_bytes(magnitude // 8 + 1, "big", signed=True)
    return base64.b64encode(raw).decode("ascii")


def _zoned_text(moment: dt.datetime, fsp: int) -> str:
    # ISO-8601 in UTC, fractional digits padded to the column's precision (DBZ-5996).
    moment = require_utc(moment)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if fsp > 0:
        text += "." + f"{moment.microsecond:06d}"[:fsp]
    return text + "Z"


def _epoch_micros(moment: dt.datetime) -> int:
    return (require_utc(moment) - _EPOCH) // dt.timedelta(microseconds=1)


def _time_micros(value: Value) -> int:
    if not isinstance(value, dt.time):
        raise TypeError("a TIME column needs a datetime.time value")
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 1_000_000 + value.microsecond


def _as_decimal(value: Value) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError("a DECIMAL column needs a Decimal value")


def _as_datetime(value: Value) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise TypeError("a DATETIME/TIMESTAMP column needs an aware datetime value")
    return value


def _as_date(value: Value) -> dt.date:
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        raise TypeError("a DATE column needs a date value")
    return value
