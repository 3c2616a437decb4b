"""Sync rules end to end on the real parts: two ships and the shore on MariaDB, built-in binlog
capture into the broker, `tidesync ship run` per ship, `tidesync shore work` and the shore
server, rules released as an operator does it.

Ship A (group "tankers") and ship B run different rules for the same tables: A keeps the crew's
passport numbers and its draft purchase orders on board, B sends everything. A one-way table
without sync metadata on the shore takes a thousand changes and ends equal to the ship's; a
two-way table keeps syncing both ways. A rule change published while the ship writes switches
at one queue position, losing and repeating nothing; a version one ship cannot run leaves it
on the previous one and says why; a rollback brings both back. The sensitive value planted on
ship A is found nowhere outside the ship's own queue: not on the shore (MariaDB, PostgreSQL,
the received bodies), not in the ship's state store, not in any log line.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.fleet_support import (
    OrderWriter,
    cli_ok,
    file_places,
    keys_by_offset,
    mariadb_places,
    noon_workload,
    offered,
    postgres_places,
    release_in_process,
    release_with_cli,
    reports,
    rule_status,
    runs,
    sqlite_files,
    switch_offsets,
)
from tests.e2e.test_bidirectional import POLICIES, T0, Fleet, eventually, fleet
from tests.integration.test_ingress import make_config
from tests.service_policy import give_up
from tidesync.apps.rules import RuleReleasesApplication
from tidesync.bootstrap.rules import open_rule_releases
from tidesync.config import Config, TargetConfig
from tidesync.localservices import PostgresDatabase, ServiceUnavailable

pytestmark = pytest.mark.services

CANARY = "PASSPORT-CANARY-7f3a9"
VISIBLE = "PASSPORT-B-VISIBLE-91c2"  # ship B's rules send passports: the search must find it
SENTINEL = 99_999  # the last row a writer inserts: once it is ashore, everything before is

SHIP_TABLES = {
    "crew": ("CREATE TABLE crew (id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NOT NULL,"
             " `rank` VARCHAR(30) NOT NULL, passport_no VARCHAR(40) NULL,"
             " updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB"),
    "purchase_order": ("CREATE TABLE purchase_order (id INT NOT NULL PRIMARY KEY,"
                       " supplier VARCHAR(60) NOT NULL, amount DECIMAL(12,2) NOT NULL,"
                       " status VARCHAR(12) NOT NULL, updated_at DATETIME(6) NOT NULL)"
                       " ENGINE=InnoDB"),
    "noon_report": ("CREATE TABLE noon_report (id INT NOT NULL PRIMARY KEY,"
                    " vessel VARCHAR(40) NOT NULL, speed DECIMAL(6,2) NOT NULL,"
                    " remarks VARCHAR(200) NULL, engine_hours INT NULL,"
                    " reported_at DATETIME(6) NOT NULL) ENGINE=InnoDB"),
}
NOON = "id, vessel, speed, remarks, reported_at"  # what noon@1 sends
# Ship B's noon report has no engine hours: a rule version naming them cannot run there.
SHIP_B_NOON = SHIP_TABLES["noon_report"].replace(" engine_hours INT NULL,", "")

RULES = {
    "crew-tankers": """
id = "crew-tankers"
description = "Crew list of the tankers; passports stay on board"
direction = "UPLINK"
source = "{db}.crew"
business_time = "updated_at"
[select]
groups = ["tankers"]
[columns]
sensitive = ["passport_no"]
""",
    "crew-full": """
id = "crew-full"
direction = "UPLINK"
source = "{db}.crew"
[select]
nodes = ["{b}"]
""",
    "po-tankers": """
id = "po-tankers"
description = "Purchase orders of the tankers, without drafts"
direction = "UPLINK"
source = "{db}.purchase_order"
filter = "{po_filter}"
[select]
groups = ["tankers"]
""",
    "po-full": """
