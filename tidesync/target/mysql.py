"""The MySQL/MariaDB target applier: compare-and-set statements and a ledger, through pymysql.

Driver errors become TransientTargetError, CommitOutcomeUnknown or a REJECTED reason in one place.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.sync_columns import REVISION_COLUMN
from tidesync.domain.values import Value
from tidesync.target.cas import (
    CompareAndSetApplier,
    DuplicatePrimaryKey,
    PlannedWrite,
    StatementRejected,
    delete_mark,
    foreign_key_checks,
    key_in_table_order,
    parse_revision,
    reject_template,
)
from tidesync.target.contract import (
    LEDGER_TABLE,
    CommitOutcomeUnknown,
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
    TransientTargetError,
    same_names,
)
from tidesync.target.mysql_errors import map_mysql_error
from tidesync.target.mysql_schema import REMOTE_APPLY_VARIABLE, inspect_mysql_table, mysql_quote
from tidesync.target.mysql_session import MySQLSession
from tidesync.target.mysql_statements import (
    key_match,
    literal_kind,
    run_statements,
    set_statement_head,
    sql_name,
    sql_table,
    statement_text,
    touched_by,
)
from tidesync.target.mysql_values import decode_mysql_value, mysql_param
from tidesync.target.table_state import TableShape, TableState, check_node_id

log = logging.getLogger(__name__)

_LEDGER_COLUMNS = "(event_id, origin_node_id, table_name, applied_at)"
_PACKET_MARGIN = 1024
"""Bytes of a packet kept free of statement text (the packet header and the like)."""


class MySQLTargetApplier(MySQLSession, CompareAndSetApplier):
    """Applies change events to MySQL/MariaDB tables enabled by `tidesync target enable`.

    One connection (autocommit off, CLIENT.FOUND_ROWS so an UPDATE counts matched rows), UTC
    session time zone, strict SQL mode, READ COMMITTED (so the evidence read after a lost
    compare-and-set sees the latest committed row, not a snapshot from earlier in the chunk),
    and `@tidesync_remote_apply = 1` so the tables' triggers keep the event's metadata.
    The connection opens on first use and again after it was lost.
    """

    def __init__(
        self, *, host: str, port: int, user: str, password: str, node_id: str,
        database: str | None = None, route: Route = same_names, clock: Clock = utc_now,
        lock_wait_timeout: int = 20, connect_timeout: float = 10.0,
        read_timeout: float = 60.0, write_timeout: float = 60.0, pipeline_depth: int = 50,
    ) -> None:
        super().__init__(check_node_id(node_id), route, clock)
        self.pipeline_depth = pipeline_depth
        self._open_session(
            host=host, port=port, user=user, password=password, database=database,
            client_flag=CLIENT.MULTI_STATEMENTS, lock_wait_timeout=lock_wait_timeout,
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            write_timeout=write_timeout)
        self._max_packet = 16 * 1024 * 1024  # read from the server on connect
        self._literal_cache: dict[object, str] = {}
        self._set_refused: set[tuple[str, str, tuple[str, ...]]] = set()
        self._checks_on = True
        """The session's foreign_key_checks (on, unless a chunk turned it off for events the
        source ran with the checks off; restored when the transaction ends)."""

    # -- the driver boundary ------------------------------------------------------------------

    _SESSION_VARIABLES = f"{REMOTE_APPLY_VARIABLE} = 1, "

    def _connection_lost(self, mapped: Exception) -> bool:
        # The server closes the connection after a packet too large.
        return super()._connection_lost(mapped) or (
            isinstance(mapped, StatementRejected)
            and mapped.reason is RejectReason.PACKET_TOO_LARGE)

    def _prepare_session(self, cursor: Any) -> None:
        super()._prepare_session(cursor)
        cursor.execute("SELECT @@max_allowed_packet")
        self._max_packet = int(cursor.fetchone()[0])

    def _drop_connection(self) -> None:
        self._checks_on = True  # a new session starts with the server's default
        super()._drop_connection()

    # -- CompareAndSetApplier primitives ------------------------------------------------------

    def _inspect(self, database: str, table: str) -> TableShape | TargetOutcome:
        # MySQL names hold only characters of the Basic Multilingual Plane (utf8mb3): asking
        # information_schema about any other name fails the whole chunk (error 1267).
        if max(map(ord, database + table), default=0) > 0xFFFF:
            return reject_template(RejectReason.INVALID_NAME,
                                   "a database or table name MySQL cannot hold")
        state = self._state(database, table)
        if not state.exists:
            return reject_template(RejectReason.UNKNOWN_TABLE, f"table {table} does not exist")
        if not state.enabled:
            return reject_template(RejectReason.TABLE_NOT_ENABLED,
                             f"table {table} is not enabled for sync (tidesync target enable)")
        return state.shape()

    def _state(self, database: str, table: str) -> TableState:
        cursor = self._cursor()
        state = self._call(lambda: inspect_mysql_table(cursor, database, table))
        self._rollback()  # end the read-only transaction the inspection opened
        return state

    def _sql(self, write: PlannedWrite, now: dt.datetime) -> str:
        """The compare-and-set statement of one write as SQL text with escaped literals.

        Built here rather than by pymysql's mogrify: the metadata literals repeat across a
        chunk and UUID text needs no escaping, which halves the client's work per event.
        """
        shape = write.shape
        operation = write.operation
        kind = Operation.INSERT if operation is Operation.SNAPSHOT else operation
        key = (kind, shape.database, shape.table, write.columns)
        template = self._statements.get(key)
        if template is None:
            template = self._statements[key] = statement_text(write)
        literal = self._literal
        literals = [*map(literal, write.values), *self._metadata_literals(write, now)]
        if kind is not Operation.INSERT:
            assert write.base_revision is not None
            literals += [*map(literal, write.key),
                         self._revision_literal(shape, write.base_revision)]
        if operation is Operation.DELETE:
            # The DELETE removes only the row its own mark matched (same event id and mark).
            literals += [*map(literal, write.key), f"'{write.event.event_id}'",
                         self._revision_literal(shape, delete_mark(write))]
        return template % tuple(literals)

    def _literal(self, value: Value) -> str:
        kind = type(value)
        if kind is int:
            return str(value)
        # Connection.escape honours the server's NO_BACKSLASH_ESCAPES mode.
        return str(self._connection.escape(value if kind is str else mysql_param(value)))

    def _revision_literal(self, shape: TableShape, revision: Revision) -> str:
        if shape.revision_as_bytes:
            return self._literal(revision.value)
        # UUID text is hex digits and dashes: nothing to escape.
        return f"'{revision.text}'"

    def _metadata_literals(self, write: PlannedWrite, now: dt.datetime) -> tuple[str, ...]:
        event = write.event
        revision = (delete_mark(write) if event.operation is Operation.DELETE
                    else event.result_revision)
        assert revision is not None
        cached = self._literal_cache
        origin = cached.get(event.origin_node_id)
        if origin is None:
            origin = cached[event.origin_node_id] = self._literal(event.origin_node_id)
        moment = cached.get(now)
        if moment is None:
            moment = cached[now] = self._literal(now)
        return (self._revision_literal(write.shape, revision), origin,
                f"'{event.event_id}'", moment)

    def _insert(self, write: PlannedWrite, now: dt.datetime) -> None:
        self._execute(self._sql(write, now))

    def _update(self, write: PlannedWrite, now: dt.datetime) -> int:
        return self._execute(self._sql(write, now))

    def _delete(self, write: PlannedWrite) -> int:
        return int(self._write_many([write], self._clock())[0])

    def _write_many(self, writes: Sequence[PlannedWrite], now: dt.datetime) -> list[bool]:
        """The writes in runs of one foreign key setting: a change the source made with
        foreign_key_checks = 0 runs with the session's checks off, as a replica runs it."""
        touched: list[bool] = []
        start = 0
        while start < len(writes):
            checks = foreign_key_checks(writes[start].event)
            end = start + 1
            while end < len(writes) and foreign_key_checks(writes[end].event) == checks:
                end += 1
            self._foreign_key_checks(checks)
            try:
                touched += self._write_run(writes[start:end], now)
            except StatementRejected as failure:
                failure.position += start
                raise
            start = end
        return touched

    def _foreign_key_checks(self, on: bool) -> None:
        if on != self._checks_on:
            self._execute(f"SET SESSION foreign_key_checks = {int(on)}")
            self._checks_on = on

    def _restore_checks(self) -> None:
        """Checks on again once the transaction is over (the next chunk starts as usual)."""
        if not self._checks_on and self._connection is not None:
            try:
                self._foreign_key_checks(True)
            except TargetError:
                self._drop_connection()

    def _write_run(self, writes: Sequence[PlannedWrite], now: dt.datetime) -> list[bool]:
        """Send the statements of several writes in one round trip (multi-statement text).

        The server runs them in order and stops at the first error, so the counts read before
        it belong to the statements before it; after a duplicate key the rest go again.
        """
        cursor = self._cursor()
        if len(self._literal_cache) > 1000:
            self._literal_cache.clear()
        if len(writes) > 1:
            all_touched = self._update_as_set(cursor, writes, now)
            if all_touched:
                return [True] * len(writes)
        touched: list[bool] = []
        while len(touched) < len(writes):
            rest = writes[len(touched):]
            text = ";\n".join(self._fitting(self._statement_texts(rest, now, len(touched)),
                                             len(touched)))
            counts: list[int] = []
            try:
                self._call(functools.partial(run_statements, cursor, text, counts),
                           statement=True)
            except DuplicatePrimaryKey:
                touched += [*touched_by(rest, counts), False]
                continue
            except StatementRejected as failure:
                failure.position = len(touched) + len(touched_by(rest, counts))
                raise
            touched += touched_by(rest, counts)
        return touched

    def _statement_texts(self, writes: Sequence[PlannedWrite], now: dt.datetime,
                         offset: int) -> list[str]:
        """Each write's SQL text; a write whose values make no literal is REJECTED (built
        here, outside the driver, so its errors are mapped here)."""
        texts = []
        for position, write in enumerate(writes):
            try:
                texts.append(self._sql(write, now))
            except (ValueError, TypeError, ArithmeticError, UnicodeError) as error:
                raise StatementRejected(RejectReason.STATEMENT_NOT_BUILT, type(error).__name__,
                                        offset + position) from error
        return texts

    def _fitting(self, texts: list[str], offset: int, *, strict: bool = True) -> list[str]:
        """The leading texts that fit in one packet the server accepts (a packet too large
        makes the server close the connection, losing the transaction). `strict`: a first
        text too large is the event's PACKET_TOO_LARGE (else none fit)."""
        limit = self._max_packet - _PACKET_MARGIN
        size = 0
        for count, text in enumerate(texts):
            size += len(text) if len(text) * 4 <= limit else len(text.encode())
            if size > limit:
                if count == 0 and strict:
                    raise StatementRejected(RejectReason.PACKET_TOO_LARGE,
                                            f"statement over {limit} bytes", offset)
                return texts[:count]
        return texts

    def forget_tables(self) -> None:
        super().forget_tables()
        self._set_refused.clear()

    def _update_as_set(self, cursor: Any, writes: Sequence[PlannedWrite],
                       now: dt.datetime) -> bool:
        """Try a batch of UPDATEs (distinct rows, one column set) as one set-based
        compare-and-set, `UPDATE (SELECT … UNION ALL SELECT …) u STRAIGHT_JOIN t ON t.key =
        u.key AND t.revision = u.base SET …` (the per-row triggers fire as for single UPDATEs).

        True when every event's row matched (the server then ran one statement instead of
        one per event); otherwise nothing of it stays (savepoint) and the caller runs the
        statements one by one, which judges each event exactly as before. Each event matches
        at most one row (by primary key) and each row is updated at most once, so a count
        equal to the batch means each event changed its own row. (MariaDB counts the rows a
        multi-table UPDATE changed, even with CLIENT.FOUND_ROWS: a row matched but left as it
        was only sends the batch the one-by-one way.)
        """
        try:
            text = self._set_update_text(writes, now)
        except (ValueError, TypeError, ArithmeticError, UnicodeError):
            text = None  # one by one, where the event at fault is named
        if text is None or not self._fitting([text], 0, strict=False):
            return False
        counts: list[int] = []
        try:
            run_statements(cursor, text, counts)
        except pymysql.MySQLError as error:
            mapped = map_mysql_error(error)
            if isinstance(mapped, TransientTargetError | CommitOutcomeUnknown):
                log.warning("target MySQL call failed: %s", mapped.reason_code)
                self._drop_connection()
                raise mapped from error
            if not isinstance(mapped, StatementRejected | DuplicatePrimaryKey):
                # The server will not take this table's rows as a set (e.g. a collation it
                # cannot compare): statements one by one from now on.
                first = writes[0]
                self._set_refused.add((first.shape.database, first.shape.table,
                                       first.columns))
            counts = []
        if len(counts) == 2 and counts[1] == len(writes):
            return True
        self._execute("ROLLBACK TO SAVEPOINT tidesync_set")
        return False

    def _set_update_text(self, writes: Sequence[PlannedWrite], now: dt.datetime) -> str | None:
        """The set-based statement of a batch, or None when it does not qualify: only UPDATEs
        of one table and column set whose every column carries one kind of literal (numbers
        or quoted text; NULL mixes with either), so the derived table's column types cannot
        convert a value differently from a literal in its own statement."""
        first = writes[0]
        shape, columns = first.shape, first.columns
        if (shape.database, shape.table, columns) in self._set_refused:
            return None
        for write in writes:
            if (write.operation is not Operation.UPDATE or write.shape is not shape
                    or write.columns != columns or write.event.base_revision is None):
                return None
        width = len(columns) + len(shape.primary_key)
        for position in range(width):
            kinds = {literal_kind(write.values[position] if position < len(columns)
                                  else write.key[position - len(columns)])
                     for write in writes}
            kinds.discard("null")
            if len(kinds) > 1 or "other" in kinds:
                return None
        key = ("set", shape.database, shape.table, columns)
        head = self._statements.get(key)
        if head is None:
            head = self._statements[key] = set_statement_head(shape, columns)
        literal = self._literal
        origin, moment = self._metadata_literals(first, now)[1::2]
        rows: list[list[str]] = []
        for write in writes:
            event = write.event
            assert event.base_revision is not None and event.result_revision is not None
            rows.append([
                *map(literal, write.values), *map(literal, write.key),
                self._revision_literal(shape, event.base_revision),
                self._revision_literal(shape, event.result_revision),
                origin if event.origin_node_id == first.event.origin_node_id
                else literal(event.origin_node_id),
                f"'{event.event_id}'"])
        first_row = ", ".join(f"{value} AS c{index}" for index, value in enumerate(rows[0]))
        derived = " UNION ALL SELECT ".join([first_row, *(", ".join(row) for row in rows[1:])])
        return f"SAVEPOINT tidesync_set;\n{head % {'rows': derived, 'moment': moment}}"

    def _read_row(self, shape: TableShape,
                  key: tuple[Value, ...]) -> tuple[Mapping[str, Value] | None, Revision | None]:
        statement_key = ("select", shape.database, shape.table)
        statement = self._statements.get(statement_key)
        if statement is None:
            columns = ", ".join(sql_name(column) for column in shape.columns)
            statement = self._statements[statement_key] = (
                f"SELECT {columns} FROM {sql_table(shape)} WHERE {key_match(shape)}")  # noqa: S608
        rows = self._query(statement, [mysql_param(value) for value in key])
        if not rows:
            return None, None
        row = {name: decode_mysql_value(raw, kind)
               for (name, kind), raw in zip(shape.columns.items(), rows[0], strict=True)}
        return row, parse_revision(rows[0][list(shape.columns).index(REVISION_COLUMN)])

    def _insert_ledger(self, database: str, writes: Sequence[PlannedWrite],
                       now: dt.datetime) -> None:
        """One multi-row INSERT; the literals repeat per chunk except the event ids."""
        self._cursor()  # connected, so literals can be escaped
        applied_at = self._literal(now)
        cached = self._literal_cache
        rows = []
        for write in writes:
            origin, table = write.event.origin_node_id, write.shape.table
            pair = cached.get((origin, table))
            if pair is None:
                pair = cached[(origin, table)] = f"{self._literal(origin)}, {self._literal(table)}"
            rows.append(f"('{write.event.event_id}', {pair}, {applied_at})")
        self._execute(f"INSERT INTO {mysql_quote(database)}.{LEDGER_TABLE} {_LEDGER_COLUMNS}"  # noqa: S608
                      f" VALUES {', '.join(rows)}")

    def _commit(self) -> None:
        super()._commit()
        self._restore_checks()

    def _rollback(self) -> None:
        super()._rollback()
        self._restore_checks()

    # -- the rest of TargetApplier ------------------------------------------------------------

    def current_row(
        self, database: str, table: str, primary_key: Mapping[str, Value],
    ) -> tuple[Mapping[str, Value] | None, Revision | None]:
        target_database, target_table = self._route(database, table)
        shape = self._shape(target_database, target_table)
        if not isinstance(shape, TableShape):
            state = self._state(target_database, target_table)
            if not state.exists:
                return None, None
            shape = state.shape()
        key = key_in_table_order(shape, primary_key)
        found = self._read_row(shape, key)
        self._rollback()
        return found
