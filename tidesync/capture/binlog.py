"""Built-in capture from the MySQL/MariaDB binlog: row events read as a replica would (through
mysql-replication), published as Debezium records and checkpointed after each transaction.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pymysql

from tidesync.capture.change_records import RowChange
from tidesync.capture.checkpointer import CaptureStats, Checkpointer
from tidesync.capture.envelope_writer import (
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TransactionInfo,
)
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.positions import CapturePosition
from tidesync.capture.settings import CaptureStart
from tidesync.capture.snapshot import (
    SIGNAL_TABLE,
    IncrementalSnapshots,
    snapshot_marks,
)
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.capture.tables import (
    BinlogRowDecoder,
    binlog_type_matches,
    definition_for_binlog,
    load_mysql_table,
)
from tidesync.domain.backoff import Backoff
from tidesync.domain.errors import ErrorCode, TidesyncError

logger = logging.getLogger(__name__)

RECONNECT_BACKOFF = Backoff(initial_seconds=1.0, cap_seconds=60.0, max_attempts=10)
"""Between binlog sessions after a lost connection; the count restarts once events flow."""

INTERNAL_TABLES = frozenset({"_sync_applied", "_sync_session", "_tidesync_changelog",
                             "_sync_reconcile", "_sync_key_position", SIGNAL_TABLE})
"""tidesync's own tables in a business database: never captured."""


@dataclass(frozen=True)
class BinlogSettings:
    """The binlog source: a replication account, this client's replica server id, and the
    databases (and optionally only some (db, table) pairs) to capture."""

    host: str
    port: int
    user: str
    password: str
    server_id: int
    databases: tuple[str, ...]
    tables: frozenset[tuple[str, str]] = frozenset()
    start_from: CaptureStart = CaptureStart.CURRENT
    heartbeat_seconds: int = 1
    snapshot_rows_per_sec: int = 2000
    """How fast incremental snapshots read rows (`tidesync snapshot start`)."""

    def __post_init__(self) -> None:
        if self.server_id < 1:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               "capture.server_id must be set: a replica server id (>= 1) "
                               "that no other replica of this server uses")
        if not self.databases:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               "capture.databases must name the databases to capture")

    def captures(self, database: str, table: str) -> bool:
        if database not in self.databases or table in INTERNAL_TABLES:
            return False
        return not self.tables or (database, table) in self.tables


_REQUIRED_BINLOG = {"binlog_format": "ROW", "binlog_row_image": "FULL",
                    "binlog_row_metadata": "FULL"}
_FL_STANDALONE = 1  # MariaDB GTID event flag: a statement (DDL) with no XID after it
_NO_FOREIGN_KEY_CHECKS = 2  # rows event flag NO_FOREIGN_KEY_CHECKS_F (foreign_key_checks = 0)
_TRANSACTION_ENDS = frozenset({"COMMIT", "ROLLBACK"})
_NOT_SCHEMA_CHANGES = ("SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA ")