id = "po-full"
direction = "UPLINK"
source = "{db}.purchase_order"
[select]
nodes = ["{b}"]
""",
    "noon": """
id = "noon"
direction = "UPLINK"
source = "{db}.noon_report"
[select]
nodes = ["{a}", "{b}"]
[columns]
include = [{noon_columns}]
""",
    "cargo": """
id = "cargo"
direction = "BIDIRECTIONAL"
source = "{db}.cargo_manual"
[select]
nodes = ["{a}", "{b}"]
[conflicts]
policy = "MANUAL"
""",
}
PO_FILTER_1 = "status <> 'DRAFT'"
PO_FILTER_2 = "status <> 'DRAFT' AND status <> 'CANCELLED'"
NOON_COLUMNS_1 = '"id", "vessel", "speed", "remarks", "reported_at"'
NOON_COLUMNS_2 = NOON_COLUMNS_1 + ', "engine_hours"'


# ----------------------------------------------------------------------------- the fleet


@dataclass
class RulesFleet:
    """The fleet, its servers, its own event store and the rule releases application."""

    fleet: Fleet
    servers: dict[str, Any]
    pg: PostgresDatabase
    app: RuleReleasesApplication
    target: TargetConfig
    broker: Any
    pg_conn: psycopg.Connection[Any]
    cli_output: list[str] = field(default_factory=list)

    @property
    def a(self) -> Any:
        return self.fleet.ships["a"]

    @property
    def b(self) -> Any:
        return self.fleet.ships["b"]

    def rule_text(self, rule_id: str, **values: str) -> str:
        defaults = {"db": self.fleet.database, "a": self.a.name, "b": self.b.name,
                    "po_filter": PO_FILTER_1, "noon_columns": NOON_COLUMNS_1}
        return RULES[rule_id].format(**{**defaults, **values})

    def rule_file(self, rule_id: str, **values: str) -> Path:
        path = self.fleet.log_dir / f"{rule_id}-{len(self.cli_output)}.toml"
        path.write_text(self.rule_text(rule_id, **values), encoding="utf-8")
        return path

    def cli(self, *args: str) -> str:
        printed = cli_ok(self.fleet, *args)
        self.cli_output.append(printed)
        return printed

    def query(self, key: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        node = self.fleet.shore if key == "shore" else self.fleet.ships[key]
        with node.conn.cursor() as cursor:
            cursor.execute(f"USE `{self.fleet.database}`")
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def execute(self, key: str, sql: str, params: tuple[Any, ...] = ()) -> None:
        node = self.fleet.shore if key == "shore" else self.fleet.ships[key]
        self.fleet.execute(node, sql, params)

    def ashore(self, table: str, key: int) -> bool:
        return bool(self.query("shore", f"SELECT 1 FROM {table} WHERE id = %s", (key,)))

    def wait_active(self, rule_id: str, version: int, timeout: float = 120) -> None:
        eventually(lambda: offered(self.app, rule_id) == (version, "ACTIVE"),
                   f"{rule_id}@{version} to become ACTIVE", timeout)


@pytest.fixture
def rules_fleet(ship_mariadb, second_ship_mariadb, shore_mariadb, kafka_broker,
                tmp_path) -> Iterator[RulesFleet]:
    # An event store of its own: once a rule is released the shore applies by rules only,
    # which the other tests of the session must not inherit.
    try:
        pg = PostgresDatabase().create()
    except ServiceUnavailable as unavailable:
        give_up(str(unavailable))
    servers = {"shore": shore_mariadb, "a": ship_mariadb, "b": second_ship_mariadb}
    target = TargetConfig(host=shore_mariadb.host, port=shore_mariadb.port,
                          user=shore_mariadb.user, password=shore_mariadb.password,
                          node_id="shore")
    try:
        with fleet(pg, servers, kafka_broker, tmp_path, POLICIES,
                   heartbeat_interval_seconds=5) as state:
            # Few PostgreSQL connections per process: the server is shared.
            for env in (state.worker_env, state.cli_env):
                env.update(TIDESYNC_EVENT_STORE__POSTGRES_POOL_SIZE="2",
                           TIDESYNC_SHORE__DATABASE_POOL_SIZE="2")
            app = open_rule_releases(Config(event_store=make_config(pg).event_store))
            try:
                with psycopg.connect(pg.dsn, autocommit=True) as conn:
                    yield RulesFleet(state, servers, pg, app, target, kafka_broker, conn)
            finally:
                app.close()
    finally:
        pg.drop()


def create_tables(rf: RulesFleet, *tables: str) -> None:
    """The ships' tables as they are (no sync metadata: the rules here are one-way) and the
    shore's, enabled one-way as an operator does it."""
    for key in ("a", "b", "shore"):
        for table in tables:
            ddl = SHIP_TABLES[table]
            if key == "b" and table == "noon_report":
                ddl = SHIP_B_NOON
            rf.execute(key, ddl)
    for table in tables:
        rf.cli("target", "enable", f"{rf.fleet.database}.{table}", "--direction", "UPLINK")
    create_topics(rf, *tables)


