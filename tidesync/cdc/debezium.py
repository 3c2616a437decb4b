"""Debezium MySQL records → standard change events (§6.1, §7.3), or a named reason not to.

Every Kafka record yields exactly one outcome (Normalized, Skip or Block); no input raises.
"""

from __future__ import annotations

import binascii
import datetime as dt
import enum
import functools
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, TypeAlias, TypeVar

from tidesync.cdc.column_types import ColumnTypeSource, MySQLColumnType
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.errors import TidesyncError
from tidesync.domain.values import BitString, JsonText, Value, canonical_text

REVISION_COLUMN = "_sync_revision"
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
NEW_KEY_HEADER = "__debezium.newkey"
OLD_KEY_HEADER = "__debezium.oldkey"

# Newest versions whose layout this module has been checked against (SEMANTICS.md §1, §3).
MAX_ENVELOPE_SCHEMA_VERSION = 2
MAX_SOURCE_SCHEMA_VERSION = 1
MAX_DEBEZIUM_MAJOR = 3


# --- inputs and outcomes ------------------------------------------------------------------


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


class DecimalHandling(enum.StrEnum):
    """How payload-only records carry DECIMAL columns (Debezium `decimal.handling.mode`)."""

    PRECISE = "precise"
    STRING = "string"


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


class SkipReason(enum.StrEnum):
    """Records that are not row changes and need no action beyond advancing past them."""

    TOMBSTONE = "TOMBSTONE"
    HEARTBEAT = "HEARTBEAT"
    TRANSACTION_BOUNDARY = "TRANSACTION_BOUNDARY"
    SCHEMA_CHANGE = "SCHEMA_CHANGE"


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