class MySQLBinlogCapture:
    """Reads row events from the binlog as a replica would, and publishes them.

    MariaDB (detected from the server version) resumes from the saved GTID state with
    `auto_position`; MySQL from the saved binlog file/pos, taken after each XidEvent.
    """

    def __init__(self, settings: BinlogSettings, writer: DebeziumEnvelopeWriter,
                 checkpointer: Checkpointer) -> None:
        self.settings = settings
        self.writer = writer
        self.checkpointer = checkpointer
        self._decoders: dict[tuple[str, str, tuple[str, ...]],
                             tuple[BinlogRowDecoder, set[int]]] = {}
        self._control: Any = None
        self._mariadb = False
        self._file = ""
        self._gtid: str | None = None
        self._gtid_domain = 0
        self._gtid_state: dict[int, str] = {}
        self._standalone = False
        self._in_transaction = False
        self._thread: int | None = None
        self._done_pos = 0
        self._progressed = False
        self._begin = ""
        """Where the open transaction began (file:pos): its id when it has no GTID."""
        self._orders: dict[tuple[str, str], int] = {}
        """Rows of the open transaction so far, per table (the transaction block's orders)."""
        self._total_order = 0
        self._snapshots: IncrementalSnapshots | None = None

    def run(self, *, until_caught_up: bool = False,
            stop: threading.Event | None = None) -> CaptureStats:
        """Capture until stopped, or (until_caught_up) until the position the binlog had when
        the run began.

        A lost connection ends the session: the complete transactions are flushed and saved,
        and a new session resumes from the saved position after a full-jitter backoff.
        """
        stop = stop or threading.Event()
        self._control = self._connect()
        store = SnapshotStore(self.checkpointer.store.path)
        self._snapshots = IncrementalSnapshots(
            store, self.checkpointer.name, self._connect_snapshot_reader, self.writer,
            self.checkpointer.publisher, captures=self.settings.captures,
            rows_per_second=self.settings.snapshot_rows_per_sec, clock=self.checkpointer.clock)
        try:
            position = self._start_position()
            target = self._server_end() if until_caught_up else None
            attempt = 0
            while not stop.is_set():
                try:
                    self._session(position, target, stop)
                    break
                except (_StreamLost, pymysql.OperationalError, pymysql.InterfaceError) as lost:
                    _refuse_server_error(lost)
                    attempt = 1 if self._progressed else attempt + 1
                    position = self._after_lost_session(lost, attempt, stop)
            self.checkpointer.checkpoint()
        finally:
            if self._control is not None:
                self._control.close()
            self._snapshots.close()
            store.close()
        return self.checkpointer.stats

    def _session(self, position: CapturePosition, target: CapturePosition | None,
                 stop: threading.Event) -> None:
        from pymysqlreplication import BinLogStreamReader

        self._resume_from(position)
        if self._control is None:
            self._control = pymysql.connect(**self._control_settings())
        if target is not None and self._reached(target):
            return
        stream = BinLogStreamReader(**self._stream_arguments(position))
        try:
            self._follow(stream, target, stop)
        finally:
            stream.close()

    def _after_lost_session(self, lost: Exception, attempt: int,
                            stop: threading.Event) -> CapturePosition:
        """Save what is complete, wait, reconnect; the next session starts where this saved."""
        self.checkpointer.checkpoint()
        if RECONNECT_BACKOFF.exhausted(attempt):
            raise CaptureError(CaptureErrorReason.SOURCE_UNAVAILABLE,
                               f"binlog connection lost {attempt} times in a row "
                               f"({type(lost).__name__})")
        delay = RECONNECT_BACKOFF.delay(attempt, random.random())  # noqa: S311 - jitter
        logger.warning("capture %s lost its binlog connection (%s); resuming from %s in %.1fs",
                       self.checkpointer.name, type(lost).__name__,
                       self.checkpointer.describe_saved(), delay)
        stop.wait(delay)
        self._control.close()
        self._control = None  # the next session reconnects it
        saved = self.checkpointer.saved
        assert saved is not None
        return saved

    # Where to start, and with which server.

    def _control_settings(self) -> dict[str, Any]:
        # Autocommit: information_schema is read fresh after every schema change.
        return {"host": self.settings.host, "port": self.settings.port,
                "user": self.settings.user, "password": self.settings.password,
                "charset": "utf8mb4", "autocommit": True, "connect_timeout": 10}

    def _connect_snapshot_reader(self) -> Any:
        # TIMESTAMP values read in UTC, as the binlog gives them.
        return pymysql.connect(**self._control_settings(), init_command="SET time_zone = '+00:00'")

    def _connect(self) -> Any:
        try:
            return pymysql.connect(**self._control_settings())
        except pymysql.Error as error:
            raise CaptureError(CaptureErrorReason.SOURCE_UNAVAILABLE,
                               f"cannot connect to {self.settings.host}:{self.settings.port}: "
                               f"{error.args[-1] if error.args else error}") from None

    def _start_position(self) -> CapturePosition:
        with self._control.cursor() as cursor:
            self._mariadb = self._check_server(cursor)
            source = "mariadb" if self._mariadb else "mysql"
            self.checkpointer.source = source
            saved = self.checkpointer.store.load(self.checkpointer.name, source)
            position = saved if saved is not None else self._server_position(cursor)
        self.checkpointer.start_at(position, save=saved is None)
        logger.info("capture %s starts at %s (%s)", self.checkpointer.name,
                    position.describe(), "saved position" if saved else "new position")
        return position

    def _check_server(self, cursor: Any) -> bool:
        cursor.execute("SELECT VERSION(), @@log_bin")
        version, log_bin = cursor.fetchone()
        if not log_bin:
            raise CaptureError(CaptureErrorReason.SOURCE_UNSUITABLE,
                               "the server does not write a binlog (log_bin is off)")
        cursor.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN"
                       " ('binlog_format', 'binlog_row_image', 'binlog_row_metadata')")
        found = {str(name).lower(): str(value).upper() for name, value in cursor.fetchall()}
        wrong = [f"{name}={found.get(name, 'unsupported')}" for name, wanted in
                 _REQUIRED_BINLOG.items() if found.get(name) != wanted]
        if wrong:
            raise CaptureError(CaptureErrorReason.SOURCE_UNSUITABLE,
                               f"binlog capture needs binlog_format=ROW, binlog_row_image=FULL "
                               f"and binlog_row_metadata=FULL; the server has {', '.join(wrong)}")
        return "mariadb" in str(version).lower()

    def _server_position(self, cursor: Any) -> CapturePosition:
        """Where a first run starts: the binlog's current end, or its beginning."""
        if self.settings.start_from is CaptureStart.CURRENT:
            return self._current_end(cursor)
        if self._mariadb:
            return CapturePosition(gtid_state="")
        cursor.execute("SHOW BINARY LOGS")
        return CapturePosition(binlog_file=str(cursor.fetchone()[0]), binlog_pos=4)

    def _current_end(self, cursor: Any) -> CapturePosition:
        if self._mariadb:
            cursor.execute("SELECT @@gtid_binlog_pos")
            return CapturePosition(gtid_state=str(cursor.fetchone()[0] or ""))
        try:
            cursor.execute("SHOW BINARY LOG STATUS")
        except pymysql.err.ProgrammingError:
            cursor.execute("SHOW MASTER STATUS")  # before MySQL 8.2
        file, pos = cursor.fetchone()[:2]
        return CapturePosition(binlog_file=str(file), binlog_pos=int(pos))

    def _stream_arguments(self, position: CapturePosition) -> dict[str, Any]:
        from pymysqlreplication.event import (
            GtidEvent,
            HeartbeatLogEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        settings = self.settings
        # Always a blocking dump with heartbeats: MariaDB ends a non-blocking GTID dump by
        # resetting the connection, which can drop events the client has not read yet.
        arguments: dict[str, Any] = {
            "connection_settings": {
                "host": settings.host, "port": settings.port, "user": settings.user,
                "password": settings.password,
                "read_timeout": settings.heartbeat_seconds * 3 + 30,
            },
            "server_id": settings.server_id,
            "only_events": [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent,
                            QueryEvent, RotateEvent, GtidEvent, MariadbGtidEvent,
                            HeartbeatLogEvent],
            "only_schemas": list(settings.databases),
            "resume_stream": True,
            "blocking": True,
            "slave_heartbeat": settings.heartbeat_seconds,
            "is_mariadb": self._mariadb,
            "enable_logging": False,
            "pymysql_wrapper": _OneStreamConnection(),
        }
        if self._mariadb:
            arguments["auto_position"] = position.gtid_state or ""
        else:
            arguments["log_file"], arguments["log_pos"] = position.binlog_file, position.binlog_pos
        return arguments

    def _server_end(self) -> CapturePosition:
        """Where the binlog ends now: the target of a run that stops once caught up."""
        with self._control.cursor() as cursor:
            return self._current_end(cursor)

    def _reached(self, target: CapturePosition) -> bool:
        if self._mariadb:
            done = {domain: _gtid_seq(gtid) for domain, gtid in self._gtid_state.items()}
            return all(done.get(domain, -1) >= _gtid_seq(gtid)
                       for domain, gtid in _parse_gtid_state(target.gtid_state or "").items())
        return (self._file, self._done_pos) >= (target.binlog_file or "", target.binlog_pos or 0)

    def _resume_from(self, position: CapturePosition) -> None:
        """Forget the state of a lost session: the next one starts at `position`."""
        self._gtid_state = _parse_gtid_state(position.gtid_state or "")
        self._file = position.binlog_file or ""
        self._done_pos = position.binlog_pos or 0
        self._gtid, self._thread = None, None
        self._in_transaction = self._progressed = False
        self._transaction_begins("")

    # Following the stream.

    def _follow(self, stream: Any, target: CapturePosition | None,
                stop: threading.Event) -> None:
        from pymysqlreplication.event import HeartbeatLogEvent
        from pymysqlreplication.row_event import RowsEvent

        while not stop.is_set():
            event = stream.fetchone()
            if event is None:  # the server ended the dump (e.g. it is shutting down)
                if target is None:
                    raise _StreamLost("the server ended the binlog dump")
                return
            self._progressed = True
            if self._snapshots is not None:
                self._snapshots.step()
            if isinstance(event, RowsEvent):
                self._rows(event)
            elif isinstance(event, HeartbeatLogEvent):
                # The server had nothing to send for a heartbeat period: caught up for now.
                if self._snapshots is not None:
                    self._snapshots.idle()
                if target is not None:
                    return
                if self.checkpointer.due():
                    self.checkpointer.checkpoint()
            else:
                self._control_event(event)
                if target is not None and self._reached(target):
                    return

    def _control_event(self, event: Any) -> None:
        from pymysqlreplication.event import (
            GtidEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )

        if isinstance(event, XidEvent):
            self._transaction_done(event)
        elif isinstance(event, MariadbGtidEvent):
            self._gtid, self._gtid_domain = event.gtid, event.domain_id
            self._standalone = bool(event.flags & _FL_STANDALONE)
            self._in_transaction, self._thread = not self._standalone, None
            self._transaction_begins(_start_of(event, self._file))
        elif isinstance(event, GtidEvent):
            self._gtid = event.gtid
            self._transaction_begins(_start_of(event, self._file))
        elif isinstance(event, QueryEvent):
            self._query(event)
        elif isinstance(event, RotateEvent):
            self._file = event.next_binlog

    def _query(self, event: Any) -> None:
        statement = event.query.strip().upper()
        if statement == "BEGIN":
            self._in_transaction, self._thread = True, event.slave_proxy_id
            if self._gtid is None:  # with a GTID, the transaction began at its GTID event
                self._transaction_begins(_start_of(event, self._file))
            return
        if statement in _TRANSACTION_ENDS:
            self._transaction_done(event)
            return
        if statement.startswith(_NOT_SCHEMA_CHANGES):
            return
        # Anything else is DDL (row events carry the data): a captured table may have changed.
        self._decoders.clear()
        if not self._in_transaction:
            self._thread = event.slave_proxy_id
            self._transaction_done(event)

    def _transaction_done(self, event: Any) -> None:
        end = int(event.packet.log_pos)
        if self._mariadb:
            if self._gtid is not None:
                self._gtid_state[self._gtid_domain] = self._gtid
            position = CapturePosition(gtid_state=_gtid_state_text(self._gtid_state),
                                       binlog_file=self._file, binlog_pos=end)
        else:
            position = CapturePosition(binlog_file=self._file, binlog_pos=end)
        self._in_transaction, self._gtid, self._thread = False, None, None
        self._done_pos = end
        self._transaction_begins("")
        self.checkpointer.transaction_done(position)

    def _transaction_begins(self, begin: str) -> None:
        self._begin, self._orders, self._total_order = begin, {}, 0

    def _transaction_of(self, database: str, table: str) -> TransactionInfo | None:
        """The next change's place in its source transaction (Debezium's transaction block:
        the GTID, or where the transaction began in the binlog when it has none)."""
        transaction_id = self._gtid or self._begin
        if not transaction_id:
            return None
        self._total_order += 1
        order = self._orders[(database, table)] = self._orders.get((database, table), 0) + 1
        return TransactionInfo(transaction_id, self._total_order, order)

    def _rows(self, event: Any) -> None:
        from pymysqlreplication.row_event import DeleteRowsEvent, WriteRowsEvent

        database, table = event.schema, event.table
        if table == SIGNAL_TABLE and self._snapshots is not None:
            start = int(event.packet.log_pos) - int(event.packet.event_size)
            self._snapshots.signal(snapshot_marks(event.rows), SourceInfo(
                server_id=int(event.packet.server_id), file=self._file, pos=start,
                ts_ms=int(event.timestamp) * 1000, gtid=self._gtid))
            return
        if not self.settings.captures(database, table):
            return
        decoder = self._decoder(event)
        start = int(event.packet.log_pos) - int(event.packet.event_size)
        try:
            rows = event.rows
        except (ValueError, TypeError, LookupError, NotImplementedError) as error:
            raise CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                               f"a binlog row of {database}.{table} cannot be decoded: "
                               f"{type(error).__name__}") from None
        checks = not int(getattr(event, "flags", 0) or 0) & _NO_FOREIGN_KEY_CHECKS
        for index, row in enumerate(rows):
            source = SourceInfo(server_id=int(event.packet.server_id), file=self._file, pos=start,
                                ts_ms=int(event.timestamp) * 1000, row=index, gtid=self._gtid,
                                thread=self._thread,
                                transaction=self._transaction_of(database, table),
                                foreign_key_checks=checks)
            if isinstance(event, WriteRowsEvent):
                change = RowChange(decoder.table, EnvelopeOp.CREATE, None,
                                   decoder.row(row["values"], row["none_sources"]), source)
            elif isinstance(event, DeleteRowsEvent):
                change = RowChange(decoder.table, EnvelopeOp.DELETE,
                                   decoder.row(row["values"], row["none_sources"]), None, source)
            else:
                change = RowChange(
                    decoder.table, EnvelopeOp.UPDATE,
                    decoder.row(row["before_values"], row["before_none_sources"]),
                    decoder.row(row["after_values"], row["after_none_sources"]), source)
            self.checkpointer.publish(self.writer, change)
            if self._snapshots is not None:
                self._snapshots.changed(change)

    def _decoder(self, event: Any) -> BinlogRowDecoder:
        """The decoder of the event's table as the event describes it: checked against the
        table's definition once per table map, reloaded from information_schema when they
        differ."""
        database, table, columns = event.schema, event.table, event.columns
        names = tuple(str(column.name) for column in columns)
        cached = self._decoders.get((database, table, names))
        if cached is not None and event.table_id in cached[1]:
            return cached[0]
        if cached is not None and all(binlog_type_matches(column, binlog) for column, binlog
                                      in zip(cached[0].table.columns, columns, strict=True)):
            cached[1].add(event.table_id)
            return cached[0]
        if not all(names) or any(name.startswith("UNKNOWN_COL") for name in names):
            raise CaptureError(CaptureErrorReason.SOURCE_UNSUITABLE,
                               f"binlog rows of {database}.{table} carry no column names: set "
                               "binlog_row_metadata=FULL")
        with self._control.cursor() as cursor:
            current = load_mysql_table(cursor, database, table)
        if current is None:
            raise CaptureError(CaptureErrorReason.SCHEMA_MISMATCH,
                               f"binlog rows of {database}.{table} cannot be mapped: the table "
                               "no longer exists")
        decoder = BinlogRowDecoder(definition_for_binlog(current, columns))
        self._decoders[(database, table, names)] = (decoder, {event.table_id})
        return decoder


