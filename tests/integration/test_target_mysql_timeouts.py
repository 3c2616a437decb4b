"""MySQL timeouts on every target connection (issue 13, item 8), on a real MariaDB: the
`[target]` timeouts reach the connection, a statement waiting for a metadata lock gives up, and
a COMMIT whose answer never comes over a half-open link is "outcome unknown", which the apply
processor settles from the ledger."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    inbox_states,
    ledger_ids,
    migrated_pool,
    receive,
    shore_apps,
)
from tests.integration.test_apply_processor import items, node
from tidesync.bootstrap.target import mysql_target_applier
from tidesync.config import TargetConfig
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.contract import TransientTargetError
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """A database of its own: the processor takes the first pending job it finds, and another
    test's leftover jobs in a shared database would be that job."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


class HalfOpenProxy:
    """A TCP relay to the server that can stop relaying the server's answers while the
    connection stays open (a half-open link: what the client sent still arrives)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.answers_lost = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            threading.Thread(target=self._relay, args=(client, server, False),
                             daemon=True).start()
            threading.Thread(target=self._relay, args=(server, client, True),
                             daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        try:
            while data := source.recv(65536):
                if not (answers and self.answers_lost.is_set()):
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def close(self) -> None:
        for end in self.sockets:
            end.close()


@pytest.fixture
def target_db(shore_mariadb: MariaDBInstance, make_mariadb_database) -> Iterator[tuple]:
    name = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=name, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, name, "items", "shore")
    yield name, conn
    conn.close()


def configured_applier(instance: MariaDBInstance, database: str, port: int | None = None,
                       **timeouts: int) -> MySQLTargetApplier:
    """The applier `tidesync shore work` builds from a `[target]` section."""
    target = TargetConfig(host=instance.host, port=port or instance.port, user=instance.user,
                          password=instance.password, node_id="shore", **timeouts)
    return mysql_target_applier(target, route=lambda _db, table: (database, table))


def test_every_connection_carries_the_configured_timeouts(shore_mariadb, target_db):
    database, _ = target_db
    applier = configured_applier(shore_mariadb, database, connect_timeout_seconds=7,
                                 read_timeout_seconds=40, write_timeout_seconds=30,
                                 lock_wait_timeout_seconds=9)
    try:
        for _ in range(2):  # the first connection, and the one opened after it was lost
            session = applier._query("SELECT @@session.innodb_lock_wait_timeout,"
                                     " @@session.lock_wait_timeout")
            connection = applier._connection
            assert session == [(9, 9)]
            assert (connection.connect_timeout, connection._read_timeout,
                    connection._write_timeout) == (7, 40, 30)
            applier.close()
    finally:
        applier.close()


def test_a_statement_waiting_for_a_metadata_lock_gives_up(shore_mariadb, target_db):
    database, _ = target_db
    ship = ShipLog(node(), "shipdb")
    applier = configured_applier(shore_mariadb, database, read_timeout_seconds=5,
                                 lock_wait_timeout_seconds=1)
    holder = shore_mariadb.connect(database=database, autocommit=True)
    try:
        with holder.cursor() as cursor:
            cursor.execute("LOCK TABLES items WRITE")  # as a long ALTER TABLE would
            with pytest.raises(TransientTargetError) as caught:
                applier.apply_chunk([ship.insert(1, "anchor", 1, "1.00")])
            cursor.execute("UNLOCK TABLES")
        assert caught.value.reason_code == "LOCK_WAIT_TIMEOUT"
    finally:
        holder.close()
        applier.close()


def test_a_commit_whose_answer_is_lost_is_settled_from_the_ledger(
        shore_mariadb, target_db, pg_database, monkeypatch):
    database, conn = target_db
    proxy = HalfOpenProxy((shore_mariadb.host, shore_mariadb.port))
    applier = configured_applier(shore_mariadb, database, port=proxy.port,
                                 read_timeout_seconds=3, lock_wait_timeout_seconds=1)
    real_commit = applier._commit

    def commit_over_a_link_that_goes_half_open() -> None:
        proxy.answers_lost.set()
        real_commit()

    ship = ShipLog(node(), "shipdb")
    event = ship.insert(1, "anchor", 3, "10.50")
    clock = ManualClock()
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps:
        receive(pool, ship.node_id, [event])
        processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                                   applier, clock, ProcessorSettings(worker_id="w1"),
                                   draw=lambda: 0.5)
        try:
            monkeypatch.setattr(applier, "_commit", commit_over_a_link_that_goes_half_open)
            assert processor.run_once() == 0  # the outcome is unknown: nothing terminal yet
            monkeypatch.undo()
            proxy.answers_lost.clear()
            assert ledger_ids(conn, database) == [str(event.event_id)]  # it did commit

            clock.advance(3600)
            assert processor.run_once() == 1
            assert inbox_states(pool, ship.node_id)[event.event_id] == ("TERMINAL", "APPLIED")
            assert ledger_ids(conn, database) == [str(event.event_id)]  # applied once
            assert items(conn)[1][:2] == ("anchor", 3)
        finally:
            applier.close()
            proxy.close()
