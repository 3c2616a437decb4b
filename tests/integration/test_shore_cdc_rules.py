"""Shore changes under a DOWNLINK-only rule, end to end on the real shore MariaDB (built-in
binlog capture), the real broker and PostgreSQL, and a SQLite ship database: the shore table
has no sync metadata; inserts, updates and deletes reach only the node the rule selects,
under the ship's column names, without the sensitive column; the ship applies them by key to
a table without metadata, and a command pulled again is applied once."""

from __future__ import annotations

import re
import secrets
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_ingress import make_config
from tests.integration.test_shore_cdc import ShoreSide, cdc_results, drain
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.cdc.debezium import DebeziumNormalizer, NormalizerSettings
from tidesync.cdc.kafka import KafkaQueue, QueueSettings
from tidesync.domain.change_event import Operation
from tidesync.domain.downlink_command import RowChangePayload
from tidesync.domain.node import NodeProfile
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import DownlinkOnlyTables, RemoteApplier, ShipTargets
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState
from tidesync.ship.transport import RetrySchedule
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.shore.downlink_rules import DownlinkRules
from tidesync.shore.shore_cdc import ShoreCdcConsumer
from tidesync.target.one_way_sqlite import SQLiteOneWayApplier, enable_one_way_sqlite
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

SHORE = "shore-hq"
PRICES_DDL = ("CREATE TABLE prices (item_code VARCHAR(20) NOT NULL PRIMARY KEY,"
              " price INT NOT NULL, cost INT NOT NULL, note VARCHAR(40) NOT NULL,"
              " region VARCHAR(10) NOT NULL) ENGINE=InnoDB")


class Releases:
    """The shore's offered rules (a stand-in for the rule releases)."""

    def __init__(self, *rules: SyncRule) -> None:
        self.rules = rules

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        return [(rule, ReleaseStatus.ACTIVE) for rule in self.rules]

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return next((r for r in self.rules if (r.rule_id, r.version) == (rule_id, version)),
                    None)

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise AssertionError("not used here")


class Nodes:
    def __init__(self, profiles: dict[str, NodeProfile]) -> None:
        self.profiles = profiles

    def active_profiles(self) -> dict[str, NodeProfile]:
        return dict(self.profiles)


class NoLedger:
    """The shore target's ledger: a DOWNLINK-only table's changes never ask it."""

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        raise AssertionError("a table without metadata has no platform writes to prove")


class ShoreOf:
    """The ship's link to the shore's downlink service (pull commands, send acks)."""

    def __init__(self, downlink: DownlinkService, node_id: str) -> None:
        self.downlink, self.node_id = downlink, node_id

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        return self.downlink.page(self.node_id, cursor, limit)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        return self.downlink.acknowledge(self.node_id, message)


@pytest.fixture(scope="module")
def downlink(pg_database: PostgresDatabase) -> Iterator[DownlinkService]:
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database)
    service = open_downlink(event_store_env(config.event_store),
                            postgres_conninfo(config.event_store))
    yield service
    service.close()


@pytest.fixture
def shore(shore_mariadb: MariaDBInstance, kafka_broker: Any, tmp_path: Path,
          make_mariadb_database: Callable[[MariaDBInstance], str]) -> ShoreSide:
    database = make_mariadb_database(shore_mariadb)
    suffix = secrets.token_hex(3)
    side = ShoreSide(shore_mariadb, database, f"sync.cdc.shorerules{suffix}",
                     tmp_path / "position.sqlite", kafka_broker.bootstrap_servers,
                     9300 + secrets.randbelow(90), [f"it-north-{suffix}", f"it-south-{suffix}"])
    side.execute(PRICES_DDL)
    side.capture()  # Remembers the current binlog position: later changes are captured.
    return side


def consumer_of(shore: ShoreSide, downlink: DownlinkService, rule: SyncRule) -> ShoreCdcConsumer:
    north, south = shore.nodes
    queue = KafkaQueue(QueueSettings(shore.bootstrap, f"shore-cdc-{shore.name}",
                                     "^" + re.escape(shore.name) + r"\."))
    normalizer = DebeziumNormalizer(NormalizerSettings(SHORE, "shore-builtin"))
    rules = DownlinkRules(Releases(rule), lambda: Nodes({north: NodeProfile.of(["north"]),
                                                         south: NodeProfile.of(["south"])}))

    def no_target_nodes() -> list[str]:
        raise AssertionError("under rules the selectors pick the nodes")

    return ShoreCdcConsumer(queue, normalizer, NoLedger(), downlink, no_target_nodes, SHORE,
                            poll_timeout=0.5, rules=rules)


def ship_database(tmp_path: Path) -> Path:
    path = tmp_path / "ship.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE price_list (item TEXT PRIMARY KEY, amount INTEGER,"
                           " region TEXT, cost INTEGER)")
        connection.execute("INSERT INTO price_list VALUES ('A-1', 0, 'north', 77)")
    connection = sqlite3.connect(path, isolation_level=None)
    enable_one_way_sqlite(connection, "price_list", "DOWNLINK")
    connection.close()
    return path


