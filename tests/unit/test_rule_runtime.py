"""The rule runtime: which changes a ship sends under its rules and in what shape — row filter,
column selection, transforms, renames, target table, rule id and version, business time — and
that a sensitive column's value reaches neither the shaped event nor the bytes on the wire."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.target_events import change, revision
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.rules.runtime import (
    Filtered,
    FilterReason,
    RuleSet,
    Shaped,
    ShapeFailed,
    covering_conflicts,
)
from tidesync.domain.rules.sync_rule import SyncRule
from tidesync.domain.rules.transforms import TransformContext
from tidesync.wire import codec

CONTEXT = TransformContext(mask_key=b"k" * 32)
SECRET = "passport-X99-secret"


def rule(**fields: Any) -> SyncRule:
    document: dict[str, Any] = {"id": "crew", "version": 3, "direction": "UPLINK",
                                "source": "ops.crew", "select": {"nodes": ["*"]}}
    document.update(fields)
    return SyncRule.from_document(document)


def crew(**values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"id": 7, "name": "  Ada ", "rank": "captain",
                           "salary": Decimal("10.555"), "passport": SECRET,
                           "joined": dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC)}
    row.update(values)
    return row


def inserted(**values: Any) -> ChangeEvent:
    row = crew(**values)
    return change(Operation.INSERT, "ops", "crew", {"id": row["id"]}, after=row)


def updated(before: dict[str, Any], after: dict[str, Any]) -> ChangeEvent:
    """An UPDATE of a one-way table: no revisions, as the normalizer reads those."""
    event = change(Operation.UPDATE, "ops", "crew", {"id": before["id"]}, before=before,
                   after=after)
    return dataclasses.replace(event, result_revision=None)


def deleted(**values: Any) -> ChangeEvent:
    row = crew(**values)
    return change(Operation.DELETE, "ops", "crew", {"id": row["id"]}, before=row)


def shaped(rules: RuleSet, event: ChangeEvent) -> ChangeEvent:
    outcome = rules.shape(event, CONTEXT)
    assert isinstance(outcome, Shaped), outcome
    return outcome.event


# ----------------------------------------------------------------------------- matching


def test_without_rules_every_event_passes_unchanged() -> None:
    event = inserted()
    assert RuleSet().shape(event, CONTEXT) == Shaped(event)


def test_a_table_no_uplink_rule_covers_is_not_sent_once_rules_exist() -> None:
    rules = RuleSet([rule(source="ops.other"), rule(id="down", direction="DOWNLINK")])
    assert rules.shape(inserted(), CONTEXT) == Filtered(FilterReason.NO_RULE)


def test_the_event_names_its_rule_version_and_business_time() -> None:
    event = shaped(RuleSet([rule(business_time="joined")]), inserted())
    assert (event.rule_id, event.rule_version) == ("crew", 3)
    assert event.business_occurred_at == dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC)
    assert shaped(RuleSet([rule()]), inserted()).business_occurred_at is None


def test_a_date_business_time_is_midnight_utc_and_a_delete_takes_it_from_before() -> None:
    event = shaped(RuleSet([rule(business_time="joined")]),
                   deleted(joined=dt.date(2023, 1, 2)))
    assert event.business_occurred_at == dt.datetime(2023, 1, 2, tzinfo=dt.UTC)


# ----------------------------------------------------------------------------- row filter


def test_the_row_filter_decides_inserts_on_after_and_deletes_on_before() -> None:
    rules = RuleSet([rule(filter="rank = 'captain'")])
    assert isinstance(rules.shape(inserted(), CONTEXT), Shaped)
    assert rules.shape(inserted(rank="cook"), CONTEXT) == Filtered(FilterReason.ROW_FILTER,
                                                                  "crew")
    assert isinstance(rules.shape(deleted(), CONTEXT), Shaped)
    assert isinstance(rules.shape(deleted(rank="cook"), CONTEXT), Filtered)


def test_an_update_travels_when_the_row_matches_before_or_after_it() -> None:
    rules = RuleSet([rule(filter="rank = 'captain'")])
    captain, cook = crew(), crew(rank="cook")
    leaving = rules.shape(updated(captain, cook), CONTEXT)
    entering = rules.shape(updated(cook, captain), CONTEXT)
    assert isinstance(leaving, Shaped) and leaving.event.operation is Operation.UPDATE
    assert leaving.event.after is not None and leaving.event.after["rank"] == "cook"
    assert isinstance(entering, Shaped)
    assert isinstance(rules.shape(updated(cook, crew(rank="cook", name="Bo")), CONTEXT),
                      Filtered)


# ----------------------------------------------------------------------------- columns


def test_excluded_and_sensitive_columns_are_dropped_from_both_images() -> None:
    rules = RuleSet([rule(columns={"exclude": ["salary"], "sensitive": ["passport"]})])
    event = shaped(rules, updated(crew(), crew(rank="first mate")))
    assert event.before is not None and event.after is not None
    assert set(event.after) == set(event.before) == {"id", "name", "rank", "joined"}
    assert event.changed_columns() == ("rank",)


def test_an_include_list_keeps_the_key_and_the_sync_metadata() -> None:
    rules = RuleSet([rule(columns={"include": ["rank"]})])
    event = shaped(rules, inserted(_sync_revision="r1"))
    assert event.after == {"id": 7, "rank": "captain", "_sync_revision": "r1"}


def test_an_update_of_only_dropped_columns_is_not_sent() -> None:
    rules = RuleSet([rule(columns={"sensitive": ["passport"]})])
    outcome = rules.shape(updated(crew(), crew(passport="new-passport")), CONTEXT)
    assert outcome == Filtered(FilterReason.NO_SYNCED_CHANGE, "crew")


# ----------------------------------------------------------------------------- shape


def test_a_ship_keeps_its_own_names_for_the_shore_to_map() -> None:
    # The shore checks an event against its rule in the ship's names, then maps them.
    rules = RuleSet([rule(target="fleet.people", columns={"rename": {"id": "crew_id",
                                                                     "rank": "title"}})])
    event = shaped(rules, inserted())
    assert (event.database, event.table) == (inserted().database, inserted().table)
    assert event.primary_key == inserted().primary_key
    assert event.after is not None and event.after["rank"] == "captain"
    assert event.event_id == event.expected_event_id()


def test_transforms_apply_to_kept_columns() -> None:
    rules = RuleSet([rule(columns={"rename": {"name": "display"}},
                          transforms=[{"column": "name", "transform": "trim@1"},
                                      {"column": "salary", "transform": "round@1",
                                       "args": {"places": 2}},
                                      {"column": "passport", "transform": "hmac_mask@1"}])])
    event = shaped(rules, inserted())
    assert event.after is not None
    assert event.after["name"] == "Ada"
    assert event.after["salary"] == Decimal("10.56")
    assert event.after["passport"] != SECRET and len(str(event.after["passport"])) == 16


def test_a_transform_that_cannot_apply_fails_naming_the_column_not_the_value() -> None:
    rules = RuleSet([rule(transforms=[{"column": "passport", "transform": "round@1",
                                       "args": {"places": 0}}])])
    outcome = rules.shape(inserted(), CONTEXT)
    assert isinstance(outcome, ShapeFailed)
    assert "passport" in outcome.detail and SECRET not in outcome.detail


def test_the_event_keeps_its_id_and_coordinates() -> None:
    event = inserted()
    result = shaped(RuleSet([rule(target="fleet.people")]), event)
    assert (result.event_id, result.source_topic, result.source_position) == (
        event.event_id, event.source_topic, event.source_position)


def test_one_table_follows_one_uplink_rule() -> None:
    rules = [rule(id="b-crew"), rule(id="a-crew"), rule(id="c-down", direction="DOWNLINK")]
    assert covering_conflicts(rules) == {"b-crew": "a-crew"}
    assert shaped(RuleSet(rules), inserted()).rule_id == "a-crew"


# ----------------------------------------------------------------------------- the secret


def wire_bytes(event: ChangeEvent) -> bytes:
    message = codec.build_batch([event], node_id="ship-1", batch_id=uuid.uuid4(),
                                created_at=dt.datetime.now(dt.UTC), include_before=True)
    return codec.serialize_batch(message)


@settings(max_examples=60, deadline=None)
@given(secret=st.text(min_size=1, max_size=30).map(lambda text: f"<{text}|passport>"),
       operation=st.sampled_from([Operation.INSERT, Operation.UPDATE, Operation.DELETE]))
def test_a_sensitive_value_never_reaches_the_event_or_the_wire(secret: str,
                                                               operation: Operation) -> None:
    rules = RuleSet([rule(columns={"sensitive": ["passport"]})])
    before, after = crew(passport=secret), crew(passport=secret, rank="bosun")
    event = {Operation.INSERT: lambda: inserted(passport=secret),
             Operation.UPDATE: lambda: updated(before, after),
             Operation.DELETE: lambda: deleted(passport=secret)}[operation]()
    result = shaped(rules, event)
    for image in (result.before, result.after):
        assert image is None or secret not in [str(value) for value in image.values()]
    assert secret.encode("utf-8", "surrogatepass") not in wire_bytes(result)


def test_the_revisions_of_a_two_way_table_survive_shaping() -> None:
    base, result = revision(), revision()
    event = change(Operation.UPDATE, "ops", "crew", {"id": 7}, before=crew(),
                   after=crew(rank="bosun"), base=base, result=result)
    out = shaped(RuleSet([rule(direction="BIDIRECTIONAL")]), event)
    assert (out.base_revision, out.result_revision) == (base, result)
