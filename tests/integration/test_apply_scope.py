"""Per-node scope on apply (issue 13, item 4) through the apply processor on real PostgreSQL and
MariaDB: a ship writes only the tables `[apply.node_tables]` names for it."""

from __future__ import annotations

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    migrated_pool,
    pg_rows,
    receive,
    shore_apps,
)
from tests.integration.test_apply_processor import drain, items, make_applier, node
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services


@pytest.fixture
def target_db(shore_mariadb, make_mariadb_database):
    name = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=name, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, name, "items", "shore")
    yield name, conn
    conn.close()


@pytest.fixture
def shore(pg_database):
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps:
        yield pool, apps


def apply_all(shore, applier, scope: ApplyConfig) -> None:
    pool, apps = shore
    drain(ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier,
                         ManualClock(), ProcessorSettings(worker_id="w1", scope=scope)))


def results(pool, node_id: str) -> set[tuple[str, str | None]]:
    return set(pg_rows(pool, "SELECT result, reason_code FROM inbox_event"
                             " WHERE origin_node_id = %s", (node_id,)))


def test_each_node_writes_only_the_tables_its_allow_list_names(shore, target_db,
                                                              shore_mariadb):
    database, conn = target_db
    allowed, stranger = ShipLog(node(), "fleet"), ShipLog(node(), "fleet")
    other_tables = ShipLog(node(), "fleet")
    receive(shore[0], allowed.node_id, [allowed.insert(1, "a", 1, "1.00")])
    receive(shore[0], stranger.node_id, [stranger.insert(2, "b", 1, "1.00")])
    receive(shore[0], other_tables.node_id, [other_tables.insert(3, "c", 1, "1.00")])
    scope = ApplyConfig({allowed.node_id: "fleet.items", other_tables.node_id: "fleet.crew",
                         "*": "stores.*"})

    apply_all(shore, make_applier(shore_mariadb, database), scope)

    assert results(shore[0], allowed.node_id) == {("APPLIED", None)}
    assert results(shore[0], stranger.node_id) == {("REJECTED", "NOT_AUTHORIZED_FOR_TABLE")}
    assert results(shore[0], other_tables.node_id) == {
        ("REJECTED", "NOT_AUTHORIZED_FOR_TABLE")}
    assert set(items(conn)) == {1}
