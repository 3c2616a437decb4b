"""Built-in change capture: the ship database's row changes → Debezium records on the queue.

Two sources share one publishing path: the MySQL/MariaDB binlog (mysql-replication, here) and a
SQLite changelog filled by triggers (`capture_sqlite`). Every row change becomes the record
Debezium's MySQL connector writes (`envelope_writer`) on topic `<prefix>.<logical name>.<db>.
<table>`, keyed by the primary key so one row always lands in one partition; a delete is followed
by a tombstone unless switched off.

Delivery is at-least-once, as with Debezium. The resume position (MariaDB: the GTID state;
MySQL: binlog file/pos after the transaction's XID; SQLite: the changelog seq) is saved in a
small SQLite file (WAL, synchronous=FULL) only after the producer has acknowledged every record
up to that transaction's commit, so a transaction is never lost. A crash between that flush and
the save re-emits the transactions after the saved position: each re-emitted record carries the
same source coordinates (server_id, gtid, file, pos, row; for SQLite the changelog seq as pos)
as the first copy, so consumers can recognise and drop the duplicates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # typed here; confluent_kafka.admin hides it from mypy

from tidesync import failpoints
from tidesync.capture.envelope_writer import (
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.capture.tables import (
    BinlogRowDecoder,
    binlog_type_matches,
    definition_for_binlog,
    load_mysql_table,
)
from tidesync.cdc.debezium import NEW_KEY_HEADER, OLD_KEY_HEADER
from tidesync.config import CaptureSource, CaptureStart, Config
from tidesync.domain.backoff import Backoff
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import TidesyncError
from tidesync.domain.values import Row, Value

logger = logging.getLogger(__name__)

FAILPOINT_AFTER_FLUSH = "capture_after_flush"
"""Hit after the producer flushed a batch and before its position is saved (also as
`capture_after_flush#N` for the N-th checkpoint of the process)."""
FAILPOINT_AFTER_SAVE = "capture_after_save"

RECONNECT_BACKOFF = Backoff(initial_seconds=1.0, cap_seconds=60.0, max_attempts=10)
"""Between binlog sessions after a lost connection; the count restarts once events flow."""

INTERNAL_TABLES = frozenset({"_sync_applied", "_sync_session", "_tidesync_changelog"})
"""tidesync's own tables in a business database: never captured."""

Headers = tuple[tuple[str, bytes], ...]
_NO_HEADERS: Headers = ()



# --- the durable position ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapturePosition:
    """Where capture resumes. MariaDB resumes from `gtid_state` (file/pos are kept only to show
    where that was); MySQL from `binlog_file`/`binlog_pos`; SQLite after `changelog_seq`."""

    gtid_state: str | None = None
    binlog_file: str | None = None
    binlog_pos: int | None = None
    changelog_seq: int | None = None

    def describe(self) -> str:
        parts = []
        if self.gtid_state is not None:
            parts.append(f"gtid {self.gtid_state or '(empty)'}")
        if self.binlog_file is not None:
            parts.append(f"binlog {self.binlog_file}:{self.binlog_pos}")
        if self.changelog_seq is not None:
            parts.append(f"changelog seq {self.changelog_seq}")
        return ", ".join(parts) or "(none)"


_POSITION_DDL = (
    "CREATE TABLE IF NOT EXISTS capture_position ("
    " name TEXT PRIMARY KEY, source TEXT NOT NULL, gtid_state TEXT, binlog_file TEXT,"
    " binlog_pos INTEGER, changelog_seq INTEGER, saved_at TEXT NOT NULL)"
)