def ship_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as check:
        return check.execute("SELECT * FROM price_list ORDER BY item").fetchall()


def test_a_downlink_only_table_reaches_the_selected_ship_by_key(
        shore: ShoreSide, downlink: DownlinkService, pg_database: PostgresDatabase,
        tmp_path: Path) -> None:
    north, south = shore.nodes
    rule = SyncRule.from_document({
        "id": "prices", "version": 4, "direction": "DOWNLINK", "source": "main.price_list",
        "target": f"{shore.database}.prices", "select": {"groups": ["north"]},
        "filter": "region = 'north'",
        "columns": {"rename": {"item": "item_code", "amount": "price"},
                    "sensitive": ["cost"], "exclude": ["note"]}})
    shore.execute(
        "INSERT INTO prices VALUES ('A-1', 10, 4, 'x', 'north'), ('B-2', 5, 1, 'y', 'south')",
        "UPDATE prices SET price = 12 WHERE item_code = 'A-1'",
        "UPDATE prices SET cost = 6, note = 'z' WHERE item_code = 'A-1'",  # nothing synced
        "INSERT INTO prices VALUES ('C-3', 7, 2, 'w', 'north')",
        "DELETE FROM prices WHERE item_code = 'C-3'")
    shore.capture()

    consumer = consumer_of(shore, downlink, rule)
    try:
        assert drain(consumer) >= 6
    finally:
        consumer.close()

    assert downlink.commands_for(south) == []
    commands = downlink.commands_for(north)
    payloads = [c.payload for c in sorted(commands, key=lambda c: c.sequence)]
    assert all(isinstance(p, RowChangePayload) for p in payloads)
    by_item: dict[object, list[Operation]] = {}
    for payload in payloads:  # keys may sit in different partitions: order is per key
        assert isinstance(payload, RowChangePayload)
        by_item.setdefault(payload.record.as_dict()["item"], []).append(payload.operation)
    assert by_item == {"A-1": [Operation.INSERT, Operation.UPDATE],
                       "C-3": [Operation.INSERT, Operation.DELETE]}
    for payload in payloads:
        assert isinstance(payload, RowChangePayload)
        assert (payload.record.database, payload.record.table) == ("main", "price_list")
        assert (payload.rule_id, payload.rule_version, payload.by_key) == ("prices", 4, True)
        assert set(payload.values or {}) <= {"amount", "region"}
    results = sorted(reason for _, reason in _reasons(pg_database, shore.name))
    assert results == ["", "", "", "", "NO_SYNCED_CHANGE", "ROW_FILTER"]

    path = ship_database(tmp_path)
    state = SQLiteShipState(tmp_path / "state.sqlite", north, "g")
    targets = ShipTargets(SQLiteTargetApplier(path, node_id=north),
                          SQLiteOneWayApplier(path, node_id=north),
                          DownlinkOnlyTables(lambda: (rule,)))
    link = ShoreOf(downlink, north)
    ship = Downlink(DownlinkSettings(north, SHORE), state, link,  # type: ignore[arg-type]
                    RemoteApplier(targets, north), set_health=lambda *a: None,
                    link_failed=lambda *a: None, retry=RetrySchedule())
    try:
        ship.step()
        assert ship.idle()
        # The ship's own cost of A-1 stays; the shore's never arrives.
        assert ship_rows(path) == [("A-1", 12, "north", 77)]
        acked = {c.command_id: c.ack_result for c in downlink.commands_for(north)}
        assert set(acked.values()) == {"COMMAND_APPLIED"}
        # Every command pulled again: the ledger answers and nothing changes.
        with state.transaction() as conn:
            conn.execute("DELETE FROM sync_cursor")
        ship.next_pull, ship.more = 0.0, True
        ship.step()
        assert state.cursor(COMMANDS_CURSOR) == str(max(c.sequence for c in commands))
        assert ship.idle()
        with state.transaction() as conn:
            counts = dict(conn.execute("SELECT result, total FROM command_result_count"))
        assert counts == {"COMMAND_APPLIED": 4, "COMMAND_ALREADY_APPLIED": 4}
    finally:
        targets.close()
        state.close()
    assert ship_rows(path) == [("A-1", 12, "north", 77)]
    with sqlite3.connect(path) as check:
        columns = [row[1] for row in check.execute("PRAGMA table_info(price_list)")]
        ledger = check.execute("SELECT COUNT(*) FROM _sync_applied").fetchone()
    assert columns == ["item", "amount", "region", "cost"] and ledger == (4,)
    assert sorted(cdc_results(pg_database, shore.name))[0][0] == "FORWARDED"


def _reasons(pg_database: PostgresDatabase, topic_prefix: str) -> list[tuple[str, str]]:
    with pg_database.connect() as conn:
        return conn.execute("SELECT result, reason_code FROM shore_cdc_event WHERE topic LIKE %s",
                            (topic_prefix + "%",)).fetchall()
