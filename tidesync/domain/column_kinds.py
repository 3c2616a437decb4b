"""What a declared column type means for values: a kind and, where it matters, a size.

Read from MySQL/MariaDB and SQLite declarations alike ("decimal(12,2)", "tinyint(1)", "bit(8)").
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class ColumnKind(enum.Enum):
    BOOL = "bool"
    INTEGER = "integer"
    FLOAT = "float"
    DECIMAL = "decimal"
    TEXT = "text"
    BYTES = "bytes"
    DATETIME = "datetime"
    DATE = "date"
    TIME = "time"
    JSON = "json"
    BITS = "bits"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ColumnType:
    """What a declared column type means for values: its kind and, where it matters, a size
    (the scale of a DECIMAL, the length of a BIT)."""

    kind: ColumnKind
    size: int | None = None


_DECLARED = re.compile(r"\s*([a-z]+(?: precision)?)\s*(?:\(([^)]*)\))?.*", re.DOTALL)
_KIND_OF_BASE: dict[str, ColumnKind] = {
    **dict.fromkeys(("bool", "boolean"), ColumnKind.BOOL),
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"),
                    ColumnKind.INTEGER),
    **dict.fromkeys(("float", "double", "real", "double precision"), ColumnKind.FLOAT),
    **dict.fromkeys(("decimal", "numeric", "dec", "fixed"), ColumnKind.DECIMAL),
    **dict.fromkeys(("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum",
                     "set", "nchar", "nvarchar", "clob", "character"), ColumnKind.TEXT),
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"),
                    ColumnKind.BYTES),
    **dict.fromkeys(("datetime", "timestamp"), ColumnKind.DATETIME),
    "date": ColumnKind.DATE,
    "time": ColumnKind.TIME,
    "json": ColumnKind.JSON,
    "bit": ColumnKind.BITS,
}


def column_type(declared: str) -> ColumnType:
    """The meaning of a declared type ("decimal(12,2)", "tinyint(1)", "bit(8)", "DATETIME(6)")."""
    match = _DECLARED.fullmatch(declared.lower())
    if match is None:
        return ColumnType(ColumnKind.OTHER)
    base, arguments = match.group(1), (match.group(2) or "").replace(" ", "")
    kind = _KIND_OF_BASE.get(base, ColumnKind.OTHER)
    numbers = [int(part) for part in arguments.split(",") if part.isdigit()]
    if base == "tinyint" and arguments == "1":
        return ColumnType(ColumnKind.BOOL)
    if kind is ColumnKind.BITS:
        length = numbers[0] if numbers else 1
        return ColumnType(ColumnKind.BOOL) if length == 1 else ColumnType(kind, length)
    if kind is ColumnKind.DECIMAL:
        if base in ("decimal", "dec", "fixed") or numbers:
            return ColumnType(kind, numbers[1] if len(numbers) > 1 else 0)
        return ColumnType(kind)  # SQLite's bare NUMERIC: no declared scale
    return ColumnType(kind)
