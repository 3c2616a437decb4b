"""MySQL/MariaDB driver errors → our target errors: the one place pymysql errors are mapped.

Transient, commit-outcome-unknown, rejected (the event can never apply as is) or unexpected.
"""

from __future__ import annotations

import re

import pymysql

from tidesync.target.cas import DuplicatePrimaryKey, ForeignKeyViolation, StatementRejected
from tidesync.target.contract import (
    CommitOutcomeUnknown,
    RejectReason,
    TargetError,
    TransientTargetError,
)

_TRANSIENT: dict[int, str] = {
    1205: "LOCK_WAIT_TIMEOUT", 1213: "DEADLOCK", 1614: "DEADLOCK", 1637: "TOO_MANY_TRANSACTIONS",
    1040: "TOO_MANY_CONNECTIONS", 1203: "TOO_MANY_CONNECTIONS", 1226: "RESOURCE_LIMIT",
    1041: "OUT_OF_MEMORY", 1021: "DISK_FULL", 1114: "TABLE_FULL",
    1290: "READ_ONLY", 1792: "READ_ONLY", 1836: "READ_ONLY",
    1317: "QUERY_INTERRUPTED", 1969: "STATEMENT_TIMEOUT", 3024: "STATEMENT_TIMEOUT",
    1044: "ACCESS_DENIED", 1045: "ACCESS_DENIED", 1142: "ACCESS_DENIED", 1143: "ACCESS_DENIED",
    1227: "ACCESS_DENIED", 1158: "NETWORK_ERROR", 1159: "NETWORK_ERROR", 1160: "NETWORK_ERROR",
    1161: "NETWORK_ERROR", 2002: "CANNOT_CONNECT", 2003: "CANNOT_CONNECT",
}
_CONNECTION_LOST: dict[int, str] = {
    0: "CONNECTION_LOST", 2006: "SERVER_GONE", 2013: "CONNECTION_LOST", 2055: "CONNECTION_LOST",
    1053: "SERVER_SHUTDOWN", 1927: "CONNECTION_KILLED", 4031: "IDLE_TRANSACTION_TIMEOUT",
}
_REJECTED: dict[int, RejectReason] = {
    1049: RejectReason.UNKNOWN_DATABASE, 1146: RejectReason.UNKNOWN_TABLE,
    1054: RejectReason.UNKNOWN_COLUMN, 1406: RejectReason.DATA_TOO_LONG,
    1264: RejectReason.VALUE_OUT_OF_RANGE, 1690: RejectReason.VALUE_OUT_OF_RANGE,
    1366: RejectReason.INVALID_VALUE, 1292: RejectReason.INVALID_VALUE,
    1265: RejectReason.INVALID_VALUE, 1367: RejectReason.INVALID_VALUE,
    1411: RejectReason.INVALID_VALUE, 3140: RejectReason.INVALID_VALUE,
    1048: RejectReason.CONSTRAINT_VIOLATION, 4025: RejectReason.CONSTRAINT_VIOLATION,
    3819: RejectReason.CONSTRAINT_VIOLATION, 1364: RejectReason.MISSING_VALUE,
    3105: RejectReason.GENERATED_COLUMN, 1906: RejectReason.GENERATED_COLUMN,
    1153: RejectReason.PACKET_TOO_LARGE, 1301: RejectReason.PACKET_TOO_LARGE,
}
_FOREIGN_KEY = frozenset({1451, 1452, 1216, 1217})
"""A row refers to a missing parent (1452, 1216), or a parent still has children (1451, 1217):
the other row may only be late (see ForeignKeyViolation)."""
_SERVER_FAULTS = frozenset({
    1015, 1016, 1017, 1018, 1030, 1036, 1037, 1038, 1180, 1181, 1194, 1195, 1197, 1874, 1878,
})
"""Storage, memory and file faults of the server: never an event's own fault, even when its
statement meets them (the chunk retries, then waits DEAD for an operator)."""
_DUPLICATE_KEY = (1062, 1586)
# The last quoted name after "column"/"Field": values come earlier in these messages.
_COLUMN_IN_MESSAGE = re.compile(
    r"(?:column|Column|Field) (?:`(?:[^`]|``)*`\.)*[`']((?:[^`']|``){1,64})[`']")
_KEY_IN_MESSAGE = re.compile(r"for key '([^']{1,129})'\s*$")


def map_mysql_error(error: pymysql.MySQLError, *, during_commit: bool = False,
                    in_statement: bool = False) -> Exception:
    """Our error for a pymysql error: TransientTargetError, CommitOutcomeUnknown (a connection
    lost while COMMIT was in flight), StatementRejected (the event can never apply as is),
    DuplicatePrimaryKey, or TargetError for anything unexpected.

    `in_statement`: the error answered an event's own statement, so an error number not
    named here is that event's (REJECTED as DATABASE_REFUSED), not the chunk's.

    Messages never copy the server's text, which can quote column values.
    """
    number = error.args[0] if error.args and isinstance(error.args[0], int) else -1
    if number in _CONNECTION_LOST:
        if during_commit:
            return CommitOutcomeUnknown(_CONNECTION_LOST[number],
                                        f"MySQL error {number} during COMMIT")
        return TransientTargetError(_CONNECTION_LOST[number], f"MySQL error {number}")
    if number in _TRANSIENT:
        return TransientTargetError(_TRANSIENT[number], f"MySQL error {number}")
    if during_commit:
        return CommitOutcomeUnknown("COMMIT_FAILED", f"MySQL error {number} during COMMIT")
    message = str(error.args[1]) if len(error.args) > 1 else ""
    if number in _DUPLICATE_KEY:
        key = _KEY_IN_MESSAGE.search(message)
        index = key.group(1).rsplit(".", 1)[-1] if key else "?"
        if index == "PRIMARY":
            return DuplicatePrimaryKey()
        return StatementRejected(RejectReason.DUPLICATE_UNIQUE_KEY,
                                 f"duplicate value in unique index {index}")
    if number in _FOREIGN_KEY:
        return ForeignKeyViolation(f"MySQL error {number} (a foreign key)")
    if number in _REJECTED:
        columns = _COLUMN_IN_MESSAGE.findall(message)
        where = f" (column {columns[-1]})" if columns else ""
        return StatementRejected(_REJECTED[number], f"MySQL error {number}{where}")
    if in_statement and isinstance(error, pymysql.DatabaseError) and (
            number not in _SERVER_FAULTS):
        return StatementRejected(RejectReason.DATABASE_REFUSED, f"MySQL error {number}")
    return TargetError("DATABASE_ERROR", f"MySQL error {number} ({type(error).__name__})")