def create_topics(rf: RulesFleet, *tables: str) -> None:
    """The ships' capture topics of new tables, made before the ships start: a ship looks for
    new topics only every half minute."""
    token = rf.fleet.database.removeprefix("fleet_")
    for key in ("a", "b"):
        for table in tables:
            rf.broker.create_topic(f"sync.cdc.{key}{token}.{rf.fleet.database}.{table}")


def start(rf: RulesFleet) -> None:
    rf.fleet.start_worker()
    rf.fleet.start_ship("a")
    rf.fleet.start_ship("b")


# ----------------------------------------------------------------------------- the ships' writes


def write_crew(rf: RulesFleet) -> None:
    rows_a = [(1, "Ann Berg", "Master", "PA-1001"), (2, "Bo Lind", "Chief Officer", "PA-1002"),
              (3, "Cai Holm", "Bosun", CANARY), (4, "Dag Ek", "Cook", None)]
    rf.execute("a", "INSERT INTO crew (id, name, `rank`, passport_no, updated_at) VALUES"
               " (%s, %s, %s, %s, %s), (%s, %s, %s, %s, %s), (%s, %s, %s, %s, %s),"
               " (%s, %s, %s, %s, %s)", tuple(v for row in rows_a for v in (*row, T0)))
    # A change of the sensitive column alone sends nothing; with another column, only that.
    rf.execute("a", "UPDATE crew SET passport_no = %s WHERE id = 1", (f"{CANARY}-renewed",))
    rf.execute("a", "UPDATE crew SET `rank` = 'Boatswain', passport_no = %s WHERE id = 3",
               (f"{CANARY}-again",))
    rf.execute("a", "DELETE FROM crew WHERE id = 4")
    rf.execute("b", "INSERT INTO crew (id, name, `rank`, passport_no, updated_at) VALUES"
               " (101, 'Eva Strand', 'Master', %s, %s), (102, 'Fil Ros', 'Cook', NULL, %s)",
               (VISIBLE, T0, T0))


ORDER_STATUSES = ("DRAFT", "OPEN", "CANCELLED", "DRAFT", "OPEN", "CANCELLED")


def write_orders(rf: RulesFleet, ship: str, first: int) -> list[int]:
    """One order of each status (twice), keys from `first`; the keys."""
    keys = list(range(first, first + len(ORDER_STATUSES)))
    for key, status in zip(keys, ORDER_STATUSES, strict=True):
        rf.execute(ship, "INSERT INTO purchase_order (id, supplier, amount, status, updated_at)"
                   " VALUES (%s, 'Bunker Co', 10.50, %s, %s)", (key, status, T0))
    return keys


