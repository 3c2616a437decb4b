"""Rebuilding a view without serving it half built: its projections run from position 0 into
shadow tables (`<table>__rebuild`, with their own tracking rows) while the live view keeps
serving and following; then one transaction catches the shadow up to the head, renames it into
place and moves the tracking positions. Readers see the old view or the new one, never a part.

Each rebuild is an OperatorAction (Requested, then Completed or Failed) with actor and reason.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from eventsourcing.application import Application
from psycopg import sql

from tidesync.apps.operations import OperationsApplication
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.operator_action import OperatorAction
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import (
    VIEW_LOCK_CLASS,
    Cursor,
    Pool,
    PostgresViewRunner,
    lock_view,
    read_tracking,
)
from tidesync.projections.failures import clear_failure_in
from tidesync.projections.registry import REBUILD_SUFFIX, Catalogue

log = logging.getLogger(__name__)

SWITCH_LOCK_TIMEOUT = "5s"
SWITCH_ATTEMPTS = 12


class RebuildError(TidesyncError):
    """A rebuild that could not start or finish; `code` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


@dataclass(frozen=True)
class RebuildProgress:
    """How far the shadow copy is: positions and heads summed over the view's feeds."""

    view: str
    phase: str
    """COPYING, SWITCHING or DONE."""
    position: int
    head: int
    processed: int
    elapsed_seconds: float

    @property
    def fraction(self) -> float:
        return 1.0 if self.head <= 0 else min(self.position / self.head, 1.0)

    @property
    def rate_per_second(self) -> float:
        return self.processed / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0


@dataclass(frozen=True)
class RebuildResult:
    view: str
    action_id: uuid.UUID
    processed: int
    """Notifications the shadow projections consumed."""
    seconds: float
    positions: Mapping[str, int]
    """Tracking name → the position the live view continues from."""
    rows: Mapping[str, int]
    """Table → rows in the rebuilt table."""



def rebuild_view(name: str, *, apps: Mapping[str, Application[Any]], pool: Pool, actor: str,
                 reason: str, catalogue: Catalogue | None = None,
                 batch_size: int | None = None,
                 on_progress: Callable[[RebuildProgress], None] | None = None,
                 clock: Clock = utc_now,
                 action_id: uuid.UUID | None = None, trace_id: str = "") -> RebuildResult:
    """Rebuild view `name` from position 0 side by side, then switch it in atomically.

    `apps` are the open applications (Catalogue.open_applications; it needs "operations" to
    record the action). Raises RegistryError for an unknown view, OperatorActionError without
    actor or reason, RebuildError(REBUILD_RUNNING) when another rebuild of the view runs, and
    whatever stopped the rebuild (recorded as Failed; the live view is untouched).
    """
    if catalogue is None:
        catalogue = default_catalogue()
    spec = catalogue.view(name)
    operations = apps["operations"]
    assert isinstance(operations, OperationsApplication)
    action = OperatorAction.request(action_id or uuid.uuid4(), "rebuild_projection", name,
                                    clock(), actor, reason, trace_id)
    # The guard is a session lock on its own connection: it outlives the transactions below.
    conninfo = pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()
    with psycopg.connect(conninfo, autocommit=True) as guard:
        if not _try_session_lock(guard, name):
            raise RebuildError("REBUILD_RUNNING", f"a rebuild of {name} is already running")
        try:
            operations.save(action)
            result = _rebuild(spec.name, spec.tables, catalogue, apps, pool, batch_size,
                              on_progress, action.id)
        except BaseException as error:
            action.fail(clock(), type(error).__name__, actor, reason, trace_id)
            operations.save(action)
            _drop_shadow(pool, spec.tables, catalogue, apps, spec.name)
            raise
    action.complete(clock(), {"processed": result.processed,
                              "seconds": round(result.seconds, 3),
                              "positions": dict(result.positions), "rows": dict(result.rows)},
                    actor, "rebuild switched in", trace_id)
    operations.save(action)
    return result


def _session_key(name: str) -> str:
    return f"{name}{REBUILD_SUFFIX}:session"


def _try_session_lock(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                       (VIEW_LOCK_CLASS, _session_key(name))).fetchone()
    return bool(row and row[0])


