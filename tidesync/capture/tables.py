"""Captured MySQL tables: their definitions from information_schema and binlog values as Values.

Binlog capture reads column types, nullability and primary key order from the ship database and
turns each decoded binlog value into the exact Value the envelope writer expects, or refuses.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tidesync.capture.envelope_writer import ColumnDefinition, TableDefinition, column_schema
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.domain.values import BitString, JsonText, Value
from tidesync.target.mysql_schema import mariadb_json_columns

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_DAY = dt.timedelta(days=1)

# pymysqlreplication reports why a value came out as None; these two mean "not NULL".
_EMPTY_SET = "empty set"
_ZERO_DATES = frozenset({"out of date range", "out of datetime range", "out of datetime2 range"})

BinlogConverter = Callable[[Any, str | None], Value]
"""(decoded binlog value, why it is None if it is) → Value."""


# --- definitions from information_schema ---------------------------------------------------


def load_mysql_table(cursor: Any, database: str, table: str) -> TableDefinition | None:
    """The table as information_schema describes it now, or None if it does not exist.

    Raises CaptureError when the table has no primary key or a column tidesync cannot map.
    """
    cursor.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    rows = [(str(name), str(kind), str(data_type).lower(), str(nullable) == "YES")
            for name, kind, data_type, nullable in cursor.fetchall()]
    if not rows:
        return None
    json_columns = (mariadb_json_columns(cursor, database, table)
                    if any(data_type == "longtext" for _, _, data_type, _ in rows) else set())
    columns = tuple(
        mysql_column(database, table, name, "json" if name in json_columns else kind, nullable)
        for name, kind, _, nullable in rows
    )
    cursor.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
    )
    primary_key = tuple(str(name) for (name,) in cursor.fetchall())
    if not primary_key:
        raise CaptureError(CaptureErrorReason.NO_PRIMARY_KEY,
                           f"table {database}.{table} has no primary key: it cannot be captured "
                           "(list the tables to capture in capture.tables)")
    return TableDefinition(database, table, columns, primary_key)


def mysql_column(database: str, table: str, name: str, column_type: str,
                 nullable: bool) -> ColumnDefinition:
    """One column from its COLUMN_TYPE text, refused unless the envelope writer can encode it."""
    try:
        column = ColumnDefinition.parse(name, column_type, nullable=nullable)
        column_schema(column)
    except ValueError:
        raise CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                           f"column {database}.{table}.{name} has type {column_type}, which "
                           "has no Debezium encoding here") from None
    return column




# --- the binlog's own column description ---------------------------------------------------

_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"})
_BINARIES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_STRINGS = _TEXTS | _BINARIES
_FRACTIONAL = frozenset({17, 18, 19})  # TIMESTAMP2, DATETIME2, TIME2 carry their fsp
_BINLOG_KINDS: dict[int, frozenset[str]] = {
    1: frozenset({"tinyint"}), 2: frozenset({"smallint"}), 9: frozenset({"mediumint"}),
    3: frozenset({"int", "integer"}), 8: frozenset({"bigint"}), 4: frozenset({"float"}),
    5: frozenset({"double", "real"}), 246: frozenset({"decimal", "numeric"}),
    15: _STRINGS, 253: _STRINGS, 254: _STRINGS, 249: _STRINGS, 250: _STRINGS, 251: _STRINGS,
    252: _STRINGS, 245: frozenset({"json"}),
    10: frozenset({"date"}), 14: frozenset({"date"}), 12: frozenset({"datetime"}),
    18: frozenset({"datetime"}), 7: frozenset({"timestamp"}), 17: frozenset({"timestamp"}),
    11: frozenset({"time"}), 19: frozenset({"time"}), 13: frozenset({"year"}),
    16: frozenset({"bit"}), 247: frozenset({"enum"}), 248: frozenset({"set"}),
}


def binlog_type_matches(column: ColumnDefinition, binlog: Any) -> bool:
    """Whether a binlog column (mysql-replication's Column, from the table map event with
    full row metadata) has the type `column` describes, so its values mean the same."""
    kind = column.data_type
    if kind not in _BINLOG_KINDS.get(int(binlog.type), frozenset()):
        return False
    if kind in _INTEGERS:
        return bool(binlog.unsigned) == column.unsigned
    if kind in ("decimal", "numeric"):
        return bool((binlog.precision, binlog.decimals) == (column.precision, column.scale or 0))
    if kind in ("datetime", "timestamp", "time") and int(binlog.type) in _FRACTIONAL:
        return int(binlog.fsp) == column.fsp
    if kind == "bit":
        return int(binlog.bits) == (column.length or 1)
    if kind == "enum":
        return list(binlog.enum_values or [""])[1:] == list(column.allowed)
    if kind == "set":
        return list(binlog.set_values or []) == list(column.allowed)
    if kind in _STRINGS and kind != "json" and binlog.character_set_name is not None:
        return bool((binlog.character_set_name == "binary") == (kind in _BINARIES))
    return True


def definition_for_binlog(current: TableDefinition, binlog_columns: Sequence[Any]
                          ) -> TableDefinition:
    """The definition that maps rows of a table map event: the current one when the event has
    exactly its columns, else (rows written before a later schema change, e.g. a column
    added since) the current columns the event has, by name, if every one of them has the
    same type in the binlog. Anything else cannot be mapped without guessing."""
    by_name = {column.name: column for column in current.columns}
    names = [str(column.name) for column in binlog_columns]
    unknown = [name for name in names if name not in by_name]
    changed = [name for name, binlog in zip(names, binlog_columns, strict=True)
               if name in by_name and not binlog_type_matches(by_name[name], binlog)]
    missing_key = [name for name in current.primary_key if name not in names]
    if unknown or changed or missing_key:
        problems = [f"{label}: {', '.join(found)}" for label, found in (
            ("no longer in the table", unknown), ("type changed since", changed),
            ("primary key columns missing", missing_key)) if found]
        raise CaptureError(
            CaptureErrorReason.SCHEMA_MISMATCH,
            f"binlog rows of {current.database}.{current.table} were written before a schema "
            f"change capture has not seen ({'; '.join(problems)}): they cannot be mapped "
            "without guessing; keep capture running across schema changes",
        )
    if tuple(names) == tuple(by_name):
        return current
    return TableDefinition(current.database, current.table,
                           tuple(by_name[name] for name in names), current.primary_key)


# --- binlog values -------------------------------------------------------------------------


class BinlogRowDecoder:
    """Turns the value dicts mysql-replication decodes into rows of exact Values, per table."""

    __slots__ = ("converters", "names", "table")

    def __init__(self, table: TableDefinition) -> None:
        self.table = table
        self.names = tuple(column.name for column in table.columns)
        self.converters = tuple(
            (column.name, binlog_converter(table, column)) for column in table.columns
        )

    def row(self, values: Mapping[str, Any], none_sources: Mapping[str, str]) -> dict[str, Value]:
        row: dict[str, Value] = {}
        for name, convert in self.converters:
            raw = values[name]
            row[name] = convert(raw, none_sources.get(name) if raw is None else None)
        return row


def binlog_converter(table: TableDefinition, column: ColumnDefinition) -> BinlogConverter:
    """The converter of one column's binlog values."""
    kind = column.data_type
    build = _CONVERTERS.get(kind)
    if build is None:
        raise CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                           f"column {table.database}.{table.table}.{column.name} has type "
                           f"{kind}, which binlog capture cannot map")
    convert = build(column)

    def converted(raw: Any, none_source: str | None) -> Value:
        if raw is None:
            return _none_value(column, none_source)
        try:
            value: Value = convert(raw)
            return value
        except (TypeError, ValueError):
            raise CaptureError(
                CaptureErrorReason.UNMAPPABLE_COLUMN,
                f"column {table.database}.{table.table}.{column.name} ({kind}): a binlog value "
                f"of type {type(raw).__name__} does not fit; did the column change type?",
            ) from None

    return converted