class SQLitePositionStore:
    """The resume positions of the captures on this ship, one row per logical name.

    WAL and synchronous=FULL: once `save` returns, the position survives a power cut.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(_POSITION_DDL)

    def load(self, name: str, source: str) -> CapturePosition | None:
        """The saved position of `name`; refuses one saved by a different kind of source."""
        row = self._db.execute(
            "SELECT source, gtid_state, binlog_file, binlog_pos, changelog_seq"
            " FROM capture_position WHERE name = ?", (name,),
        ).fetchone()
        if row is None:
            return None
        if row[0] != source:
            raise CaptureError(CaptureErrorReason.POSITION_MISMATCH,
                               f"the saved position of capture {name!r} belongs to a {row[0]} "
                               f"source, not {source}: use another logical name or position file")
        return CapturePosition(row[1], row[2], row[3], row[4])

    def saved(self, name: str) -> tuple[str, CapturePosition, str] | None:
        """(source kind, position, when it was saved) of `name`, whatever its kind."""
        row = self._db.execute(
            "SELECT source, gtid_state, binlog_file, binlog_pos, changelog_seq, saved_at"
            " FROM capture_position WHERE name = ?", (name,),
        ).fetchone()
        if row is None:
            return None
        return str(row[0]), CapturePosition(row[1], row[2], row[3], row[4]), str(row[5])

    def save(self, name: str, source: str, position: CapturePosition,
             saved_at: dt.datetime) -> None:
        self._db.execute(
            "INSERT INTO capture_position (name, source, gtid_state, binlog_file, binlog_pos,"
            " changelog_seq, saved_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET source = excluded.source, gtid_state = excluded.gtid_state,"
            " binlog_file = excluded.binlog_file, binlog_pos = excluded.binlog_pos,"
            " changelog_seq = excluded.changelog_seq, saved_at = excluded.saved_at",
            (name, source, position.gtid_state, position.binlog_file, position.binlog_pos,
             position.changelog_seq, saved_at.isoformat()),
        )

    def close(self) -> None:
        self._db.close()


# --- the producer --------------------------------------------------------------------------


def producer_settings(bootstrap_servers: str) -> dict[str, object]:
    """An idempotent, acks=all producer that partitions keys as Java clients do (murmur2),
    so a switch between Debezium and built-in capture keeps every key in its partition."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "message.timeout.ms": 300_000,
    }


class KafkaEnvelopePublisher:
    """Produces Debezium records to the Kafka API and creates topics that do not exist yet."""

    def __init__(self, bootstrap_servers: str, *, partitions: int = 1,
                 replication_factor: int = 1, settings: Mapping[str, object] | None = None,
                 flush_timeout_seconds: float = 120.0) -> None:
        if not bootstrap_servers:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               "no Kafka bootstrap servers configured (capture."
                               "kafka_bootstrap_servers or ship.kafka_bootstrap_servers)")
        self._config = {**producer_settings(bootstrap_servers), **(settings or {})}
        self._producer = Producer(self._config)
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 4})
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._flush_timeout = flush_timeout_seconds
        self._topics: set[str] | None = None
        self._failures = 0
        self._first_failure = ""
        self._converter = JsonConverter()
        self.produced = 0

    def publish(self, record: DebeziumRecord, headers: Headers = ()) -> None:
        self._ensure_topic(record.topic)
        key, value = self._converter.encode(record.key), self._converter.encode(record.value)
        while True:
            try:
                self._producer.produce(record.topic, key=key, value=value,
                                       headers=list(headers) or None, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
        self._producer.poll(0)
        self.produced += 1

    def flush(self) -> None:
        """Wait until every record produced so far is acknowledged; raise if any was not."""
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"{remaining} records not acknowledged within "
                               f"{self._flush_timeout:.0f}s")
        if self._failures:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"{self._failures} records failed; first: {self._first_failure}")

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._failures += 1
            self._first_failure = self._first_failure or f"{error.name()} ({error.str()})"

    def _ensure_topic(self, topic: str) -> None:
        if self._topics is None:
            self._topics = set(self._list_topics())
        if topic in self._topics:
            return
        futures = self._admin.create_topics(
            [NewTopic(topic, num_partitions=self._partitions,
                      replication_factor=self._replication_factor)],
            operation_timeout=30,
        )
        try:
            futures[topic].result(timeout=60)
            logger.info("created topic %s (%d partitions)", topic, self._partitions)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                                   f"cannot create topic {topic}: {error.args[0].str()}") from None
        self._topics.add(topic)

    def _list_topics(self) -> list[str]:
        try:
            return list(self._admin.list_topics(timeout=30).topics)
        except KafkaException as error:
            raise CaptureError(CaptureErrorReason.PUBLISH_FAILED,
                               f"cannot list topics: {error.args[0].str()}") from None

    def close(self) -> None:
        self._producer.flush(min(self._flush_timeout, 10.0))


class JsonConverter:
    """Record documents as Kafka's JsonConverter writes them (the same bytes as
    DebeziumRecord.key_bytes/value_bytes); the schema part, shared by every record of a
    table, is serialized once."""

    def __init__(self) -> None:
        self._schema_texts: dict[int, tuple[object, bytes]] = {}

    def encode(self, document: dict[str, Any] | None) -> bytes | None:
        if document is None:
            return None
        schema = document["schema"]
        cached = self._schema_texts.get(id(schema))
        if cached is None or cached[0] is not schema:
            cached = (schema, b'{"schema":' + _compact(schema) + b',"payload":')
            self._schema_texts[id(schema)] = cached
        return cached[1] + _compact(document["payload"]) + b"}"


def _compact(document: object) -> bytes:
    # As Kafka's JsonConverter writes it (and DebeziumRecord.value_bytes): compact UTF-8 JSON.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


# --- row changes as records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowChange:
    """One captured row change, before it is written as records."""

    table: TableDefinition
    op: EnvelopeOp
    before: Row | None
    after: Row | None
    source: SourceInfo


