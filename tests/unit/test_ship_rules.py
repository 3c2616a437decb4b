"""The ship's rules over its real SQLite state store: offered snapshots checked against the
ship's tables (a table stand-in, no database), a failing version leaving the last good one
active, switches recorded at every partition's read position and kept across a reopen,
pruning once the checkpoint passed them, and the mask key file."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import stat
from pathlib import Path
from typing import Any

import pytest

from tidesync.cdc.kafka import PartitionKey
from tidesync.cdc.outcomes import Skip, SkipReason
from tidesync.config import ShipConfig
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.domain.column_kinds import column_type
from tidesync.domain.rules.runtime import Shaped
from tidesync.domain.rules.sync_rule import PriorityClass, SyncRule
from tidesync.ship.rules import (
    MaskKeyFile,
    SchemaUnavailable,
    ShipRules,
    TableColumns,
    rules_report,
)
from tidesync.ship.state import Consumed, SQLiteShipState
from tidesync.ship.state.rules import SQLiteRules
from tidesync.wire import sync_pb2 as pb

NOW = dt.datetime.now(dt.UTC)
P0, P1 = PartitionKey("sync.cdc.ops.crew", 0), PartitionKey("sync.cdc.ops.crew", 1)


class Tables:
    """The ship's tables as a schema source would read them; `down` makes it unreachable."""

    def __init__(self) -> None:
        self.down = False
        self.tables = {("ops", "crew"): TableColumns(
            {"id": column_type("int"), "name": column_type("varchar(20)"),
             "rank": column_type("varchar(20)"), "joined": column_type("datetime")}, ("id",))}

    def table(self, database: str, table: str) -> TableColumns | None:
        if self.down:
            raise SchemaUnavailable("down")
        return self.tables.get((database, table))


def rule(version: int, rule_id: str = "crew", **fields: Any) -> SyncRule:
    document: dict[str, Any] = {"id": rule_id, "version": version, "direction": "UPLINK",
                                "source": "ops.crew", "select": {"nodes": ["*"]}}
    document.update(fields)
    return SyncRule.from_document(document)


def snapshot(item: SyncRule, *, checksum: bytes | None = None) -> pb.RuleSnapshot:
    content = item.canonical()
    return pb.RuleSnapshot(rule_id=item.rule_id, version=item.version, status=pb.DISTRIBUTING,
                           content=content, checksum=checksum or hashlib.sha256(content).digest())


def config(version: str, *rules: SyncRule) -> pb.ConfigResponse:
    return pb.ConfigResponse(config_version=version, rules=[snapshot(r) for r in rules])


@pytest.fixture
def state(tmp_path: Path) -> Any:
    store = SQLiteShipState(tmp_path / "ship.sqlite", "ship-1", "group-1")
    yield store
    store.close()


def ship_rules(state: SQLiteShipState, tmp_path: Path, tables: Any = None) -> ShipRules:
    return ShipRules(SQLiteRules(state.database), tables if tables is not None else Tables(),
                     MaskKeyFile(tmp_path / "mask.key"))


def read_up_to(state: SQLiteShipState, key: PartitionKey, offsets: range) -> None:
    state.record([Consumed(key.topic, key.partition, offset,
                           Skip(SkipReason.HEARTBEAT, ""), 10, None) for offset in offsets], 0)


def active(rules: ShipRules) -> dict[str, int]:
    return rules.current.rules.versions()


def by_id(rules: ShipRules) -> dict[str, pb.RuleActivation]:
    return {activation.rule_id: activation for activation in rules.activations()}


