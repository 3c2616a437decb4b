"""The log canary (issue 13, item 11): distinctive business values planted in an end-to-end run
(business columns and record keys; applied, rejected and conflicting changes) never appear in
any log line of any process: the capture and the shore server in this process (caplog, every
tidesync logger at DEBUG), `tidesync ship run` and `tidesync shore work` (their output)."""

from __future__ import annotations

import logging

import pytest

from tests.e2e.test_ship_to_shore import (
    Pipeline,
    applied,
    capturing,
    finish,
    pipeline,
    wait_until,
)
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

CANARY = "CANARY-7f3a9"
SHIP_CANARIES = ("CREATE TABLE canaries (code VARCHAR(40) NOT NULL PRIMARY KEY,"
                 " note VARCHAR(120) NULL) ENGINE=InnoDB")
# The shore's note column is shorter: a long canary note is REJECTED there (DATA_TOO_LONG).
SHORE_CANARIES = SHIP_CANARIES.replace("VARCHAR(120)", "VARCHAR(30)")


def add_canary_table(state: Pipeline) -> None:
    for conn, ddl, node in ((state.ship_conn, SHIP_CANARIES, state.ship_config.node_id),
                            (state.shore_conn, SHORE_CANARIES, "shore")):
        with conn.cursor() as cursor:
            cursor.execute(ddl)
        enable_mysql_table(conn, state.ship_database, "canaries", node)
    # Like the pipeline's tables, its rows carry the ship's revisions.
    state.client_env["TIDESYNC_SHIP__BIDIRECTIONAL_TABLES"] += f",{state.ship_database}.canaries"


def ship_sql(state: Pipeline, statement: str, params: tuple[object, ...] = ()) -> None:
    with state.ship_conn.cursor() as cursor:
        cursor.execute(statement, params)


def plant(state: Pipeline) -> None:
    """Canary values as record keys and column values: one applied, one too long for the shore,
    one row edited on both sides (a conflict), then deleted on the ship."""
    ship_sql(state, "INSERT INTO canaries (code, note) VALUES (%s, %s), (%s, %s)",
             (f"{CANARY}-key-1", f"{CANARY}-note", f"{CANARY}-key-2", f"{CANARY}-long" * 6))
    ship_sql(state, "INSERT INTO accounts (id, owner, balance, opened)"
                    " VALUES (1, %s, 12345.67, '2030-01-02 03:04:05')",
             (f"{CANARY}-owner",))
    wait_until(lambda: applied(state) >= 2, 120, "the canary rows to reach the shore")
    with state.shore_conn.cursor() as cursor:
        cursor.execute("UPDATE accounts SET owner = %s WHERE id = 1", (f"{CANARY}-shore",))
    ship_sql(state, "UPDATE accounts SET owner = %s WHERE id = 1", (f"{CANARY}-ship",))
    ship_sql(state, "DELETE FROM canaries WHERE code = %s", (f"{CANARY}-key-1",))


def results(pg_database, node_id: str) -> set[str]:
    with pg_database.connect() as conn:
        rows = conn.execute("SELECT DISTINCT result FROM inbox_event WHERE origin_node_id = %s",
                            (node_id,)).fetchall()
    return {row[0] for row in rows}


def test_planted_business_values_appear_in_no_log_line(pg_database, ship_mariadb,
                                                        shore_mariadb, kafka_broker,
                                                        make_mariadb_database, tmp_path,
                                                        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="tidesync")
    with pipeline(pg_database, ship_mariadb, shore_mariadb, kafka_broker,
                  make_mariadb_database, tmp_path) as state:
        add_canary_table(state)
        with capturing(state.capture_config, state.ship_conn):
            client = state.start_client()
            worker = state.start_worker("w-canary")
            plant(state)
        for process in (client, worker):
            state.assert_running(process)
            assert state.stop(process) == 0, state.output(process)
        finish(state)
        outputs = {log.name: log.read_text(errors="replace") for log in state.logs.values()}
    # The run went through the paths that talk about rows: applied, rejected, conflicting.
    assert {"APPLIED", "REJECTED", "CONFLICT_RECORDED"} <= results(
        pg_database, state.ship_config.node_id)
    assert len(outputs) >= 4 and all(outputs.values())
    for name, text in outputs.items():
        assert [line for line in text.splitlines() if CANARY in line] == [], name
    in_process = [record.getMessage() for record in caplog.records]
    assert in_process, "no in-process log line was captured"
    assert [line for line in in_process if CANARY in line] == []
    assert CANARY not in caplog.text