class _Blocked(TidesyncError):
    """Raised inside the normalizer, turned into a Block at its one public entry point."""

    def __init__(self, reason: BlockReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _BadValue(_Blocked):
    """One column value or column type that cannot be decoded; the row names the column."""


# --- JSON -------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


# NaN and Infinity are not JSON; Python's decoder would accept them.
_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
_JSON_ERRORS = (ValueError, RecursionError)


def _parse_json(text: str, what: str) -> Any:
    try:
        return _JSON.decode(text)
    except json.JSONDecodeError as error:
        raise _Blocked(BlockReason.MALFORMED_JSON, f"{what} is not valid JSON: {error}") from None
    except _JSON_ERRORS as error:
        raise _Blocked(BlockReason.MALFORMED_JSON, f"{what} is not valid JSON: "
                       f"{type(error).__name__}") from None


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Blocked(BlockReason.MALFORMED_JSON,
                       f"{what} is not UTF-8 (byte {error.start})") from None


def _json_kind(raw: object) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "boolean"
    if isinstance(raw, int | float):
        return "number"
    if isinstance(raw, str):
        return "string"
    return "array" if isinstance(raw, list) else "object"


# --- column values --------------------------------------------------------------------------

Decoder: TypeAlias = Callable[[Any], Value]
ColumnCodec: TypeAlias = tuple[type | None, Decoder]
"""(the Python type a JSON value may already have to be taken as is, the full decoder)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_DAY_MICROS = 86_400_000_000
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_MAX_SCALE = 1000


def _mismatch(expected: str, raw: object) -> _BadValue:
    return _BadValue(BlockReason.UNSUPPORTED_TYPE,
                     f"expected {expected}, got a JSON {_json_kind(raw)}")


def _as_int(raw: Any) -> int:
    if type(raw) is int:
        return raw
    raise _mismatch("an integer", raw)


def _as_float(raw: Any) -> float:
    if type(raw) is float:
        if raw - raw == 0.0:  # finite: JSON like 1e400 overflows to inf
            return raw
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "floating-point value out of range")
    if type(raw) is int:
        try:
            return float(raw)
        except OverflowError:
            raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "number out of range") from None
    raise _mismatch("a number", raw)


def _as_bool(raw: Any) -> bool:
    if type(raw) is bool:
        return raw
    raise _mismatch("a boolean", raw)


def _as_bool01(raw: Any) -> bool:
    """TINYINT(1): int16 0/1 from a snapshot, boolean while streaming — the same bool."""
    if type(raw) is bool:
        return raw
    if type(raw) is int and raw in (0, 1):
        return raw == 1
    if type(raw) is int:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        "TINYINT(1) value other than 0/1 cannot be read as a boolean")
    raise _mismatch("a boolean or 0/1", raw)


def _as_str(raw: Any) -> str:
    if type(raw) is str:
        return raw
    raise _mismatch("a string", raw)


def _as_bytes(raw: Any) -> bytes:
    if type(raw) is not str:
        raise _mismatch("base64 text", raw)
    try:
        return binascii.a2b_base64(raw, strict_mode=True)
    except ValueError:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "value is not valid base64") from None


def _as_unsigned(raw: Any) -> int:
    value = _as_int(raw)
    if value < 0:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        "negative BIGINT UNSIGNED value: bigint.unsigned.handling.mode=long "
                        "overflowed; use precise")
    return value


def _unscaled_decimal(data: bytes, scale: int) -> Decimal:
    if not data:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "empty DECIMAL bytes")
    unscaled = int.from_bytes(data, "big", signed=True)
    # From text, so no context precision applies: DECIMAL(65,30) stays exact.
    return Decimal(f"{unscaled}E{-scale}")


def _unsigned_from_bytes(raw: Any) -> int:
    """BIGINT UNSIGNED in precise mode: a scale-0 Decimal, carried as the integer it is."""
    return _as_unsigned(int(_unscaled_decimal(_as_bytes(raw), 0)))


def _decimal_from_bytes(scale: int) -> Decoder:
    def decode(raw: Any) -> Decimal:
        return _unscaled_decimal(_as_bytes(raw), scale)

    return decode


def _decimal_from_text(raw: Any) -> Decimal:
    if type(raw) is str and _DECIMAL_TEXT.fullmatch(raw):
        return Decimal(raw)
    if type(raw) in (int, float):
        raise _imprecise_decimal()
    raise _mismatch("decimal text", raw)


def _imprecise_decimal() -> _BadValue:
    return _BadValue(BlockReason.IMPRECISE_DECIMAL,
                     "DECIMAL arrived as a JSON number (decimal.handling.mode=double?), so its "
                     "exact value is unknown; use precise or string")


def _decimal_payload(scale: int, handling: DecimalHandling | None) -> Decoder:
    """DECIMAL in a payload-only record: base64 unscaled bytes (precise) or text (string)."""

    def decode(raw: Any) -> Decimal:
        if type(raw) is not str:
            if type(raw) in (int, float):
                raise _imprecise_decimal()
            raise _mismatch("base64 or decimal text", raw)
        if handling is DecimalHandling.STRING:
            return _decimal_from_text(raw)
        if handling is DecimalHandling.PRECISE or _DECIMAL_TEXT.fullmatch(raw) is None:
            return _unscaled_decimal(_as_bytes(raw), scale)
        # '.' and '-' never occur in base64; string mode always writes the column's scale.
        if "." in raw or raw[0] == "-" or (scale == 0 and len(raw) % 4):
            return Decimal(raw)
        if scale > 0:
            return _unscaled_decimal(_as_bytes(raw), scale)
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        "digits-only DECIMAL text is also valid base64; configure the decimal "
                        "handling mode (precise or string) to read it")

    return decode


def _variable_scale_decimal(raw: Any) -> Decimal:
    if type(raw) is not dict:
        raise _mismatch("a {scale, value} object", raw)
    return _unscaled_decimal(_as_bytes(raw.get("value")), _scale_number(raw.get("scale")))


def _scale_number(raw: Any) -> int:
    scale = raw if type(raw) is int else (
        int(raw) if type(raw) is str and _DECIMAL_TEXT.fullmatch(raw) and "." not in raw
        else None
    )
    if scale is None or abs(scale) > _MAX_SCALE:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "DECIMAL scale is not a usable integer")
    return scale


def _date_from_days(raw: Any) -> dt.date:
    try:
        return dt.date.fromordinal(_EPOCH_ORDINAL + _as_int(raw))
    except (ValueError, OverflowError):
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "DATE out of range") from None


def _time_from_micros(micros: int) -> dt.time:
    if not 0 <= micros < _DAY_MICROS:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        "TIME outside 00:00–24:00 cannot be represented")
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, micro)


def _time_millis(raw: Any) -> dt.time:
    return _time_from_micros(_as_int(raw) * 1000)


def _time_micros(raw: Any) -> dt.time:
    return _time_from_micros(_as_int(raw))


def _whole_micros(nanos: int) -> int:
    micros, rest = divmod(nanos, 1000)
    if rest:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "sub-microsecond time cannot be kept")
    return micros


def _time_nanos(raw: Any) -> dt.time:
    return _time_from_micros(_whole_micros(_as_int(raw)))


def _moment_from_micros(micros: int) -> dt.datetime:
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "timestamp out of range") from None


def _timestamp_millis(raw: Any) -> dt.datetime:
    return _moment_from_micros(_as_int(raw) * 1000)


def _timestamp_micros(raw: Any) -> dt.datetime:
    return _moment_from_micros(_as_int(raw))


def _timestamp_nanos(raw: Any) -> dt.datetime:
    return _moment_from_micros(_whole_micros(_as_int(raw)))


def _zoned_timestamp(raw: Any) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(_as_str(raw))
        if moment.utcoffset() is None:
            raise ValueError("no zone")
        return moment.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        "not an ISO-8601 timestamp with a zone") from None


def _json_text(raw: Any) -> JsonText:
    text = _as_str(raw)
    try:
        _JSON.decode(text)
    except _JSON_ERRORS:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "JSON column holds invalid JSON") from None
    return JsonText(text)


def _bits(length: int) -> Decoder:
    """BIT(n): little-endian bytes (SEMANTICS.md §5)."""
    if not 1 <= length <= 64:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE, f"BIT length {length} is not 1..64")

    def decode(raw: Any) -> BitString:
        try:
            return BitString(length, int.from_bytes(_as_bytes(raw), "little"))
        except ValueError:
            raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                            f"value does not fit in BIT({length})") from None

    return decode


def _parameter(field: Mapping[str, Any], name: str) -> Any:
    parameters = field.get("parameters")
    return parameters.get(name) if isinstance(parameters, dict) else None


def _decimal_field(field: Mapping[str, Any]) -> ColumnCodec:
    scale = _parameter(field, "scale")
    if scale is None:
        raise _BadValue(BlockReason.DECIMAL_SCALE_MISSING,
                        "Decimal schema has no parameters.scale")
    return None, _decimal_from_bytes(_scale_number(scale))


def _bits_field(field: Mapping[str, Any]) -> ColumnCodec:
    length = _parameter(field, "length")
    if type(length) is str and length.isascii() and length.isdigit() and len(length) < 4:
        return None, _bits(int(length))
    raise _BadValue(BlockReason.UNSUPPORTED_TYPE, "Bits schema has no usable parameters.length")


def _fixed(codec: ColumnCodec) -> Callable[[Mapping[str, Any]], ColumnCodec]:
    return lambda field: codec


DECIMAL_LOGICAL = "org.apache.kafka.connect.data.Decimal"

# Logical type name → (Kafka Connect types it may have, codec factory from the field schema).
_LOGICAL: dict[str, tuple[frozenset[str], Callable[[Mapping[str, Any]], ColumnCodec]]] = {
    DECIMAL_LOGICAL: (frozenset({"bytes"}), _decimal_field),
    "io.debezium.data.VariableScaleDecimal": (
        frozenset({"struct"}), _fixed((None, _variable_scale_decimal))),
    "io.debezium.time.Date": (frozenset({"int32"}), _fixed((None, _date_from_days))),
    "org.apache.kafka.connect.data.Date": (frozenset({"int32"}), _fixed((None, _date_from_days))),
    "io.debezium.time.Time": (frozenset({"int32"}), _fixed((None, _time_millis))),
    "org.apache.kafka.connect.data.Time": (frozenset({"int32"}), _fixed((None, _time_millis))),
    "io.debezium.time.MicroTime": (frozenset({"int64"}), _fixed((None, _time_micros))),
    "io.debezium.time.NanoTime": (frozenset({"int64"}), _fixed((None, _time_nanos))),
    "io.debezium.time.Timestamp": (frozenset({"int64"}), _fixed((None, _timestamp_millis))),
    "org.apache.kafka.connect.data.Timestamp": (
        frozenset({"int64"}), _fixed((None, _timestamp_millis))),
    "io.debezium.time.MicroTimestamp": (frozenset({"int64"}), _fixed((None, _timestamp_micros))),
    "io.debezium.time.NanoTimestamp": (frozenset({"int64"}), _fixed((None, _timestamp_nanos))),
    "io.debezium.time.ZonedTimestamp": (frozenset({"string"}), _fixed((None, _zoned_timestamp))),
    "io.debezium.time.Year": (frozenset({"int32"}), _fixed((int, _as_int))),
    "io.debezium.data.Enum": (frozenset({"string"}), _fixed((str, _as_str))),
    "io.debezium.data.EnumSet": (frozenset({"string"}), _fixed((str, _as_str))),
    "io.debezium.data.Json": (frozenset({"string"}), _fixed((None, _json_text))),
    "io.debezium.data.Bits": (frozenset({"bytes"}), _bits_field),
}

# Kafka Connect types without a logical name. Floats always go through the decoder (range).
_CONNECT: dict[str, ColumnCodec] = {
    "int8": (int, _as_int),
    "int16": (int, _as_int),
    "int32": (int, _as_int),
    "int64": (int, _as_int),
    "float": (None, _as_float),
    "double": (None, _as_float),
    "boolean": (bool, _as_bool),
    "string": (str, _as_str),
    "bytes": (None, _as_bytes),
}


def _schema_codec(field: Mapping[str, Any], mysql: MySQLColumnType | None) -> ColumnCodec:
    """The codec of one column described by its Kafka Connect field schema."""
    connect_type, logical = field.get("type"), field.get("name")
    if mysql is not None:
        codec = _codec_from_both(connect_type, logical, mysql)
        if codec is not None:
            return codec
    if logical is not None:
        entry = _LOGICAL.get(logical) if isinstance(logical, str) else None
        if entry is None:
            raise _BadValue(BlockReason.UNSUPPORTED_TYPE, f"unknown logical type {logical!r}")
        connect_types, factory = entry
        if connect_type not in connect_types:
            raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                            f"logical type {logical} on Kafka Connect type {connect_type!r}")
        return factory(field)
    codec = _CONNECT.get(connect_type) if isinstance(connect_type, str) else None
    if codec is None:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        f"Kafka Connect type {connect_type!r} is not supported")
    return codec


def _codec_from_both(
    connect_type: Any, logical: Any, mysql: MySQLColumnType
) -> ColumnCodec | None:
    """Where the ship's column type refines the declared one; None keeps the declared one."""
    if mysql.is_boolean and logical is None and connect_type in ("int8", "int16", "boolean"):
        return bool, _as_bool01
    if mysql.is_decimal and logical is None:
        if connect_type == "string":
            return None, _decimal_from_text
        if connect_type in ("float", "double"):
            raise _imprecise_decimal()
    if mysql.base == "bigint" and mysql.unsigned:
        if logical is None and connect_type == "int64":
            return None, _as_unsigned
        if logical == DECIMAL_LOGICAL and connect_type == "bytes":
            return None, _unsigned_from_bytes
    return None


def _unsupported_mysql(kind: str) -> _BadValue:
    return _BadValue(BlockReason.UNSUPPORTED_TYPE, f"MySQL type {kind} is not supported")


def _mysql_codec(mysql: MySQLColumnType, handling: DecimalHandling | None) -> ColumnCodec:
    """The codec of one column of a payload-only record, from the ship's column type.

    Assumes the connector defaults: time.precision.mode=adaptive_time_microseconds,
    binary.handling.mode=bytes, bigint.unsigned.handling.mode long or precise.
    """
    base = mysql.base
    if mysql.is_boolean:
        return bool, _as_bool01
    if base in _MYSQL_FIXED:
        return _MYSQL_FIXED[base]
    if mysql.is_decimal:
        return None, _decimal_payload(_scale_number(mysql.decimal_scale()), handling)
    if base == "bigint":
        return (None, _bigint_unsigned_payload) if mysql.unsigned else (int, _as_int)
    if base == "datetime":
        fsp = mysql.fractional_digits()
        return None, _timestamp_millis if fsp <= 3 else _timestamp_micros
    if base == "bit":
        length = mysql.numbers()[0] if mysql.arguments else 1
        return (bool, _as_bool) if length == 1 else (None, _bits(length))
    raise _unsupported_mysql(base)


def _bigint_unsigned_payload(raw: Any) -> int:
    return _unsigned_from_bytes(raw) if type(raw) is str else _as_unsigned(raw)


_MYSQL_FIXED: dict[str, ColumnCodec] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "year"),
                    (int, _as_int)),
    **dict.fromkeys(("float", "double", "real", "double precision"), (None, _as_float)),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum",
                     "set"), (str, _as_str)),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
                    (None, _as_bytes)),
    "date": (None, _date_from_days),
    "time": (None, _time_micros),
    "timestamp": (None, _zoned_timestamp),
    "json": (None, _json_text),
}