def change_records(writer: DebeziumEnvelopeWriter, change: RowChange, processed_at: dt.datetime,
                   *, tombstones: bool) -> list[tuple[DebeziumRecord, Headers]]:
    """The records Debezium writes for a row change: a delete is followed by its tombstone, and
    an update of the primary key is a delete of the old key and a create of the new one."""
    return _change_records(writer, change, processed_at, tombstones)


def _change_records(writer: DebeziumEnvelopeWriter, change: RowChange, processed_at: dt.datetime,
                    tombstones: bool) -> list[tuple[DebeziumRecord, Headers]]:
    table, before, after = change.table, change.before, change.after
    if change.op is EnvelopeOp.UPDATE and before is not None and after is not None and (
            _key_values(table, before) != _key_values(table, after)):
        old_key = writer.tombstone(table, before).key_bytes() or b""
        new_key = writer.tombstone(table, after).key_bytes() or b""
        records: list[tuple[DebeziumRecord, Headers]] = [
            (writer.change(table, EnvelopeOp.DELETE, before=before, after=None,
                           source=change.source, processed_at=processed_at),
             ((NEW_KEY_HEADER, new_key),))]
        if tombstones:
            records.append((writer.tombstone(table, before), _NO_HEADERS))
        records.append((writer.change(table, EnvelopeOp.CREATE, before=None, after=after,
                                      source=change.source, processed_at=processed_at),
                        ((OLD_KEY_HEADER, old_key),)))
        return records
    records = [(writer.change(table, change.op, before=before, after=after,
                              source=change.source, processed_at=processed_at), _NO_HEADERS)]
    if change.op is EnvelopeOp.DELETE and tombstones and before is not None:
        records.append((writer.tombstone(table, before), _NO_HEADERS))
    return records


def _key_values(table: TableDefinition, row: Row) -> tuple[tuple[type, Value], ...]:
    return tuple((type(row[name]), row[name]) for name in table.primary_key)


# --- batches and checkpoints ---------------------------------------------------------------


@dataclass
class CaptureStats:
    """What one run of capture did."""

    row_changes: int = 0
    records: int = 0
    transactions: int = 0
    checkpoints: int = 0
    position: CapturePosition | None = None


@dataclass
class Checkpointer:
    """Publishes records and saves the position of the last whole transaction, but only once
    the producer has acknowledged every record produced before it."""

    publisher: KafkaEnvelopePublisher
    store: SQLitePositionStore
    name: str
    source: str
    max_records: int = 2000
    interval_seconds: float = 0.5
    tombstones: bool = True
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    stats: CaptureStats = field(default_factory=CaptureStats)
    after_save: Callable[[CapturePosition], None] | None = None
    _position: CapturePosition | None = None
    _saved: CapturePosition | None = None
    _unsaved_records: int = 0
    _last_checkpoint: float = 0.0

    def __post_init__(self) -> None:
        self._last_checkpoint = self.monotonic()

    def start_at(self, position: CapturePosition, *, save: bool) -> None:
        """Where this run starts; a first start saves it at once (nothing to flush yet), so a
        restart never skips what was written while capture was down."""
        self._position = self._saved = self.stats.position = position
        if save:
            self.store.save(self.name, self.source, position, self.clock())

    def publish(self, writer: DebeziumEnvelopeWriter, change: RowChange) -> None:
        records = change_records(writer, change, self.clock(), tombstones=self.tombstones)
        for record, headers in records:
            self.publisher.publish(record, headers)
        self.stats.row_changes += 1
        self.stats.records += len(records)
        self._unsaved_records += len(records)

    def transaction_done(self, position: CapturePosition) -> None:
        """A transaction (or DDL) is complete up to `position`; checkpoint when due."""
        self._position = position
        self.stats.transactions += 1
        if self.due():
            self.checkpoint()

    def due(self) -> bool:
        if self._unsaved_records >= self.max_records:
            return True
        return (self._position != self._saved
                and self.monotonic() - self._last_checkpoint >= self.interval_seconds)

    def checkpoint(self) -> None:
        """Flush, then save the position of the last whole transaction."""
        self._last_checkpoint = self.monotonic()
        if self._unsaved_records:
            self.publisher.flush()
            self._unsaved_records = 0
        if self._position is None or self._position == self._saved:
            return
        self.stats.checkpoints += 1
        failpoints.hit(FAILPOINT_AFTER_FLUSH)
        failpoints.hit(f"{FAILPOINT_AFTER_FLUSH}#{self.stats.checkpoints}")
        self.store.save(self.name, self.source, self._position, self.clock())
        failpoints.hit(FAILPOINT_AFTER_SAVE)
        self._saved = self.stats.position = self._position
        if self.after_save is not None:
            self.after_save(self._position)
        logger.debug("capture %s saved position %s", self.name, self._position.describe())

    @property
    def saved(self) -> CapturePosition | None:
        return self._saved

    def describe_saved(self) -> str:
        return self._saved.describe() if self._saved is not None else "(none)"