def _rebuild(name: str, tables: tuple[str, ...], catalogue: Catalogue,
             apps: Mapping[str, Application[Any]], pool: Pool, batch_size: int | None,
             on_progress: Callable[[RebuildProgress], None] | None,
             action_id: uuid.UUID) -> RebuildResult:
    started = time.monotonic()
    live = catalogue.runner(name, apps, pool)
    shadow = catalogue.runner(name, apps, pool, suffix=REBUILD_SUFFIX, batch_size=batch_size)
    with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        _create_shadow_tables(cursor, tables)
        for feed in shadow.feeds:
            cursor.execute("DELETE FROM projection_tracking WHERE name = %s",
                           (feed.tracking_name,))

    def report(phase: str, processed: int) -> None:
        if on_progress is not None:
            position, head = _progress(live if phase == "DONE" else shadow)
            on_progress(RebuildProgress(name, phase, position, head, processed,
                                        time.monotonic() - started))

    processed = 0
    report("COPYING", 0)
    while (count := shadow.run_once()) > 0:
        processed += count
        report("COPYING", processed)
    report("SWITCHING", processed)
    processed += _switch(name, tables, live, shadow, pool)
    with pool.connection() as conn, conn.cursor() as cursor:
        rows = {}
        for table in tables:
            cursor.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
            counted = cursor.fetchone()
            rows[table] = int(counted[0]) if counted else 0
        positions = {feed.tracking_name: read_tracking(cursor, feed.tracking_name).position
                     for feed in live.feeds}
    report("DONE", processed)
    log.info("rebuilt view %s (%d notifications, action %s)", name, processed, action_id)
    return RebuildResult(name, action_id, processed, time.monotonic() - started, positions,
                         rows)


def _progress(runner: PostgresViewRunner) -> tuple[int, int]:
    position = head = 0
    for feed in runner.feeds:
        position += feed.position()
        head += feed.recorder.max_notification_id() or 0
    return position, head


def _switch(name: str, tables: tuple[str, ...], live: PostgresViewRunner,
            shadow: PostgresViewRunner, pool: Pool) -> int:
    """Catch the shadow up and swap it in, in one transaction; retried while readers or
    writers hold the live tables longer than the lock timeout."""
    for attempt in range(1, SWITCH_ATTEMPTS + 1):
        try:
            with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{SWITCH_LOCK_TIMEOUT}'")
                lock_view(cursor, live.lock_key, wait=True)
                lock_view(cursor, shadow.lock_key, wait=True)
                for table in tables:
                    cursor.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                        sql.Identifier(table)))
                caught_up = shadow.catch_up_in(cursor)
                shadow.refresh_in(cursor)
                for table in tables:
                    _swap_table(cursor, table)
                for live_feed, shadow_feed in zip(live.feeds, shadow.feeds, strict=True):
                    _move_tracking(cursor, shadow_feed.tracking_name, live_feed.tracking_name)
                clear_failure_in(cursor, name)
                return caught_up
        except psycopg.errors.LockNotAvailable:
            log.warning("switching view %s waited too long for its locks (attempt %d)",
                        name, attempt)
            shadow.run_once()
    raise RebuildError("SWITCH_TIMEOUT", f"view {name} stayed busy; the live view is unchanged")


# ----------------------------------------------------------------------------- tables


def _create_shadow_tables(cursor: Cursor, tables: tuple[str, ...]) -> None:
    """Empty copies of the live tables: columns, defaults, checks, keys, indexes and grants,
    each index and constraint named `<name>__rebuild` so the swap can restore the names."""
    for table in tables:
        shadow = f"{table}{REBUILD_SUFFIX}"
        cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(shadow)))
        cursor.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL EXCLUDING INDEXES)")
                       .format(sql.Identifier(shadow), sql.Identifier(table)))
        for constraint, definition in _key_constraints(cursor, table):
            cursor.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                sql.Identifier(shadow), sql.Identifier(f"{constraint}{REBUILD_SUFFIX}"),
                sql.SQL(definition)))
        for index, unique, method_and_columns in _plain_indexes(cursor, table):
            cursor.execute(sql.SQL("CREATE {}INDEX {} ON {} {}").format(
                sql.SQL("UNIQUE " if unique else ""),
                sql.Identifier(f"{index}{REBUILD_SUFFIX}"), sql.Identifier(shadow),
                sql.SQL(method_and_columns)))
        _copy_grants(cursor, table, shadow)