def ledger_count(rf: RulesFleet, node: str, table: str) -> int:
    (count,), = rf.query("shore", "SELECT count(*) FROM _sync_applied WHERE origin_node_id = %s"
                         " AND table_name = %s", (node, table))
    return int(count)


def inbox_results(rf: RulesFleet, node: str, table: str) -> dict[str, int]:
    rows = rf.pg_conn.execute("SELECT coalesce(result, state), count(*) FROM inbox_event"
                              " WHERE origin_node_id = %s AND source_topic LIKE %s GROUP BY 1",
                              (node, f"%.{table}")).fetchall()
    return {str(result): int(count) for result, count in rows}


# ----------------------------------------------------------------------------- the phases


def release_first_rules(rf: RulesFleet) -> None:
    create_tables(rf, "crew", "purchase_order", "noon_report")
    rf.cli("nodes", "profile", rf.a.name, "--group", "tankers", "--reason", "tanker fleet")
    for rule_id in RULES:
        assert release_in_process(rf.app, rf.target, rf.rule_text(rule_id),
                                  "first rules") == (rule_id, 1)
    start(rf)
    for rule_id in RULES:
        rf.wait_active(rule_id, 1)
    listing = rf.cli("rules", "list")
    assert all(rule_id in listing for rule_id in RULES), listing


def check_rules_per_ship(rf: RulesFleet) -> tuple[int, int]:
    """Phase 1: each ship's rules on crew and purchase orders; the one-way table's thousand
    changes; the two-way table both ways. Returns the noon changes of ship A (synced,
    unsynced)."""
    write_crew(rf)
    orders_a = write_orders(rf, "a", 1)
    orders_b = write_orders(rf, "b", 100_001)
    synced, unsynced = noon_workload(rf.a.conn, random.Random(20261201), 1000)
    rf.execute("a", "INSERT INTO noon_report (id, vessel, speed, reported_at)"
               " VALUES (%s, 'END', 0, %s)", (SENTINEL, T0))
    rf.execute("b", "INSERT INTO noon_report (id, vessel, speed, remarks, reported_at)"
               " VALUES (900001, 'MT Beta', 11.5, 'from B', %s)", (T0,))
    rf.execute("shore", "INSERT INTO cargo_manual (id, item, qty, changed_at)"
               " VALUES (1, 'hull paint', 4, %s)", (T0,))

    eventually(lambda: rf.ashore("noon_report", SENTINEL) and rf.ashore("noon_report", 900001)
               and rf.ashore("crew", 102) and rf.ashore("purchase_order", orders_b[-1])
               and rf.ashore("purchase_order", orders_a[-1])
               and ledger_count(rf, rf.a.name, "crew") >= 6,
               "the ships' changes ashore", timeout=240)
    # Crew: ship A's rows without passports (the passport-only change sent nothing), ship B's
    # with theirs; the same table under two rules.
    crew = rf.query("shore", "SELECT id, name, `rank`, passport_no FROM crew ORDER BY id")
    assert crew == [(1, "Ann Berg", "Master", None), (2, "Bo Lind", "Chief Officer", None),
                    (3, "Cai Holm", "Boatswain", None), (101, "Eva Strand", "Master", VISIBLE),
                    (102, "Fil Ros", "Cook", None)]
    assert ledger_count(rf, rf.a.name, "crew") == 4 + 1 + 1  # inserts, rank change, delete
    # Purchase orders: ship A's without drafts, ship B's of every status.
    assert [row[0] for row in rf.query("shore", "SELECT id FROM purchase_order ORDER BY id")
            ] == [key for key, status in zip(orders_a, ORDER_STATUSES, strict=True)
                  if status != "DRAFT"] + orders_b
    assert ledger_count(rf, rf.a.name, "purchase_order") == 4
    # The one-way table: ship A's rows exactly, each change applied once.
    ship = rf.query("a", f"SELECT {NOON} FROM noon_report WHERE id < 900000 ORDER BY id")
    shore = rf.query("shore", f"SELECT {NOON} FROM noon_report WHERE id < 900000 ORDER BY id")
    assert len(ship) > 100 and shore == ship
    assert ledger_count(rf, rf.a.name, "noon_report") == synced + 1
    assert inbox_results(rf, rf.a.name, "noon_report") == {"APPLIED": synced + 1}
    assert rf.query("shore", "SELECT DISTINCT engine_hours FROM noon_report") == [(None,)]
    assert "_sync_revision" not in {row[0] for row in rf.query(
        "shore", "SELECT column_name FROM information_schema.columns WHERE table_schema ="
        " DATABASE() AND table_name = 'noon_report'")}
    # The two-way table: a shore edit reaches both ships; a ship's edit comes ashore.
    eventually(lambda: all(rf.query(k, "SELECT qty FROM cargo_manual WHERE id = 1") == [(4,)]
                           for k in ("a", "b")), "the shore's cargo row on both ships")
    rf.execute("b", "UPDATE cargo_manual SET qty = 9 WHERE id = 1")
    eventually(lambda: rf.query("shore", "SELECT qty FROM cargo_manual WHERE id = 1") == [(9,)],
               "ship B's cargo edit ashore")
    return synced, unsynced


