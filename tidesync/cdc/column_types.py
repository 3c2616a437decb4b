"""The MySQL column types of the ship's tables, as the Debezium normalizer needs them.

Payload-only records carry no schema, so their columns decode from these types; records with
schemas use them to keep TINYINT(1), DECIMAL and BIGINT UNSIGNED columns consistent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from tidesync.domain.errors import ErrorCode, TidesyncError


class ColumnTypeSource(Protocol):
    """Answers the MySQL column types (information_schema COLUMN_TYPE text) of one table."""

    def column_types(self, database: str, table: str) -> Mapping[str, str] | None:
        """Column name → type such as "decimal(10,2)", or None when the table is unknown.

        Return the same mapping object until the table's types change: callers cache
        decoders per mapping identity.
        """
        ...


class ColumnTypesError(TidesyncError, ValueError):
    """A column types document that cannot be used (unreadable, not JSON, wrong shape)."""

    code = ErrorCode.SCHEMA_INVALID


class InMemoryColumnTypes:
    """Column types held in memory, e.g. loaded from `{"db.table": {"col": "type"}}`."""

    def __init__(self, tables: Mapping[tuple[str, str], Mapping[str, str]] | None = None) -> None:
        self._tables: dict[tuple[str, str], Mapping[str, str]] = {}
        for (database, table), columns in (tables or {}).items():
            self.set_table(database, table, columns)

    def column_types(self, database: str, table: str) -> Mapping[str, str] | None:
        return self._tables.get((database, table))

    def set_table(self, database: str, table: str, columns: Mapping[str, str]) -> None:
        """Replace one table's types (a new mapping object, so cached decoders are rebuilt)."""
        self._tables[(database, table)] = MappingProxyType(dict(columns))

    @classmethod
    def from_json(cls, document: object) -> InMemoryColumnTypes:
        """From `{"db.table": {"column": "mysql type", ...}, ...}`."""
        if not isinstance(document, dict):
            raise ColumnTypesError('column types must be a JSON object {"db.table": {...}}')
        tables: dict[tuple[str, str], Mapping[str, str]] = {}
        for qualified, columns in document.items():
            database, dot, table = qualified.partition(".")
            if not (dot and database and table):
                raise ColumnTypesError(f"table name {qualified!r} is not of the form db.table")
            if not isinstance(columns, dict) or not all(
                isinstance(kind, str) for kind in columns.values()
            ):
                raise ColumnTypesError(f"{qualified}: columns must map names to type strings")
            tables[(database, table)] = columns
        return cls(tables)

    @classmethod
    def from_json_file(cls, path: str | Path) -> InMemoryColumnTypes:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ColumnTypesError(f"cannot read column types file {path}: {error}") from error
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ColumnTypesError(f"column types file {path} is not JSON: {error}") from error
        return cls.from_json(document)


_TYPE_TEXT = re.compile(
    r"\s*(?P<base>[a-z]+(?: precision)?)\s*(?:\((?P<arguments>.*)\))?"
    r"(?P<flags>(?:\s+(?:unsigned|signed|zerofill))*)\s*",
    re.DOTALL,
)
_BOOLEAN_BASES = frozenset({"bool", "boolean"})
_DECIMAL_BASES = frozenset({"decimal", "numeric", "dec", "fixed"})


@dataclass(frozen=True, slots=True)
class MySQLColumnType:
    """A parsed COLUMN_TYPE: base name, the raw text inside the parentheses, unsigned flag."""

    base: str
    arguments: str | None
    unsigned: bool

    @classmethod
    def parse(cls, text: str) -> MySQLColumnType:
        match = _TYPE_TEXT.fullmatch(text.lower())
        if match is None:
            raise ValueError(f"not a MySQL column type: {text!r}")
        arguments = match["arguments"]
        return cls(match["base"], arguments.strip() if arguments is not None else None,
                   "unsigned" in match["flags"])

    def numbers(self) -> tuple[int, ...]:
        """The numeric arguments, e.g. (10, 2) for decimal(10,2); () when there are none."""
        if not self.arguments:
            return ()
        try:
            return tuple(int(part) for part in self.arguments.split(","))
        except ValueError:
            raise ValueError(f"{self.base} arguments are not numbers") from None

    @property
    def is_boolean(self) -> bool:
        """TINYINT(1) and its aliases: Debezium emits them as int16 0/1 or as boolean."""
        return self.base in _BOOLEAN_BASES or (self.base == "tinyint" and self.arguments == "1")

    @property
    def is_decimal(self) -> bool:
        return self.base in _DECIMAL_BASES

    def decimal_scale(self) -> int:
        """The scale of a DECIMAL(p,s) column; MySQL's default scale is 0."""
        numbers = self.numbers()
        return numbers[1] if len(numbers) > 1 else 0

    def fractional_digits(self) -> int:
        """The fsp of DATETIME(fsp)/TIME(fsp)/TIMESTAMP(fsp); 0 when absent."""
        numbers = self.numbers()
        return numbers[0] if numbers else 0
