"""The RuleRelease state machine (§8.2): every legal step with who and why, every illegal one
refused with its code, four-eyes approval, and the rule-wide commands of the application
(versions, one rollout at a time, activation, rollback) on the in-memory event store."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tidesync.apps.rules import (
    ReleaseNotFound,
    RuleReleasesApplication,
    parse_release_ref,
    rule_from_toml,
)
from tidesync.apps.settings import RulesSettings
from tidesync.domain.column_kinds import ColumnKind, ColumnType
from tidesync.domain.errors import ErrorCode
from tidesync.domain.rules.release import (
    ReleaseRefused,
    ReleaseStatus,
    RuleRelease,
    RuleVersions,
    release_uuid,
    shore_schema_problems,
)
from tidesync.domain.rules.sync_rule import Direction, RuleError, Selector, SyncRule

S = ReleaseStatus
AUTHOR, APPROVER = "user:alice", "user:bob"


def crew_rule(**changes: object) -> SyncRule:
    rule = SyncRule(rule_id="crew", source_database="shipdb", source_table="crew",
                    direction=Direction.UPLINK, selector=Selector(nodes=frozenset({"*"})),
                    key_columns=("id",))
    return dataclasses.replace(rule, **changes)  # type: ignore[arg-type]


def drafted(clock: ManualClock, version: int = 1) -> RuleRelease:
    return RuleRelease.draft(crew_rule(version=version), clock(), AUTHOR, "new crew table")


def refusal(action: Callable[[], object]) -> ErrorCode:
    with pytest.raises(ReleaseRefused) as raised:
        action()
    return raised.value.code


# --------------------------------------------------------------------------- one release


def step_to(release: RuleRelease, status: ReleaseStatus, clock: ManualClock) -> None:
    """Walk a fresh DRAFT along the legal path to `status`."""
    path = [S.VALIDATED, S.APPROVED, S.DISTRIBUTING, S.ACTIVE, S.SUPERSEDED, S.ROLLBACK_TARGET]
    steps = {
        S.VALIDATED: lambda: release.validate([], clock(), AUTHOR, "checked"),
        S.APPROVED: lambda: release.approve(clock(), APPROVER, "looks right", True),
        S.DISTRIBUTING: lambda: release.publish(clock(), AUTHOR, "ship it"),
        S.ACTIVE: lambda: release.activate(clock(), "system:rules", "all nodes run it"),
        S.SUPERSEDED: lambda: release.supersede(2, clock(), "system:rules", "v2 active"),
        S.ROLLBACK_TARGET: lambda: release.choose_for_rollback(clock(), AUTHOR, "v2 broke"),
    }
    for next_status in path[:path.index(status) + 1] if status is not S.DRAFT else []:
        clock.advance(60)
        steps[next_status]()


def test_a_release_walks_the_whole_lifecycle_recording_who_why_and_when():
    clock = ManualClock()
    release = drafted(clock)
    assert release.id == release_uuid("crew", 1)
    assert release.status is S.DRAFT and release.author == AUTHOR
    assert release.rule.canonical() == crew_rule(version=1).canonical()
    assert release.checksum == crew_rule(version=1).checksum().hex()
    step_to(release, S.ROLLBACK_TARGET, clock)
    release.activate(clock(), "system:rules", "back on every node")
    assert [(t.status, t.actor) for t in release.transitions] == [
        (S.DRAFT, AUTHOR), (S.VALIDATED, AUTHOR), (S.APPROVED, APPROVER),
        (S.DISTRIBUTING, AUTHOR), (S.ACTIVE, "system:rules"), (S.SUPERSEDED, "system:rules"),
        (S.ROLLBACK_TARGET, AUTHOR), (S.ACTIVE, "system:rules")]
    times = [t.at for t in release.transitions]
    assert times == sorted(times) and len(set(times)) == len(times) - 1
    assert [type(e).__name__ for e in release.collect_events()] == [
        "Drafted", "Validated", "Approved", "Published", "Activated", "Superseded",
        "ChosenForRollback", "Activated"]


def test_a_failed_validation_records_the_problems_and_stays_draft():
    clock = ManualClock()
    release = drafted(clock)
    release.validate(["key: no column id in shipdb.crew"], clock(), AUTHOR, "check")
    assert release.status is S.DRAFT
    assert release.problems == ["key: no column id in shipdb.crew"]
    release.validate([], clock(), AUTHOR, "column added")
    assert release.status is S.VALIDATED and release.problems == []


ACTIONS: dict[str, Callable[[RuleRelease, ManualClock], None]] = {
    "validate": lambda r, c: r.validate([], c(), AUTHOR, "x"),
    "approve": lambda r, c: r.approve(c(), APPROVER, "x", False),
    "publish": lambda r, c: r.publish(c(), AUTHOR, "x"),
    "activate": lambda r, c: r.activate(c(), "system:rules", "x"),
    "supersede": lambda r, c: r.supersede(None, c(), AUTHOR, "x"),
    "choose_for_rollback": lambda r, c: r.choose_for_rollback(c(), AUTHOR, "x"),
}
LEGAL = {
    S.DRAFT: {"validate"},
    S.VALIDATED: {"approve"},
    S.APPROVED: {"publish"},
    S.DISTRIBUTING: {"activate", "supersede"},
    S.ACTIVE: {"supersede", "choose_for_rollback"},
    S.SUPERSEDED: {"choose_for_rollback"},
    S.ROLLBACK_TARGET: {"activate", "supersede"},
}


@pytest.mark.parametrize("status", list(S))
@pytest.mark.parametrize("action", list(ACTIONS))
def test_every_transition_is_legal_or_refused_with_release_state(status: ReleaseStatus,
                                                                 action: str):
    clock = ManualClock()
    release = drafted(clock)
    step_to(release, status, clock)
    assert release.status is status
    if action in LEGAL[status]:
        ACTIONS[action](release, clock)
        assert release.status is not status or action == "validate"
    else:
        before = len(release.transitions)
        assert refusal(lambda: ACTIONS[action](release, clock)) is ErrorCode.RELEASE_STATE
        assert release.status is status and len(release.transitions) == before


def test_only_a_version_that_was_active_can_be_rolled_back_to():
    clock = ManualClock()
    release = drafted(clock)
    step_to(release, S.DISTRIBUTING, clock)
    release.supersede(None, clock(), AUTHOR, "rolled back")
    assert release.status is S.SUPERSEDED
    assert refusal(lambda: release.choose_for_rollback(clock(), AUTHOR, "x")) is \
        ErrorCode.RELEASE_STATE


def test_four_eyes_refuses_the_author_as_approver_and_accepts_anyone_else():
    clock = ManualClock()
    release = drafted(clock)
    step_to(release, S.VALIDATED, clock)
    assert refusal(lambda: release.approve(clock(), AUTHOR, "mine", True)) is ErrorCode.FOUR_EYES
    assert release.status is S.VALIDATED
    release.approve(clock(), APPROVER, "reviewed", True)
    assert release.status is S.APPROVED
    alone = drafted(clock)
    step_to(alone, S.VALIDATED, clock)
    alone.approve(clock(), AUTHOR, "small site, one operator", False)
    assert alone.status is S.APPROVED


@pytest.mark.parametrize(("actor", "reason", "code"), [
    (AUTHOR, " ", ErrorCode.REASON_REQUIRED),
    ("", "why", ErrorCode.INVALID_INPUT),
    (AUTHOR, "bad\x00reason", ErrorCode.UNSTORABLE_TEXT),
    (AUTHOR, "x" * 2001, ErrorCode.INVALID_INPUT),
])
def test_every_step_needs_an_actor_and_a_storable_reason(actor: str, reason: str,
                                                         code: ErrorCode):
    clock = ManualClock()
    release = drafted(clock)
    assert refusal(lambda: release.validate([], clock(), actor, reason)) is code
    assert refusal(lambda: RuleRelease.draft(crew_rule(version=1), clock(), actor,
                                             reason)) is code


def test_a_rule_with_static_problems_is_never_drafted():
    with pytest.raises(RuleError, match="select: names no node"):
        RuleRelease.draft(crew_rule(version=1, selector=Selector()), ManualClock()(), AUTHOR,
                          "x")


def test_rollback_returns_to_the_version_active_before_the_offered_one():
    versions = RuleVersions(rule_id="crew", at=ManualClock()(), actor=AUTHOR, reason="x")
    assert versions.rollback_target(1) is None
    for version in (1, 2, 3):
        versions.activated(version, ManualClock()(), "system:rules", "x")
    assert versions.rollback_target(4) == 3  # 4 is distributing, 3 active
    assert versions.rollback_target(3) == 2  # 3 is active
    versions.rolled_back(3, 2, ManualClock()(), AUTHOR, "x")
    versions.activated(2, ManualClock()(), "system:rules", "x")  # already on top
    assert versions.active_line == [1, 2]
    assert versions.rollback_target(2) == 1


# --------------------------------------------------------------------------- the shore's table


def test_the_shore_table_is_checked_under_target_names_without_dropped_columns():
    rule = crew_rule(target_database="shore", target_table="crew_list",
                     rename={"name": "full_name"}, exclude_columns=("notes",),
                     sensitive_columns=("passport",), include_columns=("name", "rank"),
                     row_filter="rank = 'captain'")
    shore = {"id": ColumnType(ColumnKind.INTEGER), "full_name": ColumnType(ColumnKind.TEXT),
             "rank": ColumnType(ColumnKind.TEXT)}
    assert shore_schema_problems(rule, shore, ["id"]) == []
    missing = {name: kind for name, kind in shore.items() if name != "full_name"}
    assert shore_schema_problems(rule, missing, ["id"]) == [
        "columns.include: no column name in shore.crew_list",
        "columns.rename: no column name in shore.crew_list"]
    assert shore_schema_problems(rule, None) == ["table shore.crew_list does not exist"]


# --------------------------------------------------------------------------- the application


@pytest.fixture
def app() -> RuleReleasesApplication:
    return RuleReleasesApplication(env=RulesSettings(four_eyes=True).env(),
                                   clock=ManualClock())


def released_to(app: RuleReleasesApplication, status: ReleaseStatus, **changes: object) -> int:
    """Draft a new version of crew and take it to APPROVED or DISTRIBUTING."""
    version = app.draft(crew_rule(**changes), AUTHOR, "draft").version
    app.validate("crew", version, AUTHOR, "check")
    app.approve("crew", version, APPROVER, "reviewed")
    if status is S.DISTRIBUTING:
        app.publish("crew", version, AUTHOR, "roll out")
    return version


def statuses(app: RuleReleasesApplication) -> list[ReleaseStatus]:
    return [release.status for release in app.releases("crew")]


def test_versions_are_numbered_per_rule_and_the_file_version_is_ignored(app):
    assert app.draft(crew_rule(version=7), AUTHOR, "x").version == 1
    assert app.draft(crew_rule(description="v2"), AUTHOR, "x").version == 2
    other = crew_rule(rule_id="cargo", source_table="cargo")
    assert app.draft(other, AUTHOR, "x").version == 1
    assert app.rule_ids() == ["cargo", "crew"]
    assert app.release("crew", 2).rule.description == "v2"
    with pytest.raises(ReleaseNotFound):
        app.release("crew", 3)
    with pytest.raises(RuleError, match="select"):
        app.draft(crew_rule(selector=Selector()), AUTHOR, "x")
    assert app.versions("crew").latest == 2


def test_four_eyes_comes_from_the_rules_settings(app):
    version = app.draft(crew_rule(), AUTHOR, "x").version
    app.validate("crew", version, AUTHOR, "check")
    assert refusal(lambda: app.approve("crew", version, AUTHOR, "mine")) is ErrorCode.FOUR_EYES
    lenient = RuleReleasesApplication(env=RulesSettings().env(), clock=ManualClock())
    version = lenient.draft(crew_rule(), AUTHOR, "x").version
    lenient.validate("crew", version, AUTHOR, "check")
    lenient.approve("crew", version, AUTHOR, "mine")
    assert lenient.release("crew", version).status is S.APPROVED


def test_validation_against_a_schema_keeps_a_misfit_draft(app):
    version = app.draft(crew_rule(), AUTHOR, "x").version
    asked: list[tuple[str, str]] = []

    def schema(database: str, table: str) -> tuple[dict[str, ColumnType] | None, list[str]]:
        asked.append((database, table))
        return {"name": ColumnType(ColumnKind.TEXT)}, []

    problems = app.validate("crew", version, AUTHOR, "check", schema)
    assert asked == [("shipdb", "crew")]
    assert problems == ["key: no column id in shipdb.crew"]
    assert app.release("crew", version).status is S.DRAFT


def test_publishing_then_activation_supersedes_the_previous_active_version(app):
    first = released_to(app, S.DISTRIBUTING)
    assert app.offered() == [(app.release("crew", first).rule, S.DISTRIBUTING)]
    app.mark_active("crew", first, "system:rules", "every node runs it")
    app.mark_active("crew", first, "system:rules", "again: nothing changes")
    second = released_to(app, S.DISTRIBUTING, description="v2")
    assert statuses(app) == [S.ACTIVE, S.DISTRIBUTING]
    assert [(rule.version, status) for rule, status in app.offered()] == [(2, S.DISTRIBUTING)]
    app.mark_active("crew", second, "system:rules", "every node runs it")
    assert statuses(app) == [S.SUPERSEDED, S.ACTIVE]
    assert app.release("crew", first).transitions[-1].reason == "version 2 became active"
    assert app.released("crew", first) == app.release("crew", first).rule
    assert app.released("crew", 9) is None and app.released("nope", 1) is None


def test_one_version_rolls_out_at_a_time_and_never_an_older_one(app):
    first = released_to(app, S.DISTRIBUTING)
    second = released_to(app, S.APPROVED)
    assert refusal(lambda: app.publish("crew", second, AUTHOR, "x")) is \
        ErrorCode.ROLLOUT_IN_PROGRESS
    app.mark_active("crew", first, "system:rules", "all run it")
    third = released_to(app, S.DISTRIBUTING)
    app.mark_active("crew", third, "system:rules", "all run it")
    assert refusal(lambda: app.publish("crew", second, AUTHOR, "x")) is \
        ErrorCode.RELEASE_OUTDATED
    assert app.released("crew", second) is None
    assert refusal(lambda: app.mark_active("crew", second, "system:rules", "x")) is \
        ErrorCode.RELEASE_STATE


def test_rollback_of_a_rollout_offers_the_active_version_again(app):
    first = released_to(app, S.DISTRIBUTING)
    app.mark_active("crew", first, "system:rules", "all run it")
    released_to(app, S.DISTRIBUTING)
    assert app.rollback("crew", AUTHOR, "v2 fails on ships") == (2, 1)
    assert statuses(app) == [S.ROLLBACK_TARGET, S.SUPERSEDED]
    assert app.release("crew", 2).transitions[-1].reason == "rolled back"
    assert [(rule.version, status) for rule, status in app.offered()] == [
        (1, S.ROLLBACK_TARGET)]
    app.mark_active("crew", first, "system:rules", "all run it again")
    assert statuses(app) == [S.ACTIVE, S.SUPERSEDED]


def test_rollback_of_an_active_version_returns_to_the_one_before(app):
    for _ in range(3):
        version = released_to(app, S.DISTRIBUTING)
        app.mark_active("crew", version, "system:rules", "all run it")
    assert app.rollback("crew", AUTHOR, "v3 is wrong") == (3, 2)
    app.mark_active("crew", 2, "system:rules", "all run it")
    assert app.rollback("crew", AUTHOR, "v2 is wrong too") == (2, 1)
    assert statuses(app) == [S.ROLLBACK_TARGET, S.SUPERSEDED, S.SUPERSEDED]
    assert app.rollback("crew", AUTHOR, "withdraw the rule") == (1, None)
    assert app.offered() == []
    assert refusal(lambda: app.rollback("crew", AUTHOR, "x")) is ErrorCode.NOTHING_TO_ROLL_BACK


def test_summaries_show_the_newest_and_the_offered_version(app):
    first = released_to(app, S.DISTRIBUTING)
    app.mark_active("crew", first, "system:rules", "all run it")
    app.draft(crew_rule(description="next"), AUTHOR, "x")
    (summary,) = app.list()
    assert (summary.rule_id, summary.latest_version, summary.latest_status,
            summary.offered_version, summary.offered_status) == ("crew", 2, S.DRAFT, 1, S.ACTIVE)


# --------------------------------------------------------------------------- documents


def test_a_rule_file_is_read_with_limits():
    rule = rule_from_toml('id = "crew"\ndirection = "UPLINK"\nsource = "shipdb.crew"\n'
                          'key = ["id"]\n[select]\nnodes = ["*"]\n')
    assert rule.canonical() == crew_rule().canonical()
    with pytest.raises(RuleError, match="not valid TOML"):
        rule_from_toml("id = ")
    with pytest.raises(RuleError, match="64 KiB"):
        rule_from_toml("# " + "x" * 64 * 1024)
    with pytest.raises(RuleError, match="NUL"):
        rule_from_toml('id = "a\x00"')


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=12), st.integers(min_value=-3, max_value=10**6))
def test_release_references_parse_or_are_refused(rule_id: str, version: int):
    text = f"{rule_id}@{version}"
    if rule_id and "@" not in rule_id and version >= 1:
        assert parse_release_ref(text) == (rule_id, version)
        assert parse_release_ref(rule_id) == (rule_id, None)
    else:
        with pytest.raises(RuleError):
            parse_release_ref(text)


def test_release_ids_are_stable_and_distinct():
    assert release_uuid("crew", 1) == release_uuid("crew", 1)
    assert len({release_uuid("crew", 1), release_uuid("crew", 2), release_uuid("crew1", 1),
                RuleVersions.create_id("crew")}) == 4
    assert isinstance(release_uuid("crew", 1), uuid.UUID)