def change_order_filter(rf: RulesFleet) -> None:
    """Phase 2a: po-tankers@2 also leaves cancelled orders on board; it is released while
    ship A writes orders, and the switch loses and repeats nothing."""
    conn = rf.servers["a"].connect(database=rf.fleet.database, autocommit=True)
    writer = OrderWriter(conn)
    thread = threading.Thread(target=writer.run, name="order-writer", daemon=True)
    thread.start()
    try:
        # Version 2 is published once the ship has read some of these orders under version 1.
        eventually(lambda: ledger_count(rf, rf.a.name, "purchase_order") >= 4 + 10
                   or bool(writer.failures), "orders read under version 1")
        rule_id, version, printed = release_with_cli(
            rf.fleet, rf.rule_file("po-tankers", po_filter=PO_FILTER_2), "drop cancelled")
        rf.cli_output.append(printed)
        assert (rule_id, version) == ("po-tankers", 2) and "DISTRIBUTING" in printed, printed
        eventually(lambda: runs(rf.pg_conn, rf.a.name, "po-tankers", 2),
                   "ship A to report po-tankers@2")
        rf.wait_active("po-tankers", 2)
        after = len(writer.written)
        eventually(lambda: len(writer.written) >= after + 30 or bool(writer.failures),
                   "orders written under version 2")
    finally:
        writer.stop.set()
        thread.join(30)
        conn.close()
    assert not writer.failures, writer.failures
    rf.execute("a", "INSERT INTO purchase_order (id, supplier, amount, status, updated_at)"
               " VALUES (%s, 'END', 0, 'OPEN', %s)", (SENTINEL, T0))
    eventually(lambda: rf.ashore("purchase_order", SENTINEL), "the last order ashore")

    # Where ship A switched, and which queue offset each order has.
    offsets = switch_offsets(rf.a.config.state_path, "po-tankers", 2)
    ((topic, partition), switched_at), = [(k, v) for k, v in offsets.items()
                                          if k[0].endswith(".purchase_order")]
    offset_of = {key: offset for offset, key in
                 keys_by_offset(rf.broker.bootstrap_servers, topic, partition).items()}
    status_of = dict(writer.written)
    before = {k for k, s in writer.written if offset_of[k] < switched_at}
    assert {s for k, s in writer.written if k in before} == {"DRAFT", "OPEN", "CANCELLED"}
    assert {s for k, s in writer.written if k not in before} == {"DRAFT", "OPEN", "CANCELLED"}
    expected = {k for k, s in status_of.items()
                if s == "OPEN" or (s == "CANCELLED" and k in before)} | {SENTINEL}
    expected |= {k for k, s in zip(range(1, 7), ORDER_STATUSES, strict=True) if s != "DRAFT"}
    ashore = {row[0] for row in rf.query("shore", "SELECT id FROM purchase_order"
                                                  " WHERE id <= %s", (SENTINEL,))}
    assert ashore == expected, (sorted(ashore - expected), sorted(expected - ashore))
    assert ledger_count(rf, rf.a.name, "purchase_order") == len(expected)
    assert inbox_results(rf, rf.a.name, "purchase_order") == {"APPLIED": len(expected)}
    # Ship B is not selected: it is never offered the rule.
    assert rf.b.name not in reports(rf.pg_conn, "po-tankers")


