"""The shore applies by rule, on real PostgreSQL and a MariaDB or SQLite target: events are
authorized against the released rule version they name, one-way (UPLINK) tables without
sync metadata are written by key under the rule's target names, and the arbiter decides a
rule's conflicts by the rule's own policy."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import random
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration import test_apply_processor as processor_tests
from tests.integration import test_arbiter as arbiter_tests
from tests.integration.shore_support import ShipLog, pg_rows, receive
from tests.integration.sqlite_target import make_sqlite_target
from tests.integration.test_apply_processor import (
    SHORE_NODE,
    drain,
    items,
    make_applier,
    node,
)
from tidesync.domain.arbitration import Policy, PolicyName
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.domain.conflict_case import ConflictState
from tidesync.domain.rules.authorization import shaped
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.entrypoints.cli import main as cli_main
from tidesync.shore.arbiter import Arbiter, ArbiterSettings
from tidesync.shore.conflicts import PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.contract import TargetApplier, TargetOutcomeKind
from tidesync.target.one_way_mysql import MySQLOneWayApplier, enable_one_way_mysql
from tidesync.target.one_way_sqlite import SQLiteOneWayApplier, enable_one_way_sqlite
from tidesync.target.sqlite import SQLiteTargetApplier

pytestmark = pytest.mark.services

shore = processor_tests.shore
target_db = processor_tests.target_db
downlink = arbiter_tests.downlink

SHIP_DB = "fleet"
READINGS_DDL = ("CREATE TABLE {table} (id INT PRIMARY KEY, sensor VARCHAR(20) NOT NULL,"
                " {value} INT NOT NULL, note VARCHAR(40) NULL)")


class Releases:
    """The shore's released rule versions, in memory (what the rules application answers)."""

    def __init__(self, *rules: SyncRule) -> None:
        self.rules = {(rule.rule_id, rule.version): rule for rule in rules}

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        return [(rule, ReleaseStatus.ACTIVE) for rule in self.rules.values()]

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return self.rules.get((rule_id, version))

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise AssertionError("not used on apply")


def readings_rule(target_database: str, nodes: frozenset[str]) -> SyncRule:
    """Readings go one way, from the ship's `fleet.readings` to the shore's `hq_readings`,
    with `value_c` named `celsius` on the shore and the `secret` column left on the ship."""
    return SyncRule(rule_id="readings-up", version=2, source_database=SHIP_DB,
                    source_table="readings", target_database=target_database,
                    target_table="hq_readings", direction=Direction.UPLINK,
                    selector=Selector(nodes=nodes), exclude_columns=("secret",),
                    rename={"value_c": "celsius"})


@dataclass
class Sensors:
    """The change events one ship captures for `fleet.readings`, named under a rule; rows kept
    to know what the shore must hold in the end."""

    node_id: str
    rule: SyncRule
    rows: dict[int, dict[str, object]] = field(default_factory=dict)
    offset: int = 0

    def event(self, operation: Operation, key: int, after: dict[str, object] | None,
              **changes: Any) -> ChangeEvent:
        self.offset += 1
        record = RecordKey.of(SHIP_DB, "readings", {"id": key})
        source = SourceCoordinates(self.node_id, 0, "cdc.fleet.readings", 0, self.offset)
        before = self.rows.get(key)
        event = ChangeEvent(
            event_id=event_id_for(source, record, operation), origin_node_id=self.node_id,
            source_connector_id="test", source_topic=source.topic, source_partition=0,
            source_position=self.offset, record=record, operation=operation,
            captured_at=dt.datetime.now(dt.UTC),
            before=before if operation is not Operation.INSERT else None, after=after,
            rule_id=self.rule.rule_id, rule_version=self.rule.version)
        if after is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = after
        return dataclasses.replace(event, **changes) if changes else event

    def random_history(self, count: int, seed: int) -> list[ChangeEvent]:
        chooser = random.Random(seed)
        events = []
        for _ in range(count):
            key = chooser.randrange(60)
            row = {"id": key, "sensor": f"s{chooser.randrange(9)}",
                   "value_c": chooser.randrange(-40, 60),
                   "note": chooser.choice([None, "ok", "check"])}
            if key not in self.rows:
                events.append(self.event(Operation.INSERT, key, row))
            elif chooser.random() < 0.2:
                events.append(self.event(Operation.DELETE, key, None))
            else:
                events.append(self.event(Operation.UPDATE, key, row))
        return events

    def expected(self) -> dict[int, tuple[object, ...]]:
        return {key: (row["sensor"], row["value_c"], row["note"])
                for key, row in self.rows.items()}