# --- rows -----------------------------------------------------------------------------------


class _RowPlan:
    """Decoders for every column of one table image, built once and reused for each row."""

    __slots__ = ("as_is", "decoders", "described", "refused", "unknown_reason")

    def __init__(self, unknown_reason: BlockReason, described: str) -> None:
        self.as_is: dict[str, Any] = {}  # column → the Value type taken as is
        self.decoders: dict[str, Decoder] = {}
        self.refused: dict[str, _BadValue] = {}
        self.unknown_reason = unknown_reason
        self.described = described

    def add(self, column: str, build: Callable[[], ColumnCodec]) -> None:
        try:
            fast_type, decoder = build()
        except _BadValue as problem:
            self.refused[column] = problem
            return
        if fast_type is not None:
            self.as_is[column] = fast_type
        self.decoders[column] = decoder

    def decode(self, row: Any, image: str, unknown_reason: BlockReason | None = None
               ) -> dict[str, Value]:
        if type(row) is not dict:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, f"{image} is not a JSON object")
        for column, problem in self.refused.items():
            if column in row:
                raise _Blocked(problem.reason, f"{image} column {column!r}: {problem.detail}")
        as_is, decoders = self.as_is, self.decoders
        decoded: dict[str, Value] = {}
        column = ""
        try:
            for column, raw in row.items():
                if type(raw) is as_is.get(column):
                    decoded[column] = raw
                    continue
                decoder = decoders.get(column)
                if decoder is None:
                    break
                decoded[column] = None if raw is None else decoder(raw)
            else:
                return decoded
        except _BadValue as problem:
            raise _Blocked(problem.reason, f"{image} column {column!r}: {problem.detail}"
                           ) from None
        raise _Blocked(unknown_reason or self.unknown_reason,
                       f"{image} column {column!r} is not in {self.described}")