def _none_value(column: ColumnDefinition, none_source: str | None) -> Value:
    # Debezium: an empty SET is "", a zero date is NULL if the column allows it, else the epoch.
    if none_source == _EMPTY_SET:
        return ""
    if none_source in _ZERO_DATES and not column.nullable:
        return _EPOCH_DATE if column.data_type == "date" else _EPOCH
    return None


def _require(raw: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(raw, kind) or (isinstance(raw, bool) and kind is int):
        raise TypeError("unexpected binlog value type")
    return raw


def _integer(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: _require(raw, int)


def _float32(column: ColumnDefinition) -> Callable[[Any], Value]:
    def convert(raw: Any) -> Value:
        return shortest_float32(float(_require(raw, (float, int))))

    return convert


def shortest_float32(value: float) -> float:
    """A FLOAT column's value as the shortest decimal that is the same float32 (as Java's
    Float.toString, which Debezium's JSON converter writes), not its widened double."""
    packed = struct.pack("<f", value)
    for digits in range(6, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value


def _double(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: float(_require(raw, (float, int)))


def _decimal(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: _require(raw, Decimal)


def _text(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: _require(raw, str)


def _binary(column: ColumnDefinition) -> Callable[[Any], Value]:
    # BINARY(n) is zero-padded to n bytes; the binlog leaves the trailing zeros out.
    length = column.length or 1

    def convert(raw: Any) -> Value:
        data: bytes = _require(raw, bytes)
        return data.ljust(length, b"\0")

    return convert


def _bytes(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: bytes(_require(raw, (bytes, bytearray)))


def _json(column: ColumnDefinition) -> Callable[[Any], Value]:
    def convert(raw: Any) -> Value:
        if isinstance(raw, str):
            return JsonText(raw)  # MariaDB: the document text as stored
        # MySQL's binary JSON arrives decoded; write it back in MySQL's own text layout.
        return JsonText(json.dumps(_plain_json(raw), ensure_ascii=False))

    return convert


def _plain_json(raw: Any) -> Any:
    if isinstance(raw, bytes):
        return raw.decode("utf-8")
    if isinstance(raw, dict):
        return {_plain_json(key): _plain_json(value) for key, value in raw.items()}
    if isinstance(raw, list):
        return [_plain_json(item) for item in raw]
    if raw is None or isinstance(raw, bool | int | float | str):
        return raw
    raise TypeError("unexpected JSON value type")


def _date(column: ColumnDefinition) -> Callable[[Any], Value]:
    def convert(raw: Any) -> Value:
        if isinstance(raw, dt.datetime):
            raise TypeError("a datetime where a date belongs")
        day: dt.date = _require(raw, dt.date)
        return day

    return convert


def _datetime(column: ColumnDefinition) -> Callable[[Any], Value]:
    # DATETIME is a wall-clock value, read as UTC (as Debezium does); TIMESTAMP arrives as the
    # UTC moment it stores (mysql-replication decodes it with utcfromtimestamp).
    def convert(raw: Any) -> Value:
        moment: dt.datetime = _require(raw, dt.datetime)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC)

    return convert


def _time(column: ColumnDefinition) -> Callable[[Any], Value]:
    def convert(raw: Any) -> Value:
        span: dt.timedelta = _require(raw, dt.timedelta)
        if not dt.timedelta(0) <= span < _DAY:
            raise ValueError("TIME outside 00:00:00..23:59:59.999999")
        return (dt.datetime.min + span).time()

    return convert


def _enum(column: ColumnDefinition) -> Callable[[Any], Value]:
    return lambda raw: _require(raw, str)


def _set(column: ColumnDefinition) -> Callable[[Any], Value]:
    members = column.allowed

    def convert(raw: Any) -> Value:
        chosen: set[str] = _require(raw, (set, frozenset))
        if not chosen <= set(members):
            raise ValueError("SET member outside the column's list")
        return ",".join(member for member in members if member in chosen)

    return convert


def _bit(column: ColumnDefinition) -> Callable[[Any], Value]:
    length = column.length or 1

    def convert(raw: Any) -> Value:
        text: str = _require(raw, str)
        bits = int(text, 2)
        return bool(bits) if length == 1 else BitString(length, bits)

    return convert


_CONVERTERS: dict[str, Callable[[ColumnDefinition], Callable[[Any], Value]]] = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"),
                    _integer),
    "float": _float32,
    **dict.fromkeys(("double", "real"), _double),
    **dict.fromkeys(("decimal", "numeric"), _decimal),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"), _text),
    "binary": _binary,
    **dict.fromkeys(("varbinary", "tinyblob", "blob", "mediumblob", "longblob"), _bytes),
    "json": _json,
    "date": _date,
    **dict.fromkeys(("datetime", "timestamp"), _datetime),
    "time": _time,
    "enum": _enum,
    "set": _set,
    "bit": _bit,
}
