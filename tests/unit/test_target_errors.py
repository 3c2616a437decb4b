"""How driver errors map to the target's errors and reject reasons.

A connection really lost in the middle of COMMIT cannot be provoked reliably, so the
CommitOutcomeUnknown mapping is checked here on the driver's exception objects; the real
`applied_event_ids` answer after a commit is tested against MariaDB in
tests/integration/test_target_mysql.py.
"""

from __future__ import annotations

import sqlite3

import pymysql
import pytest

from tidesync.domain.column_kinds import ColumnKind, column_type
from tidesync.target.cas import DuplicatePrimaryKey, ForeignKeyViolation, StatementRejected
from tidesync.target.contract import (
    CommitOutcomeUnknown,
    RejectReason,
    TargetError,
    TransientTargetError,
)
from tidesync.target.mysql_errors import map_mysql_error
from tidesync.target.sqlite import map_sqlite_error
from tidesync.target.table_state import trigger_names

err = pymysql.err


@pytest.mark.parametrize(("error", "reason"), [
    (err.OperationalError(1213, "Deadlock found"), "DEADLOCK"),
    (err.OperationalError(1205, "Lock wait timeout exceeded"), "LOCK_WAIT_TIMEOUT"),
    (err.OperationalError(2006, "MySQL server has gone away"), "SERVER_GONE"),
    (err.OperationalError(2013, "Lost connection"), "CONNECTION_LOST"),
    (err.OperationalError(2055, "Lost connection"), "CONNECTION_LOST"),
    (err.OperationalError(1053, "Server shutdown in progress"), "SERVER_SHUTDOWN"),
    (err.OperationalError(1040, "Too many connections"), "TOO_MANY_CONNECTIONS"),
    (err.InterfaceError(0, ""), "CONNECTION_LOST"),
])
def test_transient_errors(error, reason):
    mapped = map_mysql_error(error)
    assert isinstance(mapped, TransientTargetError) and mapped.reason_code == reason


@pytest.mark.parametrize("number", [2006, 2013, 2055, 1053, 0])
def test_a_connection_lost_during_commit_is_an_unknown_outcome(number):
    error = (err.InterfaceError if number == 0 else err.OperationalError)(number, "x")
    assert isinstance(map_mysql_error(error, during_commit=True), CommitOutcomeUnknown)


def test_a_deadlock_at_commit_rolled_back_and_is_transient():
    mapped = map_mysql_error(err.OperationalError(1213, "x"), during_commit=True)
    assert type(mapped) is TransientTargetError


@pytest.mark.parametrize(("error", "reason", "column"), [
    (err.DataError(1406, "Data too long for column 'name' at row 1"),
     RejectReason.DATA_TOO_LONG, "name"),
    (err.DataError(1264, "Out of range value for column 'qty' at row 1"),
     RejectReason.VALUE_OUT_OF_RANGE, "qty"),
    (err.OperationalError(1292, "Incorrect time value: 'column `a`.`b`.`c` at row'"
                                " for column `db`.`t`.`tm` at row 1"),
     RejectReason.INVALID_VALUE, "tm"),
    (err.OperationalError(1366, "Incorrect integer value: 'secret' for column `d`.`t`.`n`"
                                " at row 1"), RejectReason.INVALID_VALUE, "n"),
    (err.ProgrammingError(1146, "Table 'x.nope' doesn't exist"), RejectReason.UNKNOWN_TABLE, ""),
    (err.OperationalError(1054, "Unknown column 'colour' in 'INSERT INTO'"),
     RejectReason.UNKNOWN_COLUMN, "colour"),
    (err.IntegrityError(1452, "Cannot add or update a child row"),
     RejectReason.CONSTRAINT_VIOLATION, ""),
    (err.IntegrityError(1451, "Cannot delete or update a parent row"),
     RejectReason.CONSTRAINT_VIOLATION, ""),
    (err.IntegrityError(1062, "Duplicate entry 'secret' for key 'code'"),
     RejectReason.DUPLICATE_UNIQUE_KEY, ""),
])
def test_permanent_errors_are_rejections_without_values(error, reason, column):
    mapped = map_mysql_error(error)
    assert isinstance(mapped, StatementRejected) and mapped.reason == reason
    assert "secret" not in mapped.detail
    assert (f"(column {column})" in mapped.detail) if column else "column" not in mapped.detail


def test_a_duplicate_primary_key_is_told_apart_from_other_unique_keys():
    for message in ("Duplicate entry '5' for key 'PRIMARY'",
                    "Duplicate entry '5' for key 'parts.PRIMARY'"):
        assert isinstance(map_mysql_error(err.IntegrityError(1062, message)),
                          DuplicatePrimaryKey)


