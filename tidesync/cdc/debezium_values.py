"""Debezium column values → domain Values, by Kafka Connect field schema or by MySQL column type.

A codec per column is built once per schema (or column-types mapping) and reused for every row.
"""

from __future__ import annotations

import binascii
import datetime as dt
import decimal
import enum
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, TypeAlias

from tidesync.cdc.column_types import MySQLColumnType
from tidesync.cdc.outcomes import BadValue, BlockReason
from tidesync.cdc.strict_json import JSON_ERRORS, NOT_FAST, STRICT_JSON, fast_json, json_kind
from tidesync.domain.values import BitString, JsonText, Value


class DecimalHandling(enum.StrEnum):
    """How payload-only records carry DECIMAL columns (Debezium `decimal.handling.mode`)."""

    PRECISE = "precise"
    STRING = "string"


Decoder: TypeAlias = Callable[[Any], Value]
ColumnCodec: TypeAlias = tuple[type | None, Decoder]
"""(the Python type a JSON value may already have to be taken as is, the full decoder)."""

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_DAY_MICROS = 86_400_000_000
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_MAX_SCALE = 1000
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_SCALEB_MAX_BYTES = 1024
"""Longer unscaled bytes keep the text path, whose integer text limit they may reach."""


def _mismatch(expected: str, raw: object) -> BadValue:
    return BadValue(BlockReason.UNSUPPORTED_TYPE,
                    f"expected {expected}, got a JSON {json_kind(raw)}")


def _as_int(raw: Any) -> int:
    if type(raw) is int:
        return raw
    raise _mismatch("an integer", raw)


def _as_float(raw: Any) -> float:
    if type(raw) is float:
        if raw - raw == 0.0:  # finite: JSON like 1e400 overflows to inf
            return raw
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "floating-point value out of range")
    if type(raw) is int:
        try:
            return float(raw)
        except OverflowError:
            raise BadValue(BlockReason.UNSUPPORTED_TYPE, "number out of range") from None
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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "value is not valid base64") from None


def _as_unsigned(raw: Any) -> int:
    value = _as_int(raw)
    if value < 0:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                       "negative BIGINT UNSIGNED value: bigint.unsigned.handling.mode=long "
                       "overflowed; use precise")
    return value


def _unscaled_decimal(data: bytes, scale: int) -> Decimal:
    if not data:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "empty DECIMAL bytes")
    unscaled = int.from_bytes(data, "big", signed=True)
    if len(data) <= _SCALEB_MAX_BYTES:
        # Under a context that cannot round, DECIMAL(65,30) stays exact: the same Decimal as
        # from the text below, for half its cost.
        return Decimal(unscaled).scaleb(-scale, _EXACT)
    # From text, so no context precision applies (and the integer's text limit holds).
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


def _imprecise_decimal() -> BadValue:
    return BadValue(BlockReason.IMPRECISE_DECIMAL,
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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "DECIMAL scale is not a usable integer")
    return scale


def _date_from_days(raw: Any) -> dt.date:
    try:
        return dt.date.fromordinal(_EPOCH_ORDINAL + _as_int(raw))
    except (ValueError, OverflowError):
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "DATE out of range") from None


def _time_from_micros(micros: int) -> dt.time:
    if not 0 <= micros < _DAY_MICROS:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "sub-microsecond time cannot be kept")
    return micros


def _time_nanos(raw: Any) -> dt.time:
    return _time_from_micros(_whole_micros(_as_int(raw)))


def _moment_from_micros(micros: int) -> dt.datetime:
    try:
        return EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, "timestamp out of range") from None


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
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                       "not an ISO-8601 timestamp with a zone") from None


def _json_text(raw: Any) -> JsonText:
    text = _as_str(raw)
    if fast_json(text) is NOT_FAST:
        try:
            STRICT_JSON.decode(text)
        except JSON_ERRORS:
            raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                           "JSON column holds invalid JSON") from None
    return JsonText(text)


def _bits(length: int) -> Decoder:
    """BIT(n): little-endian bytes (SEMANTICS.md §5)."""
    if not 1 <= length <= 64:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE, f"BIT length {length} is not 1..64")

    def decode(raw: Any) -> BitString:
        try:
            return BitString(length, int.from_bytes(_as_bytes(raw), "little"))
        except ValueError:
            raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                           f"value does not fit in BIT({length})") from None

    return decode


def _parameter(field: Mapping[str, Any], name: str) -> Any:
    parameters = field.get("parameters")
    return parameters.get(name) if isinstance(parameters, dict) else None


def _decimal_field(field: Mapping[str, Any]) -> ColumnCodec:
    scale = _parameter(field, "scale")
    if scale is None:
        raise BadValue(BlockReason.DECIMAL_SCALE_MISSING,
                       "Decimal schema has no parameters.scale")
    return None, _decimal_from_bytes(_scale_number(scale))


def _bits_field(field: Mapping[str, Any]) -> ColumnCodec:
    length = _parameter(field, "length")
    if type(length) is str and length.isascii() and length.isdigit() and len(length) < 4:
        return None, _bits(int(length))
    raise BadValue(BlockReason.UNSUPPORTED_TYPE, "Bits schema has no usable parameters.length")


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


def schema_codec(field: Mapping[str, Any], mysql: MySQLColumnType | None) -> ColumnCodec:
    """The codec of one column described by its Kafka Connect field schema."""
    connect_type, logical = field.get("type"), field.get("name")
    if mysql is not None:
        codec = _codec_from_both(connect_type, logical, mysql)
        if codec is not None:
            return codec
    if logical is not None:
        entry = _LOGICAL.get(logical) if isinstance(logical, str) else None
        if entry is None:
            raise BadValue(BlockReason.UNSUPPORTED_TYPE, f"unknown logical type {logical!r}")
        connect_types, factory = entry
        if connect_type not in connect_types:
            raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                           f"logical type {logical} on Kafka Connect type {connect_type!r}")
        return factory(field)
    codec = _CONNECT.get(connect_type) if isinstance(connect_type, str) else None
    if codec is None:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
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


def _unsupported_mysql(kind: str) -> BadValue:
    return BadValue(BlockReason.UNSUPPORTED_TYPE, f"MySQL type {kind} is not supported")


def mysql_codec(mysql: MySQLColumnType, handling: DecimalHandling | None) -> ColumnCodec:
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