@dataclass
class Target:
    """A shore business database as the test sees it: its name as a rule target, the two
    appliers, and a way to read it."""

    database: str
    applier: Callable[[], TargetApplier]
    one_way: Callable[[], TargetApplier]
    query: Callable[[str], list[tuple[Any, ...]]]


@pytest.fixture(params=["mariadb", "sqlite"])
def target(request, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        path = make_sqlite_target(tmp_path / "shore.db", SHORE_NODE)
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute(READINGS_DDL.format(table="hq_readings", value="celsius"))
            enable_one_way_sqlite(conn, "hq_readings")

        def sqlite_query(sql: str) -> list[tuple[Any, ...]]:
            with contextlib.closing(sqlite3.connect(path)) as conn:
                return conn.execute(sql).fetchall()

        yield Target("main", lambda: SQLiteTargetApplier(path, node_id=SHORE_NODE),
                     lambda: SQLiteOneWayApplier(path, node_id=SHORE_NODE), sqlite_query)
        return
    instance = request.getfixturevalue("shore_mariadb")
    database = request.getfixturevalue("make_mariadb_database")(instance)
    conn = instance.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(READINGS_DDL.format(table="hq_readings", value="celsius"))
    enable_one_way_mysql(conn, database, "hq_readings")

    def mysql_query(sql: str) -> list[tuple[Any, ...]]:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())

    yield Target(database, lambda: make_applier(instance, database),
                 lambda: MySQLOneWayApplier(host=instance.host, port=instance.port,
                                            user=instance.user, password=instance.password,
                                            node_id=SHORE_NODE), mysql_query)
    conn.close()


def processor(shore, target: Target, releases: Releases, **options: Any) -> ApplyProcessor:
    pool, apps = shore
    return ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                          target.applier(), ManualClock(),
                          ProcessorSettings(worker_id="w1", **options), draw=lambda: 0.5,
                          rules=releases, one_way=target.one_way())


def outcomes(pool, node_id: str) -> dict[uuid.UUID, tuple[str, str | None]]:
    return {row[0]: (row[1], row[2]) for row in pg_rows(
        pool, "SELECT event_id, result, reason_code FROM inbox_event WHERE origin_node_id = %s",
        (node_id,))}


def finalized(shore, node_id: str) -> list[dict[str, object]]:
    """The terminal results the node's apply jobs recorded (what receipts and views read)."""
    pool, apps = shore
    results: list[dict[str, object]] = []
    for (job_id,) in pg_rows(pool, "SELECT DISTINCT job_id FROM inbox_event"
                                   " WHERE origin_node_id = %s", (node_id,)):
        job = apps.apply_jobs.get_job(job_id)
        results += [dataclasses.asdict(result) for result in job.results.values()]
    return results


def readings(target: Target) -> dict[int, tuple[object, ...]]:
    return {row[0]: tuple(row[1:]) for row in target.query(
        "SELECT id, sensor, celsius, note FROM hq_readings")}