def _schema_plan(fields: Sequence[Mapping[str, Any]], types: Mapping[str, str] | None,
                 described: str) -> _RowPlan:
    plan = _RowPlan(BlockReason.MALFORMED_ENVELOPE, described)
    for field in fields:
        column: str = field["field"]
        mysql = _mysql_type_or_none(types.get(column)) if types else None
        plan.add(column, functools.partial(_schema_codec, field, mysql))
    return plan


def _mysql_type_or_none(text: str | None) -> MySQLColumnType | None:
    if text is None:
        return None
    try:
        return MySQLColumnType.parse(text)
    except ValueError:
        return None  # With a schema the declared type stands on its own.


def _types_plan(types: Mapping[str, str], handling: DecimalHandling | None,
                described: str) -> _RowPlan:
    plan = _RowPlan(BlockReason.TYPE_INFO_MISSING, described)
    for column, text in types.items():
        plan.add(column, functools.partial(_codec_from_type_text, text, handling))
    return plan


def _codec_from_type_text(text: str, handling: DecimalHandling | None) -> ColumnCodec:
    try:
        mysql = MySQLColumnType.parse(text)
        return _mysql_codec(mysql, handling)
    except ValueError:
        raise _BadValue(BlockReason.UNSUPPORTED_TYPE,
                        f"column type {text!r} is not understood") from None


class _StructSchema:
    """A struct schema (a row image or a key) and its plan per column-types mapping."""

    __slots__ = ("_plan", "_types", "described", "fields", "problem")

    def __init__(self, schema: Any, described: str) -> None:
        self.described = described
        self.fields: list[Mapping[str, Any]] = []
        self.problem: _Blocked | None = None
        self._types: object = None
        self._plan: _RowPlan | None = None
        fields = schema.get("fields") if isinstance(schema, dict) else None
        if not isinstance(fields, list):
            self.problem = _Blocked(BlockReason.MALFORMED_ENVELOPE,
                                    f"{described} is not a struct with fields")
            return
        names = set()
        for field in fields:
            if not (isinstance(field, dict) and type(field.get("field")) is str
                    and field["field"] not in names):
                self.problem = _Blocked(BlockReason.MALFORMED_ENVELOPE,
                                        f"{described} has an unnamed or repeated field")
                return
            names.add(field["field"])
            self.fields.append(field)

    def plan(self, types: Mapping[str, str] | None) -> _RowPlan:
        if self.problem is not None:
            raise self.problem
        if self._plan is None or self._types is not types:
            self._plan = _schema_plan(self.fields, types, self.described)
            self._types = types
        return self._plan


