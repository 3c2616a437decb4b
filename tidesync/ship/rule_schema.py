"""The ship's own tables as rule validation reads them: columns with declared types and primary
key, from the MySQL/MariaDB or SQLite business database of `[ship_target]`.

A connection is opened for each inspection and closed after: validation is rare.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pymysql

from tidesync.domain.column_kinds import column_type
from tidesync.ship.rules import SchemaUnavailable, TableColumns
from tidesync.target.mysql_schema import inspect_mysql_table
from tidesync.target.sqlite_schema import inspect_sqlite_table
from tidesync.target.table_state import TableState

_CONNECT_TIMEOUT = 10


def _columns(state: TableState) -> TableColumns | None:
    if not state.exists:
        return None
    return TableColumns({name: column_type(declared) for name, declared in state.columns.items()},
                        tuple(state.primary_key))


class MySQLSchemaSource:
    """Reads information_schema of the ship's MySQL/MariaDB."""

    def __init__(self, host: str, port: int, user: str, password: str) -> None:
        self.host, self.port, self.user, self.password = host, port, user, password

    def table(self, database: str, table: str) -> TableColumns | None:
        try:
            connection = pymysql.connect(host=self.host, port=self.port, user=self.user,
                                         password=self.password,
                                         connect_timeout=_CONNECT_TIMEOUT, read_timeout=60)
            try:
                with connection.cursor() as cursor:
                    return _columns(inspect_mysql_table(cursor, database, table))
            finally:
                connection.close()
        except pymysql.MySQLError as error:
            raise SchemaUnavailable(f"the ship's MySQL cannot be inspected: "
                                    f"{type(error).__name__}") from None


class SQLiteSchemaSource:
    """Reads a SQLite business file (its one database: the rule's database name is not used)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def table(self, database: str, table: str) -> TableColumns | None:
        try:
            connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                return _columns(inspect_sqlite_table(connection, table))
            finally:
                connection.close()
        except sqlite3.Error as error:
            raise SchemaUnavailable(f"the ship's SQLite file cannot be inspected: "
                                    f"{type(error).__name__}") from None