def test_a_one_way_table_without_metadata_matches_the_ship_after_a_thousand_changes(
        shore, target: Target):
    pool, _ = shore
    ship = Sensors(node(), readings_rule(target.database, frozenset({"*"})))
    history = ship.random_history(1000, seed=7)
    # Events whose row the ship deletes next are held back and arrive after the delete: the
    # row must stay deleted (updates travel as their changed columns only, so only a delete
    # or a new insert makes the older event's columns irrelevant).
    following: dict[int, ChangeEvent] = {}
    late = []
    for event in reversed(history):
        after = following.get(event.primary_key["id"])
        if after is not None and after.operation is Operation.DELETE and (
                event.operation is not Operation.DELETE):
            late.append(event)
        following[event.primary_key["id"]] = event
    late = late[:25]
    assert len(late) == 25
    late_ids = {event.event_id for event in late}
    receive(pool, ship.node_id, [event for event in history if event.event_id not in late_ids])
    work = processor(shore, target, Releases(ship.rule))

    drain(work)
    receive(pool, ship.node_id, late)
    drain(work)

    assert set(outcomes(pool, ship.node_id).values()) == {("APPLIED", None)}
    assert readings(target) == ship.expected()
    columns = {row[0] for row in target.query(
        "SELECT name FROM pragma_table_info('hq_readings')" if target.database == "main" else
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
        " AND TABLE_NAME = 'hq_readings'")}
    assert columns == {"id", "sensor", "celsius", "note"}  # no _sync_* columns, no secret
    # No conflict of this rule (the session database may hold other tests' conflicts).
    assert pg_rows(pool, "SELECT count(*) FROM active_conflict WHERE rule_id = %s",
                   (ship.rule.rule_id,)) == [(0,)]
    ledger = {row[0] for row in target.query("SELECT event_id FROM _sync_applied")}
    assert not {str(event_id) for event_id in late_ids} & ledger  # superseded, not written

    # Sent again (a worker that crashed before recording its results): nothing changes.
    again = target.one_way().apply_chunk([shaped(ship.rule, event) for event in history[:300]])
    assert {outcome.kind for outcome in again} == {TargetOutcomeKind.ALREADY_APPLIED}
    assert readings(target) == ship.expected()


def test_events_outside_their_rule_are_rejected_with_its_reason(shore, target: Target):
    pool, _ = shore
    ship, stranger = node(), node()
    rule = readings_rule(target.database, frozenset({ship}))
    crew_rule = dataclasses.replace(rule, rule_id="crew-up", source_table="crew",
                                    target_table="hq_crew")
    sensors = Sensors(ship, rule)
    row = {"id": 1, "sensor": "s1", "value_c": 20, "note": None}
    good = sensors.event(Operation.INSERT, 1, row)
    refused = [
        (sensors.event(Operation.INSERT, 2, {**row, "id": 2}, rule_id="nobody"),
         "RULE_NOT_RELEASED"),
        (sensors.event(Operation.INSERT, 3, {**row, "id": 3}, rule_version=1),
         "RULE_NOT_RELEASED"),
        (sensors.event(Operation.INSERT, 4, {**row, "id": 4, "secret": "x"}),
         "COLUMN_OUTSIDE_RULE"),
        (sensors.event(Operation.INSERT, 5, {**row, "id": 5}, rule_id="crew-up"),
         "NOT_AUTHORIZED_FOR_TABLE"),
    ]
    receive(pool, ship, [good, *(event for event, _ in refused)])
    other = Sensors(stranger, rule)
    not_selected = other.event(Operation.INSERT, 6, {**row, "id": 6})
    unnamed = other.event(Operation.INSERT, 7, {**row, "id": 7}, rule_id=None,
                          rule_version=None)
    receive(pool, stranger, [not_selected, unnamed])

    # The allow-list would let both nodes write anything: with rules released it is not read.
    drain(processor(shore, target, Releases(rule, crew_rule),
                    scope=ApplyConfig({"*": "fleet.*"})))

    assert outcomes(pool, ship) == {
        good.event_id: ("APPLIED", None),
        **{event.event_id: ("REJECTED", reason) for event, reason in refused}}
    assert outcomes(pool, stranger) == {
        not_selected.event_id: ("REJECTED", "RULE_NOT_FOR_NODE"),
        unnamed.event_id: ("REJECTED", "RULE_NOT_RELEASED")}
    assert readings(target) == {1: ("s1", 20, None)}
    # Rejections are recorded under the table's implicit rule, never the name a ship sent.
    recorded = {result["event_id"]: result["rule_id"] for result in finalized(shore, ship)}
    assert recorded[str(good.event_id)] == "readings-up"
    assert {recorded[str(event.event_id)] for event, _ in refused} == {"table:fleet.readings"}