class _EnvelopeSchema:
    """What one value schema says, computed once per distinct schema text."""

    __slots__ = ("images", "name", "problem")

    def __init__(self, schema: Any) -> None:
        self.name: object = schema.get("name") if isinstance(schema, dict) else None
        self.problem: _Blocked | None = None
        self.images: dict[str, _StructSchema] = {}
        try:
            self._read(schema)
        except _Blocked as problem:
            self.problem = problem

    def _read(self, schema: Any) -> None:
        if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list):
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "value schema is not a struct")
        _check_version(schema.get("version"), MAX_ENVELOPE_SCHEMA_VERSION, "envelope schema")
        for field in schema["fields"]:
            name = field.get("field") if isinstance(field, dict) else None
            if name in ("before", "after"):
                self.images[name] = _StructSchema(field, f"the {name} schema")
            elif name == "source":
                _check_version(field.get("version"), MAX_SOURCE_SCHEMA_VERSION, "source schema")

    def plan(self, image: str, types: Mapping[str, str] | None) -> _RowPlan:
        if self.problem is not None:
            raise self.problem
        struct = self.images.get(image)
        if struct is None:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, f"value schema has no {image} field")
        return struct.plan(types)


def _check_version(version: Any, newest: int, what: str) -> None:
    if version is None:
        return
    if type(version) is not int:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, f"{what} version is not an integer")
    if version > newest:
        raise _Blocked(BlockReason.UNSUPPORTED_SCHEMA_VERSION,
                       f"{what} version {version} is newer than {newest}")


# --- records --------------------------------------------------------------------------------

_Entry = TypeVar("_Entry")
_SCHEMA_PREFIX = '{"schema":'
_PAYLOAD_SEPARATOR = ',"payload":'


class _SchemaCache(Generic[_Entry]):
    """Schema entries keyed by the schema's exact JSON text, as the JSON converter writes it."""

    def __init__(self, build: Callable[[Any], _Entry], limit: int = 1024) -> None:
        self.build = build
        self._entries: dict[str, _Entry | None] = {}
        self._limit = limit

    def entry_for(self, schema_text: str) -> _Entry | None:
        """The entry of a schema text; parses it (raising a JSON error) the first time."""
        try:
            return self._entries[schema_text]
        except KeyError:
            pass
        schema = _JSON.decode(schema_text)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        entry = self.build(schema) if schema else None
        self._entries[schema_text] = entry
        return entry

    def load(self, text: str, what: str) -> tuple[_Entry | None, Any]:
        """(schema entry, payload) of a JSON-converter record, with schemas or payload-only.

        The converter writes `{"schema":S,"payload":P}`: when the text has that form, S is
        looked up by its text and only P is parsed. Anything else is parsed whole.
        """
        if text.startswith(_SCHEMA_PREFIX):
            cut = text.find(_PAYLOAD_SEPARATOR, len(_SCHEMA_PREFIX))
            body = text[cut + len(_PAYLOAD_SEPARATOR):].rstrip() if cut > 0 else ""
            if body.endswith("}"):
                schema_text = text[len(_SCHEMA_PREFIX):cut]
                try:
                    entry = self.entry_for(schema_text)
                    # Both parts parsed alone mean the whole is exactly {"schema":S,"payload":P}.
                    return entry, _JSON.decode(body[:-1])
                except _JSON_ERRORS:
                    pass  # Not that form after all (e.g. a nested "payload" key): parse it whole.
        document = _parse_json(text, what)
        if type(document) is dict and "schema" in document and "payload" in document:
            schema = document["schema"]
            return (self.build(schema) if schema else None), document["payload"]
        return None, document


_OPERATIONS = {"c": Operation.INSERT, "u": Operation.UPDATE, "d": Operation.DELETE,
               "r": Operation.SNAPSHOT}
_SNAPSHOT_MARKERS = frozenset({"true", "first", "first_in_data_collection",
                               "last_in_data_collection", "last", "false", "incremental"})
_SOURCE_DETAILS = (
    ("connector", "connector"), ("name", "server_name"), ("version", "debezium_version"),
    ("server_id", "server_id"), ("gtid", "gtid"), ("file", "binlog_file"),
    ("pos", "binlog_position"), ("row", "binlog_row"), ("thread", "thread"),
    ("ts_ms", "source_ts_ms"), ("ts_sec", "source_ts_sec"), ("sequence", "sequence"),
)
_CONNECT_OFFSET_FIELDS = frozenset({"file", "pos"})
_QUOTED_NAME = re.compile(r'"((?:[^"]|"")*)"')
_DEBEZIUM_MAJOR = re.compile(r"([0-9]+)\.")