def _copy_grants(cursor: Cursor, table: str, shadow: str) -> None:
    """The privileges other roles hold on the live table (readers such as the console's)."""
    cursor.execute(
        "SELECT a.privilege_type, a.grantee = 0, pg_get_userbyid(a.grantee), a.is_grantable"
        " FROM pg_class c, aclexplode(c.relacl) a"
        " WHERE c.oid = %s::regclass AND a.grantee <> c.relowner", (table,))
    for privilege, public, grantee, grantable in cursor.fetchall():
        cursor.execute(sql.SQL("GRANT {} ON {} TO {}{}").format(
            sql.SQL(str(privilege)), sql.Identifier(shadow),
            sql.SQL("PUBLIC") if public else sql.Identifier(str(grantee)),
            sql.SQL(" WITH GRANT OPTION" if grantable else "")))


def _key_constraints(cursor: Cursor, table: str) -> list[tuple[str, str]]:
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'x') ORDER BY conname",
        (table,))
    return [(str(row[0]), str(row[1])) for row in cursor.fetchall()]


def _plain_indexes(cursor: Cursor, table: str) -> list[tuple[str, bool, str]]:
    """Indexes not backing a constraint: name, unique, and `USING …` of their definition."""
    cursor.execute(
        "SELECT c.relname, i.indisunique, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)"
        " ORDER BY c.relname", (table,))
    indexes = []
    for index, unique, definition in cursor.fetchall():
        indexes.append((str(index), bool(unique), str(definition)[str(definition).index(
            " USING "):].strip()))
    return indexes


def _swap_table(cursor: Cursor, table: str) -> None:
    shadow = f"{table}{REBUILD_SUFFIX}"
    constraints = [name for name, _ in _key_constraints(cursor, shadow)]
    indexes = [name for name, _, _ in _plain_indexes(cursor, shadow)]
    cursor.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    cursor.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
        sql.Identifier(shadow), sql.Identifier(table)))
    for name in constraints:
        cursor.execute(sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
            sql.Identifier(table), sql.Identifier(name),
            sql.Identifier(name.removesuffix(REBUILD_SUFFIX))))
    for name in indexes:
        cursor.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
            sql.Identifier(name), sql.Identifier(name.removesuffix(REBUILD_SUFFIX))))


def _move_tracking(cursor: Cursor, shadow_name: str, live_name: str) -> None:
    # updated_at is database time, as the projection runner writes it: shown, never compared.
    cursor.execute(
        "INSERT INTO projection_tracking (name, position, updated_at, processed, rate,"
        " last_batch_at) SELECT %s, position, now(), processed, rate, last_batch_at"
        " FROM projection_tracking WHERE name = %s ON CONFLICT (name) DO UPDATE SET"
        " position = EXCLUDED.position, updated_at = now(), processed = EXCLUDED.processed,"
        " rate = EXCLUDED.rate, last_batch_at = EXCLUDED.last_batch_at",
        (live_name, shadow_name))
    if cursor.rowcount != 1:
        # The shadow never recorded a position (an empty log): the view starts from 0.
        cursor.execute(
            "INSERT INTO projection_tracking (name, position, updated_at) VALUES (%s, 0, now())"
            " ON CONFLICT (name) DO UPDATE SET position = 0, updated_at = now()", (live_name,))
    cursor.execute("DELETE FROM projection_tracking WHERE name = %s", (shadow_name,))


def _drop_shadow(pool: Pool, tables: tuple[str, ...], catalogue: Catalogue,
                 apps: Mapping[str, Application[Any]], name: str) -> None:
    """Best effort after a failed rebuild: the shadow tables and tracking rows go."""
    try:
        shadow = catalogue.runner(name, apps, pool, suffix=REBUILD_SUFFIX)
        with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for table in tables:
                cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                    sql.Identifier(f"{table}{REBUILD_SUFFIX}")))
            for feed in shadow.feeds:
                cursor.execute("DELETE FROM projection_tracking WHERE name = %s",
                               (feed.tracking_name,))
    except psycopg.Error as error:
        log.warning("could not drop the shadow of view %s: %s", name, type(error).__name__)