def _start_of(event: Any, file: str) -> str:
    """`file:pos` of where a binlog event begins."""
    return f"{file}:{int(event.packet.log_pos) - int(event.packet.event_size)}"


def _parse_gtid_state(text: str) -> dict[int, str]:
    """MariaDB's GTID state ("0-101-37,1-101-5") as domain → last GTID of that domain."""
    state: dict[int, str] = {}
    for gtid in filter(None, (part.strip() for part in text.split(","))):
        domain, _, _ = gtid.partition("-")
        state[int(domain)] = gtid
    return state


def _refuse_server_error(error: Exception) -> None:
    """A server error (code below 2000, e.g. 1236: the binlog no longer holds the saved
    position) will not go away by reconnecting; client errors (connection lost) may."""
    code = error.args[0] if isinstance(error, pymysql.Error) and error.args else None
    if isinstance(code, int) and code < 2000:
        message = str(error.args[1]) if len(error.args) > 1 else ""
        raise CaptureError(CaptureErrorReason.SOURCE_UNSUITABLE,
                           f"the server refused the binlog dump ({code}: {message[:300]})"
                           ) from None


def _gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


class _StreamLost(TidesyncError):
    """The binlog stream connection dropped; mysql-replication wanted to reconnect it."""

    code = ErrorCode.CAPTURE_FAILED


class _OneStreamConnection:
    """`pymysql.connect` for one BinLogStreamReader, refusing to reconnect its stream.

    mysql-replication reconnects a lost stream from its start position (MariaDB) or from the
    middle of a transaction (MySQL); a new session from the saved position is safer.
    """

    def __init__(self) -> None:
        self._streams = 0

    def __call__(self, **settings: Any) -> Any:
        if "cursorclass" not in settings:  # the control connection sets a cursor class
            self._streams += 1
            if self._streams > 1:
                raise _StreamLost("binlog stream connection lost")
        if "db" in settings:  # the library still uses pymysql's deprecated name
            settings["database"] = settings.pop("db")
        return pymysql.connect(**settings)


def _gtid_state_text(state: Mapping[int, str]) -> str:
    return ",".join(state[domain] for domain in sorted(state))