# --- MySQL / MariaDB binlog ----------------------------------------------------------------


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

    def run(self, *, until_caught_up: bool = False,
            stop: threading.Event | None = None) -> CaptureStats:
        """Capture until stopped, or (until_caught_up) until the position the binlog had when
        the run began.

        A lost connection ends the session: the complete transactions are flushed and saved,
        and a new session resumes from the saved position after a full-jitter backoff.
        """
        stop = stop or threading.Event()
        self._control = self._connect()
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
            if isinstance(event, RowsEvent):
                self._rows(event)
            elif isinstance(event, HeartbeatLogEvent):
                # The server had nothing to send for a heartbeat period: caught up for now.
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
        elif isinstance(event, GtidEvent):
            self._gtid = event.gtid
        elif isinstance(event, QueryEvent):
            self._query(event)
        elif isinstance(event, RotateEvent):
            self._file = event.next_binlog

    def _query(self, event: Any) -> None:
        statement = event.query.strip().upper()
        if statement == "BEGIN":
            self._in_transaction, self._thread = True, event.slave_proxy_id
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
        self.checkpointer.transaction_done(position)

    def _rows(self, event: Any) -> None:
        from pymysqlreplication.row_event import DeleteRowsEvent, WriteRowsEvent

        database, table = event.schema, event.table
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
        for index, row in enumerate(rows):
            source = SourceInfo(server_id=int(event.packet.server_id), file=self._file, pos=start,
                                ts_ms=int(event.timestamp) * 1000, row=index, gtid=self._gtid,
                                thread=self._thread)
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


# --- composition from the configuration ----------------------------------------------------


def topic_prefix(config: Config) -> str:
    """`<capture.topic_prefix>.<logical name>`: Debezium's `topic.prefix` (its server name)."""
    logical_name = config.capture.logical_name or config.ship.node_id
    if not logical_name:
        raise CaptureError(CaptureErrorReason.CONFIGURATION,
                           "capture.logical_name (or ship.node_id) must be set")
    return f"{config.capture.topic_prefix}.{logical_name}"


def binlog_settings(config: Config) -> BinlogSettings:
    capture = config.capture
    databases = tuple(filter(None, (d.strip() for d in capture.databases.split(","))))
    tables = frozenset(
        (database, table) for database, _, table in
        (item.strip().partition(".") for item in capture.tables.split(",") if item.strip())
    )
    return BinlogSettings(
        host=capture.mysql_host, port=capture.mysql_port, user=capture.mysql_user,
        password=capture.mysql_password, server_id=capture.server_id,
        databases=databases or tuple(sorted({database for database, _ in tables})),
        tables=tables, start_from=capture.start_from,
        heartbeat_seconds=capture.heartbeat_seconds,
    )


def run_capture(config: Config, *, until_caught_up: bool = False,
                stop: threading.Event | None = None,
                clock: Clock = utc_now) -> CaptureStats:
    """Run the configured capture (binlog or SQLite changelog) until stopped or caught up."""
    capture = config.capture
    prefix = topic_prefix(config)
    with contextlib.ExitStack() as resources:
        publisher = KafkaEnvelopePublisher(
            capture.kafka_bootstrap_servers or config.ship.kafka_bootstrap_servers,
            partitions=capture.topic_partitions,
            replication_factor=capture.topic_replication_factor,
        )
        resources.callback(publisher.close)
        store = SQLitePositionStore(capture.position_path)
        resources.callback(store.close)
        checkpointer = Checkpointer(
            publisher, store, prefix, source=capture.source.value,
            max_records=capture.batch_max_records,
            interval_seconds=capture.flush_interval_ms / 1000,
            tombstones=capture.tombstones_on_delete, clock=clock,
        )
        writer = DebeziumEnvelopeWriter(prefix)
        if capture.source is CaptureSource.MYSQL:
            binlog = MySQLBinlogCapture(binlog_settings(config), writer, checkpointer)
            return binlog.run(until_caught_up=until_caught_up, stop=stop)
        from tidesync.capture.sqlite import SQLiteChangelogCapture

        changelog = SQLiteChangelogCapture(
            capture.sqlite_path, writer, checkpointer,
            poll_interval_seconds=capture.sqlite_poll_interval_ms / 1000,
            keep_rows=capture.changelog_keep_rows,
        )
        return changelog.run(until_caught_up=until_caught_up, stop=stop)