def version_one_ship_cannot_run(rf: RulesFleet) -> None:
    """Phase 2b: noon@2 names a column ship B lacks. Ship A runs it, ship B stays on noon@1
    and says why, the release stays DISTRIBUTING; a rollback brings both to noon@1."""
    rule_id, version, printed = release_with_cli(
        rf.fleet, rf.rule_file("noon", noon_columns=NOON_COLUMNS_2), "engine hours ashore")
    rf.cli_output.append(printed)
    assert (rule_id, version) == ("noon", 2)

    def b_failed() -> bool:
        report = reports(rf.pg_conn, "noon").get(rf.b.name)
        return report is not None and report.candidate == 2 and report.validation == "RULE_FAILED"

    eventually(lambda: runs(rf.pg_conn, rf.a.name, "noon", 2) and b_failed(),
               "ship A on noon@2 and ship B refusing it")
    worker_log = rf.fleet.logs["worker"]
    eventually(lambda: f"node {rf.b.name} cannot run rule noon version 2" in
               worker_log.read_text(errors="replace"), "the worker to hold noon@2 back")
    assert offered(rf.app, "noon") == (2, "DISTRIBUTING")
    status = rule_status(rf.fleet, "noon")
    nodes = {n["node_id"]: n for n in status["nodes"]}
    assert nodes[rf.b.name]["validation"] == "RULE_FAILED"
    assert nodes[rf.b.name]["active_version"] == 1
    assert any("engine_hours" in problem for problem in nodes[rf.b.name]["problems"])
    assert nodes[rf.a.name]["active_version"] == 2
    text = rf.cli("rules", "status", "noon")
    assert "RULE_FAILED" in text and "engine_hours" in text, text
    # Each ship sends by the version it runs.
    rf.execute("a", "INSERT INTO noon_report (id, vessel, speed, engine_hours, reported_at)"
               " VALUES (800001, 'MT Alpha', 12, 123, %s)", (T0,))
    rf.execute("b", "INSERT INTO noon_report (id, vessel, speed, reported_at)"
               " VALUES (900002, 'MT Beta', 12, %s)", (T0,))
    eventually(lambda: rf.ashore("noon_report", 800001) and rf.ashore("noon_report", 900002),
               "noon reports under noon@2 (A) and noon@1 (B)")
    assert rf.query("shore", "SELECT engine_hours FROM noon_report WHERE id = 800001") == [(123,)]

    printed = rf.cli("rules", "rollback", "noon", "--reason", "ship B has no engine hours",
                     "--actor", "e2e-author")
    assert "ROLLBACK_TARGET" in printed, printed
    eventually(lambda: runs(rf.pg_conn, rf.a.name, "noon", 1), "ship A back on noon@1")
    rf.wait_active("noon", 1)
    status = rule_status(rf.fleet, "noon")
    assert status["rule"]["offered_version"] == 1
    assert status["rule"]["offered_status"] == "ACTIVE"
    assert {n["node_id"]: (n["active_version"], n["validation"]) for n in status["nodes"]} == {
        rf.a.name: (1, "RULE_VALID"), rf.b.name: (1, "RULE_VALID")}
    assert rf.app.release("noon", 2).status.value == "SUPERSEDED"
    rf.execute("a", "INSERT INTO noon_report (id, vessel, speed, engine_hours, reported_at)"
               " VALUES (800002, 'MT Alpha', 13, 456, %s)", (T0,))
    eventually(lambda: rf.ashore("noon_report", 800002), "a noon report under noon@1 again")
    assert rf.query("shore", "SELECT engine_hours FROM noon_report WHERE id = 800002") == [
        (None,)]