class DebeziumNormalizer:
    """Turns Debezium MySQL Kafka records into change events, skips or blocks.

    Decoders are built once per distinct schema text (records with schemas) or per
    column-types mapping (payload-only records) and reused, so the per-record cost is one
    parse of the payload plus one decoder call per column. One instance per consumer thread.
    """

    def __init__(self, settings: NormalizerSettings) -> None:
        self.settings = settings
        self._value_schemas: _SchemaCache[_EnvelopeSchema] = _SchemaCache(_EnvelopeSchema)
        self._key_schemas: _SchemaCache[_StructSchema] = _SchemaCache(
            functools.partial(_StructSchema, described="the key schema"))
        self._table_plans: dict[tuple[str, str], tuple[Mapping[str, str], _RowPlan]] = {}

    def normalize(self, record: KafkaRecord, *, key_columns: Sequence[str] | None = None
                  ) -> Outcome:
        """The one outcome of `record`.

        `key_columns` names primary key columns to read from the row image, only for records
        that carry no Kafka key (e.g. a value file inspected on its own).
        """
        try:
            return self._normalize(record, key_columns)
        except _Blocked as blocked:
            return Block(blocked.reason, blocked.detail)

    def _normalize(self, record: KafkaRecord, key_columns: Sequence[str] | None) -> Outcome:
        if record.partition < 0 or record.offset < 0:
            raise _Blocked(BlockReason.INVALID_COORDINATES,
                           "record partition and offset must be >= 0")
        if not record.value:
            return Skip(SkipReason.TOMBSTONE, "null value: the tombstone after a delete")
        text = _utf8(record.value, "value")
        schema, payload = self._value_schemas.load(text, "value")
        if payload is None:
            return Skip(SkipReason.TOMBSTONE, "null payload: the tombstone after a delete")
        if type(payload) is not dict:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "value payload is not a JSON object")
        if "op" not in payload:
            return _not_a_row_change(record, payload, schema)
        event = self._row_change(record, schema, payload, key_columns)
        if "\\ud" in text or "\\uD" in text:
            _check_unicode(event)
        return Normalized(event)

    def _row_change(self, record: KafkaRecord, schema: _EnvelopeSchema | None,
                    payload: dict[str, Any], key_columns: Sequence[str] | None) -> ChangeEvent:
        op = payload["op"]
        if type(op) is not str:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "op is not a string")
        if schema is not None and schema.problem is not None:
            raise schema.problem
        source = payload.get("source")
        if type(source) is not dict:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "the source block is missing")
        _check_source(source)
        if op == "t":
            raise _Blocked(BlockReason.TRUNCATE_NOT_SYNCED,
                           f"TRUNCATE of {_table_name(source)}: a table-wide delete cannot be "
                           "synced as row events; reconcile the table")
        operation = _OPERATIONS.get(op)
        if operation is None:
            raise _Blocked(BlockReason.UNKNOWN_OPERATION, f"unknown op {op[:20]!r}")
        database, table = _required_text(source, "db"), _required_text(source, "table")
        snapshot = _snapshot_marker(source.get("snapshot"))
        if operation is Operation.INSERT and snapshot not in (None, "false"):
            operation = Operation.SNAPSHOT  # legacy v1 and ReadToInsertEvent: snapshot as c
        before, after = self._images(schema, payload, operation, database, table)
        key = self._record_key(record, schema, database, table, before, after, key_columns)
        coordinates = SourceCoordinates(
            self.settings.origin_node_id, self.settings.replay_epoch, record.topic,
            record.partition, record.offset,
        )
        try:
            event_id = event_id_for(coordinates, key, operation)
        except UnicodeEncodeError:
            raise _Blocked(BlockReason.UNSUPPORTED_TYPE,
                           "the key holds a lone surrogate, which is not valid Unicode") from None
        base_revision, result_revision = self._revisions(
            database, table, operation, before, after, event_id)
        transaction_id, transaction_order, table_order = _transaction(payload.get("transaction"))
        details = _source_details(source, snapshot, record.timestamp_ms, table_order)
        details.update(self._key_change(record, operation, schema, database, table))
        return ChangeEvent(
            event_id=event_id, origin_node_id=self.settings.origin_node_id,
            source_connector_id=self.settings.source_connector_id, source_topic=record.topic,
            source_partition=record.partition, source_position=record.offset, record=key,
            operation=operation, captured_at=_captured_at(payload, source), before=before,
            after=after, base_revision=base_revision, result_revision=result_revision,
            transaction_id=transaction_id, transaction_order=transaction_order,
            replay_epoch=self.settings.replay_epoch, source_details=details,
        )

    def _images(self, schema: _EnvelopeSchema | None, payload: dict[str, Any],
                operation: Operation, database: str, table: str
                ) -> tuple[dict[str, Value] | None, dict[str, Value] | None]:
        raw_before, raw_after = payload.get("before"), payload.get("after")
        if operation in (Operation.UPDATE, Operation.DELETE) and raw_before is None:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE,
                           f"{operation} needs a before image (binlog_row_image=FULL)")
        if operation in (Operation.INSERT, Operation.SNAPSHOT) and raw_before is not None:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE,
                           f"{operation} must not carry a before image")
        if (raw_after is None) != (operation is Operation.DELETE):
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, f"{operation} must not carry an "
                           "after image" if raw_after is not None else
                           f"{operation} needs an after image")
        types = self._column_types(database, table)
        images: list[dict[str, Value] | None] = []
        for image, raw in (("before", raw_before), ("after", raw_after)):
            if raw is None:
                images.append(None)
                continue
            plan = (schema.plan(image, types) if schema is not None
                    else self._payload_plan(database, table, types))
            images.append(plan.decode(raw, image))
        return images[0], images[1]

    def _column_types(self, database: str, table: str) -> Mapping[str, str] | None:
        source = self.settings.column_types
        return None if source is None else source.column_types(database, table)

    def _payload_plan(self, database: str, table: str, types: Mapping[str, str] | None
                      ) -> _RowPlan:
        if types is None:
            raise _Blocked(BlockReason.TYPE_INFO_MISSING,
                           f"payload-only record and no column types known for "
                           f"{database}.{table}")
        cached = self._table_plans.get((database, table))
        if cached is not None and cached[0] is types:
            return cached[1]
        plan = _types_plan(types, self.settings.decimal_handling,
                           f"the column types of {database}.{table}")
        self._table_plans[(database, table)] = (types, plan)
        return plan

    def _key_plan(self, key_schema: _StructSchema | None, value_schema: _EnvelopeSchema | None,
                  database: str, table: str, image: str) -> tuple[_RowPlan, BlockReason | None]:
        """A key with a schema decodes by it; a payload-only key by the row's own columns."""
        types = self._column_types(database, table)
        if key_schema is not None:
            return key_schema.plan(types), None
        if value_schema is not None:
            return value_schema.plan(image, types), BlockReason.TYPE_INFO_MISSING
        return self._payload_plan(database, table, types), None

    def _record_key(self, record: KafkaRecord, schema: _EnvelopeSchema | None, database: str,
                    table: str, before: dict[str, Value] | None, after: dict[str, Value] | None,
                    key_columns: Sequence[str] | None) -> RecordKey:
        if not record.key:
            if key_columns:
                image = after if after is not None else before
                return _key_from_image(database, table, image or {}, key_columns)
            raise _Blocked(BlockReason.MISSING_PRIMARY_KEY, "the record has no key")
        key_schema, payload = self._key_schemas.load(_utf8(record.key, "key"), "key")
        columns = self._decode_key(payload, key_schema, schema, database, table,
                                   "after" if after is not None else "before")
        for image_name, image in (("before", before), ("after", after)):
            for column, value in columns.items():
                if image is not None and column in image and not _same(image[column], value):
                    raise _Blocked(BlockReason.KEY_MISMATCH,
                                   f"key column {column!r} differs from the {image_name} image")
        return RecordKey(database, table, tuple(columns.items()))

    def _decode_key(self, payload: Any, key_schema: _StructSchema | None,
                    schema: _EnvelopeSchema | None, database: str, table: str, image: str
                    ) -> dict[str, Value]:
        if payload is None:
            raise _Blocked(BlockReason.MISSING_PRIMARY_KEY, "the key is null")
        if type(payload) is not dict:
            raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "the key is not a JSON object")
        if not payload:
            raise _Blocked(BlockReason.MISSING_PRIMARY_KEY, "the key has no columns")
        plan, unknown_reason = self._key_plan(key_schema, schema, database, table, image)
        columns = plan.decode(payload, "key", unknown_reason)
        for column, value in columns.items():
            if value is None:
                raise _Blocked(BlockReason.MISSING_PRIMARY_KEY, f"key column {column!r} is null")
        return columns

    def _revisions(self, database: str, table: str, operation: Operation,
                   before: Mapping[str, Value] | None, after: Mapping[str, Value] | None,
                   event_id: uuid.UUID) -> tuple[Revision | None, Revision | None]:
        if (database, table) not in self.settings.bidirectional_tables:
            return None, None
        column = self.settings.revision_column
        base = None if before is None else _revision(before, "before", column)
        if operation is Operation.DELETE:
            return base, tombstone_revision(event_id)
        return base, _revision(after, "after", column)

    def _key_change(self, record: KafkaRecord, operation: Operation,
                    schema: _EnvelopeSchema | None, database: str, table: str
                    ) -> dict[str, Value]:
        """A primary key update arrives as a d carrying the new key and a c carrying the old."""
        for header, raw in record.headers:
            if header not in (NEW_KEY_HEADER, OLD_KEY_HEADER):
                continue
            expected = Operation.DELETE if header == NEW_KEY_HEADER else Operation.INSERT
            if operation is not expected:
                raise _Blocked(BlockReason.MALFORMED_ENVELOPE,
                               f"header {header} on a {operation} event")
            change: dict[str, Value] = {"primary_key_change": (
                "DELETE_OF_OLD_KEY" if expected is Operation.DELETE else "INSERT_OF_NEW_KEY")}
            change.update(self._paired_key(raw, header, schema, database, table))
            return change
        return {}

    def _paired_key(self, raw: bytes | None, header: str, schema: _EnvelopeSchema | None,
                    database: str, table: str) -> dict[str, Value]:
        """The other key of the pair as RecordKey.key_text(), or the header text if opaque."""
        if raw is None:
            return {"paired_key": None}
        text = _utf8(raw, f"header {header}")
        try:
            key_schema, payload = self._key_schemas.load(text, "header")
            columns = self._decode_key(payload, key_schema, schema, database, table, "after")
        except _Blocked:
            # The default SimpleHeaderConverter writes text such as "Struct{id=1005}".
            return {"paired_key_text": text}
        return {"paired_key": canonical_text(columns.items())}