def test_a_two_way_rule_conflict_is_decided_by_the_rule_policy(
        shore, target_db, shore_mariadb, downlink):
    """The table's `[conflicts].policies` entry says MANUAL; the rule says SHORE_WINS."""
    pool, apps = shore
    database, conn = target_db
    ship = ShipLog(node(), f"shipdb_{uuid.uuid4().hex[:8]}")
    rule = SyncRule(rule_id="items-both", version=5, source_database=ship.database,
                    source_table="items", target_database=database,
                    direction=Direction.BIDIRECTIONAL, selector=Selector(groups=frozenset(
                        {"tankers"})), conflict_policy=PolicyName.SHORE_WINS)
    releases = Releases(rule)

    class Profiles:
        def profile(self, node_id: str) -> tuple[frozenset[str], frozenset[str]]:
            return frozenset({"tankers"}), frozenset()

    def named(event: ChangeEvent) -> ChangeEvent:
        return dataclasses.replace(event, rule_id=rule.rule_id, rule_version=rule.version)

    clock = ManualClock()
    work = ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                          make_applier(shore_mariadb, database), clock,
                          ProcessorSettings(worker_id="w1"), rules=releases,
                          profiles=Profiles())
    receive(pool, ship.node_id, [named(ship.insert(1, "anchor", 3, "10.50"))])
    drain(work)
    with conn.cursor() as cursor:
        cursor.execute("UPDATE items SET qty = 30 WHERE id = 1")
    receive(pool, ship.node_id, [named(ship.update(1, qty=4))])
    drain(work)
    (conflict_id,) = [row[0] for row in pg_rows(pool, "SELECT conflict_id FROM active_conflict")
                      if apps.conflicts.get_case(row[0]).evidence[0]["origin_node_id"]
                      == ship.node_id]
    case = apps.conflicts.get_case(conflict_id)
    assert (case.rule_id, case.rule_version) == ("items-both", 5)
    assert (case.database, case.table) == (database, "items")

    keys = PostgresRecordKeys(pool)
    reader = TargetRevisionReader(lambda: make_applier(shore_mariadb, database), keys)

    def decision_applier():
        applier = make_applier(shore_mariadb, database)
        applier.node_id = f"{SHORE_NODE}.arbiter"
        return applier

    arbiter = Arbiter(apps.conflicts, downlink, pool, PostgresWorkQueue(pool), reader, keys,
                      decision_applier, lambda: [ship.node_id],
                      ArbiterSettings(shore_node_id=SHORE_NODE, worker_id="arb-1",
                                      policy_for=lambda db, table: Policy(PolicyName.MANUAL)),
                      clock, rules=releases)
    arbiter.run_once()

    case = apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.DISPATCHED
    assert case.decision["side"] == "SHORE" and case.decision["actor"] == "policy:SHORE_WINS"
    assert items(conn)[1][:3] == ("anchor", 30, Decimal("10.50"))


def test_enable_uplink_creates_only_the_ledger_and_the_key_positions(
        shore_mariadb, make_mariadb_database, monkeypatch, capsys, tmp_path: Path):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(READINGS_DDL.format(table="log", value="celsius"))
    for name, value in (("HOST", shore_mariadb.host), ("PORT", str(shore_mariadb.port)),
                        ("USER", shore_mariadb.user), ("NODE_ID", SHORE_NODE)):
        monkeypatch.setenv(f"TIDESYNC_TARGET__{name}", value)
    path = tmp_path / "site.db"
    with contextlib.closing(sqlite3.connect(path)) as lite:
        lite.execute(READINGS_DDL.format(table="log", value="celsius"))

    for table in (f"{database}.log", "log --sqlite " + str(path)):
        assert cli_main(["target", "enable", *table.split(), "--direction", "UPLINK"]) == 0
        created = [line for line in capsys.readouterr().out.splitlines() if "created" in line]
        assert [line.rsplit("_sync", 1)[-1] for line in created] == ["_applied", "_key_position"]
        assert cli_main(["target", "enable", *table.split(), "--direction", "UPLINK"]) == 0
        assert "already enabled, nothing changed" in capsys.readouterr().out

    with conn.cursor() as cursor:
        cursor.execute("SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
                       " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'log'", (database,))
        assert {column for _, column in cursor.fetchall()} == {"id", "sensor", "celsius",
                                                                "note"}
        cursor.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS"
                       " WHERE TRIGGER_SCHEMA = %s", (database,))
        assert cursor.fetchone() == (0,)
    conn.close()
    with contextlib.closing(sqlite3.connect(path)) as lite:
        assert {row[0] for row in lite.execute("SELECT name FROM sqlite_master")} >= {
            "log", "_sync_applied", "_sync_key_position"}
        assert [row[1] for row in lite.execute("PRAGMA table_info(log)")] == [
            "id", "sensor", "celsius", "note"]
        assert list(lite.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")) == []