def canary_found_nowhere(rf: RulesFleet, caplog: pytest.LogCaptureFixture) -> None:
    """Phase 3: the planted passport is in none of the places the search reaches, and the
    search does find ship B's passport where it was sent."""
    shore_conn, database = rf.fleet.shore.conn, rf.fleet.database
    assert mariadb_places(shore_conn, database, CANARY) == []
    assert "crew.passport_no" in mariadb_places(shore_conn, database, VISIBLE)
    assert postgres_places(rf.pg.dsn, CANARY) == []
    assert "inbox_batch.body" in postgres_places(rf.pg.dsn, VISIBLE)
    state_files = sqlite_files(rf.a.config.state_path) + sqlite_files(rf.b.config.state_path)
    assert file_places(state_files, CANARY) == []  # while the ships run (WAL included)
    rf.fleet.stop_all()
    assert file_places(state_files, CANARY) == []
    logs = sorted(rf.fleet.log_dir.glob("*.log"))
    assert len(logs) >= 3 and all(log.stat().st_size > 0 for log in logs)
    assert file_places(logs, CANARY) == []
    assert not [line for line in rf.cli_output if CANARY in line]
    assert caplog.records, "no in-process log line was captured"
    assert CANARY not in caplog.text
    assert not [r for r in caplog.records if CANARY in r.getMessage()]


# ----------------------------------------------------------------------------- the test


def test_two_ships_under_different_rules_and_a_rule_change(rules_fleet: RulesFleet,
                                                            caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="tidesync")
    rf = rules_fleet
    release_first_rules(rf)
    check_rules_per_ship(rf)
    change_order_filter(rf)
    version_one_ship_cannot_run(rf)
    rf.fleet.assert_running()
    canary_found_nowhere(rf, caplog)


RENAMED_RULE = """
id = "stores"
direction = "UPLINK"
source = "{db}.stores"
target = "{db}.stores_ashore"
[select]
nodes = ["{a}"]
[columns]
rename = {{ qty = "quantity" }}
"""


def test_a_rule_with_other_target_names_brings_the_rows_ashore_under_them(
        rules_fleet: RulesFleet):
    rf = rules_fleet
    rf.execute("a", "CREATE TABLE stores (id INT NOT NULL PRIMARY KEY, item VARCHAR(40) NOT NULL,"
               " qty INT NOT NULL) ENGINE=InnoDB")
    rf.execute("shore", "CREATE TABLE stores_ashore (id INT NOT NULL PRIMARY KEY,"
               " item VARCHAR(40) NOT NULL, quantity INT NOT NULL) ENGINE=InnoDB")
    rf.cli("target", "enable", f"{rf.fleet.database}.stores_ashore", "--direction", "UPLINK")
    create_topics(rf, "stores")
    text = RENAMED_RULE.format(db=rf.fleet.database, a=rf.a.name)
    assert release_in_process(rf.app, rf.target, text, "stores ashore") == ("stores", 1)
    rf.fleet.start_worker()
    rf.fleet.start_ship("a")
    rf.wait_active("stores", 1)
    rf.execute("a", "INSERT INTO stores (id, item, qty) VALUES (1, 'rope', 12)")
    eventually(lambda: sum(inbox_results(rf, rf.a.name, "stores").values()) == 1
               and "PENDING" not in inbox_results(rf, rf.a.name, "stores"),
               "the stores change to be decided ashore")
    assert inbox_results(rf, rf.a.name, "stores") == {"APPLIED": 1}
    assert rf.query("shore", "SELECT id, item, quantity FROM stores_ashore") == [(1, "rope", 12)]