def _same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def _key_from_image(database: str, table: str, image: Mapping[str, Value],
                    key_columns: Sequence[str]) -> RecordKey:
    for column in key_columns:
        if image.get(column) is None:
            raise _Blocked(BlockReason.MISSING_PRIMARY_KEY,
                           f"key column {column!r} is absent or null in the row image")
    try:
        return RecordKey(database, table, tuple((column, image[column]) for column in key_columns))
    except ValueError as error:
        raise _Blocked(BlockReason.MISSING_PRIMARY_KEY, str(error)) from None


def _revision(image: Mapping[str, Value] | None, image_name: str, column: str) -> Revision:
    raw = None if image is None else image.get(column)
    if raw is None:
        raise _Blocked(BlockReason.MISSING_REVISION,
                       f"{column} is absent or null in the {image_name} image")
    try:
        if isinstance(raw, bytes):
            return Revision.parse(raw)
        if isinstance(raw, str):
            if len(raw) == 24:  # BINARY(16) under binary.handling.mode=base64
                return Revision(binascii.a2b_base64(raw, strict_mode=True))
            return Revision.parse(raw)
    except ValueError:
        pass
    raise _Blocked(BlockReason.INVALID_REVISION,
                   f"{column} in the {image_name} image is not a 16-byte revision")


