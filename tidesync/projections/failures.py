"""Views that failed: one that stops on an error retrying cannot cure is marked FAILED with a
reason code and skipped by the worker (every other view goes on) until a rebuild replaces it.

Transient errors (the database unreachable) are not failures: the next round retries.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from tidesync.domain.errors import TidesyncError

Cursor = psycopg.Cursor[TupleRow]
Pool = ConnectionPool[psycopg.Connection[TupleRow]]

TRANSIENT_ERRORS = (psycopg.OperationalError, PoolTimeout, OperationalError, InterfaceError)


class FailureReason(enum.StrEnum):
    """Why a view stopped."""

    VALUE_REFUSED = "VALUE_REFUSED"
    """PostgreSQL refused a value the view would store (e.g. a NUL character in text)."""
    PROJECTION_ERROR = "PROJECTION_ERROR"
    """The projection raised (a bug, or an event it cannot read)."""


@dataclass(frozen=True)
class ViewFailure:
    view: str
    reason: str
    error_type: str
    failed_at: dt.datetime


def failure_reason(error: BaseException) -> str:
    """The reason code stored for an error (never its message, which may quote values)."""
    if isinstance(error, psycopg.DataError):
        return FailureReason.VALUE_REFUSED.value
    if isinstance(error, TidesyncError):
        return error.code.value
    return FailureReason.PROJECTION_ERROR.value


def mark_failed(pool: Pool, view: str, error: BaseException) -> str:
    """Record that `view` stopped on `error`; returns the reason code. Database time."""
    reason = failure_reason(error)
    with pool.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO projection_failure (view_name, reason, error_type, failed_at)"
            " VALUES (%s, %s, %s, now()) ON CONFLICT (view_name) DO UPDATE SET"
            " reason = EXCLUDED.reason, error_type = EXCLUDED.error_type,"
            " failed_at = EXCLUDED.failed_at", (view, reason, type(error).__name__))
    return reason


def read_failure(pool: Pool, view: str) -> ViewFailure | None:
    with pool.connection() as conn, conn.cursor() as cursor:
        return read_failure_in(cursor, view)


def read_failure_in(cursor: Cursor, view: str) -> ViewFailure | None:
    cursor.execute("SELECT view_name, reason, error_type, failed_at FROM projection_failure"
                   " WHERE view_name = %s", (view,))
    row = cursor.fetchone()
    return None if row is None else ViewFailure(str(row[0]), str(row[1]), str(row[2]), row[3])


def clear_failure_in(cursor: Cursor, view: str) -> None:
    """Forget the view's failure (a rebuild switched a new copy in)."""
    cursor.execute("DELETE FROM projection_failure WHERE view_name = %s", (view,))
