"""The SQL text of the MySQL applier's compare-and-set statements, and reading back the row
counts of a multi-statement text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    METADATA_COLUMNS,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
    UPDATED_AT_COLUMN,
)
from tidesync.domain.values import JsonText, Value
from tidesync.target.cas import PlannedWrite
from tidesync.target.mysql_schema import mysql_quote
from tidesync.target.table_state import TableShape

_METADATA_SET = (f"{REVISION_COLUMN} = %s, {ORIGIN_COLUMN} = %s, {EVENT_ID_COLUMN} = %s,"
                 f" {UPDATED_AT_COLUMN} = %s")


def run_statements(cursor: Any, text: str, counts: list[int]) -> None:
    """Execute a multi-statement text, appending each statement's row count as it arrives."""
    cursor.execute(text)
    counts.append(cursor.rowcount)
    while cursor.nextset():
        counts.append(cursor.rowcount)


def touched_by(writes: Sequence[PlannedWrite], counts: Sequence[int]) -> list[bool]:
    """Per write whose statements all ran: whether its compare-and-set touched the row.

    A DELETE sends two statements (the mark, then the delete); its first count decides.
    """
    touched: list[bool] = []
    position = 0
    for write in writes:
        size = 2 if write.operation is Operation.DELETE else 1
        if position + size > len(counts):
            break
        touched.append(counts[position] == 1)
        position += size
    return touched


def statement_text(write: PlannedWrite) -> str:
    shape = write.shape
    if write.operation is Operation.UPDATE:
        assignments = "".join(f"{sql_name(column)} = %s, " for column in write.columns)
        assignments += "".join(f"{sql_name(column)} = {sql_name(column)}, "
                               for column in kept_stamps(shape, write.columns))
        return (f"UPDATE {sql_table(shape)} SET {assignments}{_METADATA_SET}"  # noqa: S608
                f" WHERE {key_match(shape)} AND {REVISION_COLUMN} = %s")
    if write.operation is Operation.DELETE:
        # Mark then delete (see cas.delete_mark): the UPDATE is the compare-and-set.
        return (f"UPDATE {sql_table(shape)} SET {_METADATA_SET}"  # noqa: S608
                f" WHERE {key_match(shape)} AND {REVISION_COLUMN} = %s;\n"
                f"DELETE FROM {sql_table(shape)} WHERE {key_match(shape)}"
                f" AND {EVENT_ID_COLUMN} = %s AND {REVISION_COLUMN} = %s")
    names = [*write.columns, REVISION_COLUMN, ORIGIN_COLUMN, EVENT_ID_COLUMN, UPDATED_AT_COLUMN]
    return (f"INSERT INTO {sql_table(shape)} ({', '.join(sql_name(n) for n in names)})"  # noqa: S608
            f" VALUES ({', '.join(['%s'] * len(names))})")


def kept_stamps(shape: TableShape, columns: Sequence[str]) -> list[str]:
    """`ON UPDATE CURRENT_TIMESTAMP` columns an UPDATE does not write: it sets them to
    themselves, so the server does not stamp them with its own clock. A replicated update that
    left such a column as it was (the source stamped it within the same second, or the source
    set it explicitly) must leave it as it is here too."""
    written = {column.lower() for column in (*columns, *METADATA_COLUMNS)}
    return sorted(column for column in shape.on_update if column.lower() not in written)


def set_statement_head(shape: TableShape, columns: tuple[str, ...]) -> str:
    """The set-based compare-and-set UPDATE of a column set (see
    `MySQLTargetApplier._update_as_set`), with `%(rows)s` for the derived table's rows and
    `%(moment)s` for the update time."""
    width = len(columns) + len(shape.primary_key)
    assignments = "".join(f"t.{sql_name(column)} = u.c{index}, "
                          for index, column in enumerate(columns))
    assignments += "".join(f"t.{sql_name(column)} = t.{sql_name(column)}, "
                           for column in kept_stamps(shape, columns))
    matches = " AND ".join(f"t.{sql_name(column)} = u.c{len(columns) + index}"
                           for index, column in enumerate(shape.primary_key))
    # The events drive the join and each finds its row by primary key: a scan of the table
    # (the optimizer's choice for a small one) would lock rows no event names.
    return (f"UPDATE (SELECT %(rows)s) AS u STRAIGHT_JOIN"  # noqa: S608
            f" {sql_table(shape)} AS t FORCE INDEX (PRIMARY)"
            f" ON {matches} AND t.{REVISION_COLUMN} = u.c{width}"
            f" SET {assignments}t.{REVISION_COLUMN} = u.c{width + 1},"
            f" t.{ORIGIN_COLUMN} = u.c{width + 2}, t.{EVENT_ID_COLUMN} = u.c{width + 3},"
            f" t.{UPDATED_AT_COLUMN} = %(moment)s")


_TEXT_LITERAL_TYPES = (str, JsonText, dt.datetime, dt.date, dt.time)


def literal_kind(value: Value) -> str:
    """How a value's SQL literal is typed: "null", "number" (an integer), "text" (a quoted
    string in the connection's character set) or "other" (binary, float, decimal, bits)."""
    if value is None:
        return "null"
    if isinstance(value, bool | int):
        return "number"
    if isinstance(value, _TEXT_LITERAL_TYPES):
        return "text"
    return "other"


def sql_name(column: str) -> str:
    # pymysql formats statements with %, so a literal % in a name must be doubled.
    return mysql_quote(column).replace("%", "%%")


def sql_table(shape: TableShape) -> str:
    return f"{sql_name(shape.database)}.{sql_name(shape.table)}"


def key_match(shape: TableShape) -> str:
    return " AND ".join(f"{sql_name(column)} = %s" for column in shape.primary_key)


def _revision_param(shape: TableShape, revision: Revision) -> object:
    return revision.value if shape.revision_as_bytes else revision.text