def test_a_valid_offer_switches_at_each_partitions_next_offset(state: Any, tmp_path: Path
                                                                ) -> None:
    read_up_to(state, P0, range(0, 5))
    rules = ship_rules(state, tmp_path)
    applied = rules.apply_config(config("cfg-1", rule(1)), NOW)
    assert applied.switched is not None
    assert dict(applied.switched.from_offsets) == {P0: 5}
    assert active(rules) == {"crew": 1} and rules.config_version == "cfg-1"
    assert rules.generation_at(P0, 4).number == 0      # read before the switch: old rules
    assert rules.generation_at(P0, 5).number == 1
    assert rules.generation_at(P1, 0).number == 1      # nothing read there yet: new rules
    activation = by_id(rules)["crew"]
    assert (activation.active_version, activation.candidate_version,
            activation.validation) == (1, 1, pb.RULE_VALID)
    assert activation.activated_at_micros > 0


def test_a_version_naming_a_missing_column_fails_and_the_last_good_one_stays(
        state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    rules.apply_config(config("cfg-1", rule(1)), NOW)
    applied = rules.apply_config(
        config("cfg-2", rule(2, columns={"sensitive": ["passport"]})), NOW)
    assert applied.switched is None and applied.failed == 1
    assert active(rules) == {"crew": 1}
    activation = by_id(rules)["crew"]
    assert (activation.active_version, activation.candidate_version,
            activation.validation) == (1, 2, pb.RULE_FAILED)
    assert any("passport" in problem for problem in activation.problems)
    report = rules_report(SQLiteRules(state.database))
    assert report["rules"] == {"crew": {"active_version": 1, "candidate_version": 2,
                                        "validation": "RULE_FAILED",
                                        "problems": list(activation.problems)}}


def test_other_rules_switch_while_one_fails(state: Any, tmp_path: Path) -> None:
    tables = Tables()
    tables.tables[("ops", "log")] = TableColumns({"id": column_type("int")}, ("id",))
    rules = ship_rules(state, tmp_path, tables)
    good = rule(1, "log", source="ops.log")
    applied = rules.apply_config(config("cfg-1", rule(1, business_time="nope"), good), NOW)
    assert applied.failed == 1 and active(rules) == {"log": 1}


def test_a_snapshot_whose_checksum_differs_is_refused(state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    response = pb.ConfigResponse(config_version="cfg-1",
                                 rules=[snapshot(rule(1), checksum=b"\x00" * 32)])
    rules.apply_config(response, NOW)
    assert active(rules) == {}
    assert list(by_id(rules)["crew"].problems) == ["checksum: does not match the content"]


def test_a_second_rule_for_a_covered_table_fails(state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    rules.apply_config(config("cfg-1", rule(1, "crew-a"), rule(1, "crew-b")), NOW)
    assert active(rules) == {"crew-a": 1}
    assert by_id(rules)["crew-b"].validation == pb.RULE_FAILED


def test_an_unreachable_schema_stores_nothing(state: Any, tmp_path: Path) -> None:
    tables = Tables()
    tables.down = True
    rules = ship_rules(state, tmp_path, tables)
    with pytest.raises(SchemaUnavailable):
        rules.apply_config(config("cfg-1", rule(1)), NOW)
    assert rules.config_version == "" and active(rules) == {}


def test_switches_survive_a_reopen_and_are_pruned_once_passed(state: Any, tmp_path: Path
                                                               ) -> None:
    read_up_to(state, P0, range(0, 3))
    rules = ship_rules(state, tmp_path)
    rules.apply_config(config("cfg-1", rule(1)), NOW)
    read_up_to(state, P0, range(3, 6))
    rules.apply_config(config("cfg-2", rule(2, filter="rank = 'captain'")), NOW)
    reopened = ship_rules(state, tmp_path)
    assert [g.number for g in reopened.generations] == [1, 2]
    assert reopened.generation_at(P0, 4).rules.versions() == {"crew": 1}
    assert reopened.generation_at(P0, 6).rules.versions() == {"crew": 2}
    assert reopened.config_version == "cfg-2"
    reopened.prune(state.watermarks())  # every skipped record is passed: resume at 6
    assert [g.number for g in reopened.generations] == [2]
    assert [g.number for g in ship_rules(state, tmp_path).generations] == [2]


def test_a_generation_is_kept_while_a_restart_could_read_under_it(state: Any,
                                                                   tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    rules.apply_config(config("cfg-1", rule(1)), NOW)
    read_up_to(state, P0, range(0, 4))
    rules.apply_config(config("cfg-2", rule(2)), NOW)
    # A checkpoint at 2, below the switch at 4: a restart would read 2 and 3 again.
    held = [dataclasses.replace(wm, terminal_offset=1, received_offset=1)
            for wm in state.watermarks()]
    rules.prune(held)
    assert [g.number for g in rules.generations] == [1, 2]


def test_the_mask_key_file_is_created_owner_only_when_a_rule_needs_it(
        state: Any, tmp_path: Path) -> None:
    tables = Tables()
    rules = ship_rules(state, tmp_path, tables)
    rules.apply_config(config("cfg-1", rule(1)), NOW)
    assert not (tmp_path / "mask.key").exists()
    masked = rule(2, transforms=[{"column": "name", "transform": "hmac_mask@1"}])
    rules.apply_config(config("cfg-2", masked), NOW)
    mode = stat.S_IMODE((tmp_path / "mask.key").stat().st_mode)
    assert mode == 0o600
    key = MaskKeyFile(tmp_path / "mask.key").key()
    assert ship_rules(state, tmp_path).mask_key.key() == key


def test_a_ship_whose_rules_are_all_withdrawn_sends_nothing(state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    assert rules.current.rules.implicit  # never had rules: every table its own rule
    rules.apply_config(config("cfg-1", rule(1)), NOW)
    applied = rules.apply_config(config("cfg-2"), NOW)
    assert applied.switched is not None and active(rules) == {}
    assert not rules.current.rules.implicit
    assert rules_report(SQLiteRules(state.database))["mode"] == "rules"


def test_the_mask_key_file_path_is_absolute_and_defaults_beside_the_state_file() -> None:
    default = ShipConfig(state_path="data/ship.sqlite")
    assert default.rules_mask_key_path(default.state_path) == (
        Path("data") / "ship-rules-mask.key").absolute()
    named = ShipConfig(rules_mask_key_file="keys/mask.key")
    assert named.rules_mask_key_path(named.state_path) == Path("keys/mask.key").absolute()


def crew_change(operation: Operation = Operation.UPDATE) -> ChangeEvent:
    record = RecordKey.of("ops", "crew", {"id": 7})
    source = SourceCoordinates("ship-1", 0, P0.topic, 0, 9)
    return ChangeEvent(
        event_id=event_id_for(source, record, operation), origin_node_id="ship-1",
        source_connector_id="dbz", source_topic=P0.topic, source_partition=0,
        source_position=9, record=record, operation=operation, captured_at=NOW,
        before=None if operation is not Operation.UPDATE else {"id": 7, "rank": "cadet"},
        after={"id": 7, "rank": "mate"})


def test_an_event_is_sent_in_its_rules_priority(state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    change = crew_change()
    assert rules.priority_of(change) is PriorityClass.NORMAL  # no rules yet
    rules.apply_config(config("cfg-1", rule(1, priority="CRITICAL")), NOW)
    shaped = rules.shape(P0, 9, change)
    assert isinstance(shaped, Shaped)
    assert rules.priority_of(shaped.event) is PriorityClass.CRITICAL
    rules.apply_config(config("cfg-2", rule(2, priority="BULK")), NOW)
    assert rules.priority_of(shaped.event) is PriorityClass.BULK  # the newest version's
    # A snapshot's rows go as BULK whatever their rule's class.
    rows = dataclasses.replace(shaped.event, operation=Operation.SNAPSHOT, before=None)
    rules.apply_config(config("cfg-3", rule(3, priority="HIGH")), NOW)
    assert rules.priority_of(rows) is PriorityClass.BULK
    assert rules.priority_of(shaped.event) is PriorityClass.HIGH