def test_unknown_errors_are_plain_target_errors():
    mapped = map_mysql_error(err.ProgrammingError(1064, "You have an error in your SQL syntax"))
    assert type(mapped) is TargetError and mapped.reason_code == "DATABASE_ERROR"


@pytest.mark.parametrize(("error", "reason"), [
    (err.OperationalError(3105, "The value specified for generated column 'c'"),
     RejectReason.GENERATED_COLUMN),
    (err.OperationalError(1906, "The value specified for generated column 'c'"),
     RejectReason.GENERATED_COLUMN),
    (err.OperationalError(1153, "Got a packet bigger than 'max_allowed_packet'"),
     RejectReason.PACKET_TOO_LARGE),
    (err.OperationalError(1644, "refused by a trigger"), RejectReason.DATABASE_REFUSED),
    (err.ProgrammingError(1110, "Column 'qty' specified twice"), RejectReason.DATABASE_REFUSED),
])
def test_an_events_statement_error_rejects_that_event(error, reason):
    mapped = map_mysql_error(error, in_statement=True)
    assert isinstance(mapped, StatementRejected) and mapped.reason is reason
    assert "refused" not in mapped.detail and "qty" not in mapped.detail


def test_server_faults_met_by_a_statement_stay_the_chunks():
    mapped = map_mysql_error(err.InternalError(1030, "Got error 28 from storage engine"),
                             in_statement=True)
    assert type(mapped) is TargetError and mapped.reason_code == "DATABASE_ERROR"


def _sqlite_error(kind: type[sqlite3.Error], code: int, text: str = "x") -> sqlite3.Error:
    error = kind(text)
    error.sqlite_errorcode = code
    return error


def test_sqlite_error_mapping():
    busy = map_sqlite_error(_sqlite_error(sqlite3.OperationalError, 5, "database is locked"))
    assert isinstance(busy, TransientTargetError) and busy.reason_code == "DATABASE_BUSY"
    io_at_commit = map_sqlite_error(_sqlite_error(sqlite3.OperationalError, 10 | (3 << 8)),
                                    during_commit=True)
    assert isinstance(io_at_commit, CommitOutcomeUnknown)
    assert isinstance(map_sqlite_error(_sqlite_error(sqlite3.IntegrityError, 1555)),
                      DuplicatePrimaryKey)
    unique = map_sqlite_error(_sqlite_error(sqlite3.IntegrityError, 2067))
    assert isinstance(unique, StatementRejected)
    assert unique.reason is RejectReason.DUPLICATE_UNIQUE_KEY
    too_big = map_sqlite_error(OverflowError("Python int too large"))
    assert isinstance(too_big, StatementRejected)
    assert too_big.reason is RejectReason.VALUE_OUT_OF_RANGE


@pytest.mark.parametrize(("declared", "kind", "size"), [
    ("tinyint(1)", ColumnKind.BOOL, None), ("bit(1)", ColumnKind.BOOL, None),
    ("bit(12)", ColumnKind.BITS, 12), ("decimal(12,2)", ColumnKind.DECIMAL, 2),
    ("decimal(10)", ColumnKind.DECIMAL, 0), ("NUMERIC", ColumnKind.DECIMAL, None),
    ("DATETIME(6)", ColumnKind.DATETIME, None), ("timestamp", ColumnKind.DATETIME, None),
    ("int unsigned", ColumnKind.INTEGER, None), ("json", ColumnKind.JSON, None),
    ("varbinary(16)", ColumnKind.BYTES, None), ("enum('A','B')", ColumnKind.TEXT, None),
    ("geometry", ColumnKind.OTHER, None),
])
def test_declared_column_types(declared, kind, size):
    assert column_type(declared).kind is kind and column_type(declared).size == size


def test_trigger_names_fit_in_64_characters():
    names = trigger_names("t" * 64)
    assert all(len(name) <= 64 for name in names) and names[0] != names[1]
    assert trigger_names("parts") == ("tidesync_parts_bi", "tidesync_parts_bu")


@pytest.mark.parametrize("number", [1451, 1452, 1216, 1217])
def test_foreign_key_errors_are_told_apart_from_other_constraints(number):
    mapped = map_mysql_error(err.IntegrityError(number, "a foreign key constraint fails"),
                             in_statement=True)
    assert isinstance(mapped, ForeignKeyViolation)
    assert mapped.reason is RejectReason.CONSTRAINT_VIOLATION  # as before, once given up
    check = map_mysql_error(err.OperationalError(3819, "Check constraint is violated"))
    assert isinstance(check, StatementRejected) and not isinstance(check, ForeignKeyViolation)
    sqlite_fk = map_sqlite_error(_sqlite_error(sqlite3.IntegrityError, 787))
    assert isinstance(sqlite_fk, ForeignKeyViolation)