def _check_source(source: Mapping[str, Any]) -> None:
    connector = source.get("connector")
    if connector is not None and connector not in ("mysql", "mariadb"):
        raise _Blocked(BlockReason.UNSUPPORTED_CONNECTOR,
                       f"source.connector {str(connector)[:40]!r} is not MySQL or MariaDB")
    version = source.get("version")
    if version is None:
        return
    if type(version) is not str:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "source.version is not a string")
    major = _debezium_major(version)
    if major is not None and major > MAX_DEBEZIUM_MAJOR:
        raise _Blocked(BlockReason.UNSUPPORTED_SCHEMA_VERSION,
                       f"Debezium {version[:40]} is newer than {MAX_DEBEZIUM_MAJOR}.x")


@functools.lru_cache(maxsize=64)
def _debezium_major(version: str) -> int | None:
    """3 for "3.1.1.Final"; None when unparseable (the docs print "{debezium-version}")."""
    match = _DEBEZIUM_MAJOR.match(version)
    return int(match[1]) if match and len(match[1]) < 6 else None


def _required_text(source: Mapping[str, Any], name: str) -> str:
    value = source.get(name)
    if type(value) is not str or not value:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, f"source.{name} is missing")
    return value


def _table_name(source: Mapping[str, Any]) -> str:
    database, table = source.get("db"), source.get("table")
    return f"{database}.{table}" if isinstance(database, str) and isinstance(table, str) else (
        "an unnamed table")


def _snapshot_marker(raw: Any) -> str | None:
    """source.snapshot as its string value; legacy and doc schemas use a boolean."""
    if raw is None:
        return None
    if type(raw) is bool:
        return "true" if raw else "false"
    if type(raw) is str and raw in _SNAPSHOT_MARKERS:
        return raw
    raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "source.snapshot has an unknown value")


def _whole_number(raw: Any) -> int | None:
    """An int64 field; the docs quote some of them as strings."""
    if type(raw) is int:
        return raw
    if type(raw) is str and 0 < len(raw) < 20 and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def _captured_at(payload: Mapping[str, Any], source: Mapping[str, Any]) -> dt.datetime:
    """Connector processing time (ts_ms), else the source's event time; 0 means unknown."""
    for raw, unit in ((payload.get("ts_ms"), 1000), (source.get("ts_ms"), 1000),
                      (source.get("ts_sec"), 1_000_000)):
        number = _whole_number(raw)
        if number is not None and number > 0:
            try:
                return _EPOCH + dt.timedelta(microseconds=number * unit)
            except OverflowError:
                continue
    raise _Blocked(BlockReason.CAPTURE_TIME_MISSING,
                   "neither ts_ms, source.ts_ms nor source.ts_sec gives a capture time")


def _transaction(raw: Any) -> tuple[str | None, int | None, int | None]:
    """(transaction id, total order, data collection order) of the transaction block."""
    if raw is None:
        return None, None, None
    if type(raw) is not dict:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction is not an object")
    transaction_id = raw.get("id")
    total_order = _whole_number(raw.get("total_order"))
    table_order = _whole_number(raw.get("data_collection_order"))
    if type(transaction_id) is not str or not transaction_id:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction.id is missing")
    if total_order is None or total_order < 1:
        raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "transaction.total_order is not >= 1")
    return transaction_id, total_order, table_order


def _source_details(source: Mapping[str, Any], snapshot: str | None, timestamp_ms: int | None,
                    table_order: int | None) -> dict[str, Value]:
    """Diagnostics of where the change came from. Never source.query: it holds row values."""
    details: dict[str, Value] = {
        label: source[name] for name, label in _SOURCE_DETAILS
        if type(source.get(name)) in (str, int)
    }
    for label, value in (("snapshot", snapshot), ("kafka_timestamp_ms", timestamp_ms),
                         ("transaction_data_collection_order", table_order)):
        if value is not None:
            details[label] = value
    return details


def _check_unicode(event: ChangeEvent) -> None:
    """Refuse lone surrogates (from JSON escapes): they cannot be stored or sent as UTF-8."""
    texts: list[object] = [event.transaction_id]
    for row in (event.before, event.after, event.source_details, event.primary_key):
        if row is not None:
            texts.extend(row.keys())
            texts.extend(row.values())
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise _Blocked(BlockReason.UNSUPPORTED_TYPE,
                               "text holds a lone surrogate, which is not valid Unicode") from None


# --- records that are not row changes -------------------------------------------------------


def _not_a_row_change(record: KafkaRecord, payload: dict[str, Any],
                      schema: _EnvelopeSchema | None) -> Skip:
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
        raise _Blocked(BlockReason.NOT_A_CHANGE_EVENT,
                       "a Kafka Connect source offset record, not a change event: the "
                       "connect-offsets topic must not be consumed")
    raise _Blocked(BlockReason.MALFORMED_ENVELOPE, "no op field: not a Debezium change event")


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
