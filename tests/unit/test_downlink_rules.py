"""Shore changes under downlink rules: the rule's shape applied in reverse (ship names back,
dropped columns gone, the row filter with the ship runtime's semantics) and the nodes each
rule selects by id, group or tag, one command per node."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.node import NodeProfile
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.values import Value
from tidesync.shore.downlink_rules import DownlinkRoutes, DownlinkRules, DownlinkSkip

SHORE = "shore-hq"
CAPTURED = dt.datetime.now(dt.UTC)


def rule(rule_id: str = "prices", **fields: Any) -> SyncRule:
    document: dict[str, Any] = {
        "id": rule_id, "version": 3, "direction": "DOWNLINK", "source": "ship.price_list",
        "target": "hq.prices", "select": {"groups": ["north"]},
        "columns": {"rename": {"item": "item_code", "amount": "price"},
                    "sensitive": ["cost"], "exclude": ["note"]}}
    document.update(fields)
    return SyncRule.from_document(document)


def change(operation: Operation, before: dict[str, Value] | None,
           after: dict[str, Value] | None, table: str = "prices") -> ChangeEvent:
    image = after if after is not None else before
    assert image is not None
    return ChangeEvent(
        event_id=uuid.uuid4(), origin_node_id=SHORE, source_connector_id="shore-builtin",
        source_topic="sync.cdc.shore.hq.prices", source_partition=0, source_position=7,
        record=RecordKey.of("hq", table, {"item_code": image["item_code"]}),
        operation=operation, captured_at=CAPTURED, before=before, after=after)


ROW = {"item_code": "A-1", "price": 10, "cost": 4, "note": "internal", "region": "north"}
PROFILES = {"ship-n1": NodeProfile.of(["north"]), "ship-n2": NodeProfile.of(["north"], ["big"]),
            "ship-s1": NodeProfile.of(["south"]), "ship-t1": NodeProfile.of((), ["big"])}


def routes(*rules: SyncRule, profiles: dict[str, NodeProfile] | None = None) -> DownlinkRoutes:
    return DownlinkRoutes.of(list(rules), PROFILES if profiles is None else profiles)


def test_a_shore_change_goes_to_the_selected_nodes_in_the_ships_shape() -> None:
    routed = routes(rule()).route(change(Operation.INSERT, None, ROW), SHORE)

    assert routed.skip is None and sorted(routed.payloads) == ["ship-n1", "ship-n2"]
    payload = routed.payloads["ship-n1"]
    assert (payload.record.database, payload.record.table) == ("ship", "price_list")
    assert payload.record.primary_key == (("item", "A-1"),)
    assert dict(payload.values or {}) == {"amount": 10, "region": "north"}
    assert (payload.rule_id, payload.rule_version, payload.by_key) == ("prices", 3, True)
    assert payload.expected_local_revision is None and payload.result_revision is None
    assert payload.origin_node_id == SHORE


def test_a_delete_travels_with_the_key_only() -> None:
    routed = routes(rule()).route(change(Operation.DELETE, ROW, None), SHORE)

    payload = routed.payloads["ship-n2"]
    assert payload.operation is Operation.DELETE and payload.values is None
    assert payload.record.as_dict() == {"item": "A-1"}


def test_the_row_filter_is_evaluated_on_ship_names_before_and_after() -> None:
    north = routes(rule(filter="region = 'north' AND amount > 5"))
    moved_away = {**ROW, "region": "south"}

    assert north.route(change(Operation.INSERT, None, ROW), SHORE).payloads
    assert north.route(change(Operation.INSERT, None, moved_away), SHORE).skip is \
        DownlinkSkip.ROW_FILTER
    # A row that leaves the filter takes the change that made it leave along.
    left = north.route(change(Operation.UPDATE, ROW, moved_away), SHORE)
    assert dict(left.payloads["ship-n1"].values or {})["region"] == "south"
    # Neither matched before nor matches after: nothing travels.
    assert north.route(change(Operation.UPDATE, moved_away, {**moved_away, "price": 11}),
                       SHORE).skip is DownlinkSkip.ROW_FILTER


def test_an_update_of_dropped_columns_only_is_not_sent() -> None:
    routed = routes(rule()).route(
        change(Operation.UPDATE, ROW, {**ROW, "cost": 5, "note": "changed"}), SHORE)

    assert routed.payloads == {} and routed.skip is DownlinkSkip.NO_SYNCED_CHANGE


def test_an_include_list_keeps_only_its_columns_and_the_key() -> None:
    narrow = rule(columns={"include": ["amount"], "rename": {"item": "item_code",
                                                              "amount": "price"}})
    payload = routes(narrow).route(change(Operation.INSERT, None, ROW), SHORE).payloads["ship-n1"]

    assert dict(payload.values or {}) == {"amount": 10}
    assert payload.record.as_dict() == {"item": "A-1"}


def test_nodes_are_selected_by_id_group_or_tag_and_get_one_command_each() -> None:
    by_tag = rule("a-big", select={"tags": ["big"]}, columns={})
    by_id = rule("z-named", select={"nodes": ["ship-s1"]})
    routed = routes(rule("m-north"), by_tag, by_id).route(
        change(Operation.INSERT, None, ROW), SHORE)

    assert sorted(routed.payloads) == ["ship-n1", "ship-n2", "ship-s1", "ship-t1"]
    # The first rule by id decides for a node several rules select.
    assert routed.payloads["ship-n2"].rule_id == "a-big"
    assert routed.payloads["ship-n1"].rule_id == "m-north"
    assert routed.payloads["ship-s1"].rule_id == "z-named"
    assert dict(routed.payloads["ship-t1"].values or {})["cost"] == 4  # a-big drops nothing


def test_every_node_and_no_node() -> None:
    everyone = routes(rule(select={"nodes": ["*"]}))
    nobody = routes(rule(select={"groups": ["east"]}))

    assert sorted(everyone.route(change(Operation.INSERT, None, ROW), SHORE).payloads) == \
        sorted(PROFILES)
    assert nobody.route(change(Operation.INSERT, None, ROW), SHORE).skip is DownlinkSkip.NO_NODE


def test_only_downlink_rules_of_the_changed_table_route() -> None:
    uplink = rule("up", direction="UPLINK")
    other = rule("other", target="hq.other")
    table_routes = routes(uplink, other)

    assert table_routes.route(change(Operation.INSERT, None, ROW), SHORE).skip is \
        DownlinkSkip.NO_RULE
    assert table_routes.rules_offered


def test_a_two_way_rule_keeps_revisions_and_needs_the_loop_check() -> None:
    both = rule(direction="BIDIRECTIONAL")
    revision = Revision(uuid.uuid4().bytes)
    event = dataclasses.replace(change(Operation.INSERT, None, ROW), result_revision=revision)
    two_way = routes(both)

    payload = two_way.route(event, SHORE).payloads["ship-n1"]
    assert not payload.by_key and payload.result_revision == revision
    assert two_way.two_way("hq", "prices") and not routes(rule()).two_way("hq", "prices")


def test_a_downlink_rule_with_transforms_sends_nothing() -> None:
    masked = rule(transforms=[{"column": "amount", "transform": "round@1",
                               "args": {"places": 0}}])

    assert routes(masked).route(change(Operation.INSERT, None, ROW), SHORE).skip is \
        DownlinkSkip.NO_RULE


def test_two_shore_columns_that_map_to_one_ship_column_are_not_sent() -> None:
    clash = rule(columns={"rename": {"item": "item_code", "amount": "price"}})
    event = change(Operation.INSERT, None, {**ROW, "amount": 3})

    assert routes(clash).route(event, SHORE).skip is DownlinkSkip.RULE_SHAPE_FAILED


class Releases:
    def __init__(self, *rules: SyncRule) -> None:
        self.rules = list(rules)
        self.asked = 0

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        self.asked += 1
        return [(item, ReleaseStatus.ACTIVE) for item in self.rules]

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        return None

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        raise AssertionError


class Nodes:
    def __init__(self) -> None:
        self.profiles = dict(PROFILES)

    def active_profiles(self) -> dict[str, NodeProfile]:
        return dict(self.profiles)


def test_rules_and_profiles_are_read_again_after_the_ttl() -> None:
    now = [0.0]
    releases, nodes = Releases(), Nodes()
    opened: list[Nodes] = []

    def open_nodes() -> Nodes:
        opened.append(nodes)
        return nodes

    rules = DownlinkRules(releases, open_nodes, ttl=10.0, monotonic=lambda: now[0])
    assert not rules.current().rules_offered and opened == []  # no rule: no node lookup
    releases.rules.append(rule())
    assert not rules.current().rules_offered  # cached
    now[0] = 10.0
    assert rules.current().rules_offered and len(opened) == 1
    nodes.profiles["ship-n3"] = NodeProfile.of(["north"])
    now[0] = 25.0
    assert "ship-n3" in rules.current().route(change(Operation.INSERT, None, ROW),
                                              SHORE).payloads
    assert releases.asked == 3 and len(opened) == 1


names = st.text(alphabet="abcdefgh", min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(names, st.integers(), min_size=1, max_size=6),
       st.sets(names, max_size=3), st.dictionaries(names, names, max_size=3))
def test_the_reverse_shape_never_carries_a_dropped_column(
        row: dict[str, int], sensitive: set[str], rename: dict[str, str]) -> None:
    key = sorted(row)[0]
    sensitive.discard(key)
    rename = {source: target for source, target in rename.items()
              if source in row and source != key}  # a rule renames the ship's columns
    if len({target.lower() for target in rename.values()}) != len(rename):
        return
    item = SyncRule.from_document({
        "id": "prop", "version": 1, "direction": "DOWNLINK", "source": "s.t", "target": "h.t",
        "select": {"nodes": ["*"]}, "columns": {"sensitive": sorted(sensitive),
                                                 "rename": rename}})
    shore_row: dict[str, Value] = {item.target_column(name): value for name, value in row.items()}
    if len(shore_row) != len(row):
        return
    event = ChangeEvent(
        event_id=uuid.uuid4(), origin_node_id=SHORE, source_connector_id="c", source_topic="t",
        source_partition=0, source_position=1,
        record=RecordKey.of("h", "t", {item.target_column(key): row[key]}),
        operation=Operation.INSERT, captured_at=CAPTURED, before=None, after=shore_row)
    routed = DownlinkRoutes.of([item], {"n": NodeProfile()}).route(event, SHORE)
    if routed.skip is DownlinkSkip.RULE_SHAPE_FAILED:
        return  # a shore column's name is another column's ship name
    payload = routed.payloads["n"]
    sent = {**dict(payload.values or {}), **payload.record.as_dict()}
    assert not {name.lower() for name in sent} & {name.lower() for name in sensitive}
    assert sent == {name: value for name, value in row.items()
                    if name.lower() not in {s.lower() for s in sensitive}}
