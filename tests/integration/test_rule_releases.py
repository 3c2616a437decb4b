"""Rule releases on the real event store: the application across processes (what the ingress and
the worker see of what an operator released), `tidesync rules …` with its errors and exit codes,
and `tidesync audit history` replaying a release."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.console_support import small_pools
from tests.integration.shore_support import migrated_pool, pg_rows
from tidesync.apps.rules import ReleaseChanged, RuleReleasesApplication
from tidesync.apps.settings import RulesSettings
from tidesync.domain.rules.release import NodeActivation, ReleaseStatus, release_uuid
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.entrypoints import rules_cli
from tidesync.entrypoints.cli import main
from tidesync.localservices import PostgresDatabase
from tidesync.projections.catalogue import default_catalogue

pytestmark = pytest.mark.services

S = ReleaseStatus
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rules" / "crew.toml"


def new_rule_id() -> str:
    return f"crew-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """A database of its own: once a rule is released in a database, the shore applies by
    rules there, which every other test sharing it would see."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


def open_app(pg_database, four_eyes: bool = False) -> RuleReleasesApplication:
    return RuleReleasesApplication(env={**small_pools(pg_database.eventsourcing_env()),
                                        **RulesSettings(four_eyes=four_eyes).env()})


def rule(rule_id: str, **changes: object) -> SyncRule:
    base = SyncRule(rule_id=rule_id, source_database="shipdb", source_table="crew",
                    direction=Direction.UPLINK, selector=Selector(groups=frozenset({"tankers"})),
                    key_columns=("id",))
    return SyncRule(**{**{f: getattr(base, f) for f in base.__dataclass_fields__}, **changes})


# --------------------------------------------------------------------------- the application


def test_what_an_operator_releases_is_what_another_process_offers(pg_database):
    rule_id = new_rule_id()
    operator, shore = open_app(pg_database, four_eyes=True), open_app(pg_database)
    try:
        version = operator.draft(rule(rule_id), "user:alice", "new table").version
        operator.validate(rule_id, version, "user:alice", "checked")
        operator.approve(rule_id, version, "user:bob", "reviewed")
        assert rule_id not in {r.rule_id for r, _ in shore.offered()}
        assert shore.released(rule_id, version) is None  # approved, never published
        operator.publish(rule_id, version, "user:alice", "roll out")
        offered = {r.rule_id: (r, status) for r, status in shore.offered()}
        assert offered[rule_id][1] is S.DISTRIBUTING
        assert offered[rule_id][0].canonical() == rule(rule_id, version=1).canonical()
        shore.mark_active(rule_id, version, "system:rules", "every selected node runs it")
        assert {r.rule_id: s for r, s in operator.offered()}[rule_id] is S.ACTIVE
        second = operator.draft(rule(rule_id, description="v2"), "user:alice", "v2").version
        assert second == 2
        history = operator.history(rule_id, version)
        assert [(t.status, t.actor, t.reason) for t in history] == [
            (S.DRAFT, "user:alice", "new table"), (S.VALIDATED, "user:alice", "checked"),
            (S.APPROVED, "user:bob", "reviewed"), (S.DISTRIBUTING, "user:alice", "roll out"),
            (S.ACTIVE, "system:rules", "every selected node runs it")]
        assert shore.released(rule_id, version).canonical() == rule(rule_id, version=1).canonical()
    finally:
        operator.close()
        shore.close()


def test_a_stale_view_of_a_rule_is_refused_not_overwritten(pg_database):
    """Two processes publish two versions of one rule at once: the one that saves second
    finds the rule's version stream moved on and is refused."""
    rule_id = new_rule_id()
    first, second = open_app(pg_database), open_app(pg_database)
    try:
        for _ in range(2):
            version = first.draft(rule(rule_id), "user:alice", "x").version
            first.validate(rule_id, version, "user:alice", "x")
            first.approve(rule_id, version, "user:alice", "x")
        stale = second.versions(rule_id)
        first.publish(rule_id, 1, "user:alice", "x")
        release = second.release(rule_id, 2)
        release.publish(dt.datetime.now(dt.UTC), "user:alice", "x")
        stale.published(2, dt.datetime.now(dt.UTC), "user:alice", "x")
        with pytest.raises(ReleaseChanged) as raised:
            second._save(stale, release)
        assert raised.value.code == "CHANGED_MEANWHILE"
        assert [r.status for r in first.releases(rule_id)] == [S.DISTRIBUTING, S.APPROVED]
    finally:
        first.close()
        second.close()


# --------------------------------------------------------------------------- the command line


class Reports:
    """Activation reports as a heartbeat store would answer them (in memory)."""

    def __init__(self, activations: list[NodeActivation]) -> None:
        self.found = activations

    def activations(self, rule_id: str) -> list[NodeActivation]:
        return list(self.found)


@pytest.fixture
def configured(pg_database, tmp_path, monkeypatch) -> Iterator[Path]:
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    for name, value in {
        "KIND": "postgres", "POSTGRES_HOST": pg_database.host,
        "POSTGRES_PORT": str(pg_database.port), "POSTGRES_DBNAME": pg_database.dbname,
        "POSTGRES_USER": pg_database.user, "POSTGRES_PASSWORD": pg_database.password or "",
        "POSTGRES_POOL_SIZE": "2",
    }.items():
        monkeypatch.setenv(f"TIDESYNC_EVENT_STORE__{name}", value)
    target = tmp_path / "shore.sqlite"
    with sqlite3.connect(target) as connection:
        connection.execute("CREATE TABLE crew_on_board (id INTEGER PRIMARY KEY, full_name TEXT,"
                           " rank TEXT, status TEXT, nationality TEXT, passport_no TEXT,"
                           " updated_at DATETIME)")
    connection.close()
    monkeypatch.setenv("TIDESYNC_TARGET__SQLITE_PATH", str(target))
    monkeypatch.setenv("TIDESYNC_RULES__FOUR_EYES", "true")
    yield tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rule_file(directory: Path, rule_id: str, text: str | None = None) -> str:
    path = directory / f"{rule_id}.toml"
    path.write_text((text or EXAMPLE.read_text()).replace('id = "crew"', f'id = "{rule_id}"'))
    return str(path)


@contextmanager
def reports(monkeypatch, activations: list[NodeActivation]) -> Iterator[None]:
    @contextmanager
    def opened(config: object) -> Iterator[Reports]:
        yield Reports(activations)

    monkeypatch.setattr(rules_cli, "open_activation_reports", opened)
    yield


def test_the_example_rule_goes_from_file_to_rollback(configured, capsys, monkeypatch):
    rule_id = new_rule_id()
    path = rule_file(configured, rule_id)
    code, out, err = run(capsys, "rules", "draft", path, "--actor", "alice")
    assert (code, err) == (0, "")
    assert out.startswith(f"drafted {rule_id}@1 (DRAFT)")
    code, out, err = run(capsys, "rules", "validate", rule_id, "--actor", "alice")
    assert code == 0, err
    assert f"{rule_id}@1 VALIDATED (the rule and the shore's table)" in out
    code, _, err = run(capsys, "rules", "approve", f"{rule_id}@1", "--actor", "alice",
                       "--reason", "mine")
    assert code == 1 and "four-eyes" in err and "Traceback" not in err
    assert run(capsys, "rules", "approve", f"{rule_id}@1", "--actor", "bob",
               "--reason", "reviewed")[0] == 0
    code, out, _ = run(capsys, "rules", "publish", f"{rule_id}@1", "--reason", "roll out")
    assert code == 0 and "DISTRIBUTING" in out
    reported = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with reports(monkeypatch, [
            NodeActivation("ship-b", 0, 1, "RULE_FAILED", ("no column rank in shipdb.crew",),
                           reported),
            NodeActivation("ship-a", 1, 1, "RULE_VALID", (), reported)]):
        code, out, _ = run(capsys, "rules", "status", rule_id)
        assert code == 0
        lines = out.splitlines()
        assert lines[0] == f"{rule_id}: ships are offered version 1 (DISTRIBUTING)"
        assert lines[2].split()[:4] == ["ship-a", "1", "1", "RULE_VALID"]
        assert lines[3].split()[:4] == ["ship-b", "0", "1", "RULE_FAILED"]
        assert lines[4].strip() == "no column rank in shipdb.crew"
        code, out, _ = run(capsys, "rules", "status", rule_id, "--json")
        assert [n["node_id"] for n in json.loads(out)["nodes"]] == ["ship-a", "ship-b"]
    code, out, _ = run(capsys, "rules", "list", "--json")
    listed = {row["rule_id"]: row for row in map(json.loads, out.splitlines())}
    assert (listed[rule_id]["latest_version"], listed[rule_id]["offered_status"]) == (
        1, "DISTRIBUTING")
    code, out, _ = run(capsys, "rules", "show", f"{rule_id}@1", "--json")
    shown = json.loads(out)
    assert shown["rule"]["target"] == "fleet.crew_on_board" and shown["status"] == "DISTRIBUTING"
    assert [(t["status"], t["actor"]) for t in shown["transitions"]][:3] == [
        ("DRAFT", "user:alice"), ("VALIDATED", "user:alice"), ("APPROVED", "user:bob")]
    assert [t["status"] for t in shown["transitions"]][3:] == ["DISTRIBUTING"]
    code, out, _ = run(capsys, "rules", "rollback", rule_id, "--reason", "wrong filter")
    assert code == 0 and "no version was active before it" in out
    code, out, _ = run(capsys, "rules", "show", rule_id)
    assert out.splitlines()[1].split()[:2] == ["1", "SUPERSEDED"]

    code, out, _ = run(capsys, "audit", "history", "rule_release",
                       str(release_uuid(rule_id, 1)))
    assert code == 0
    events = json.loads(out)["events"]
    assert [(e["event_type"], e["reason"]) for e in events] == [
        ("RuleRelease.Drafted", "draft rule"), ("RuleRelease.Validated", "validate rule"),
        ("RuleRelease.Approved", "reviewed"), ("RuleRelease.Published", "roll out"),
        ("RuleRelease.Superseded", "rolled back")]
    assert events[0]["actor"] == events[1]["actor"] == "user:alice"


def test_validation_against_the_shore_table_lists_the_problems(configured, capsys):
    rule_id = new_rule_id()
    text = EXAMPLE.read_text().replace('target = "fleet.crew_on_board"', 'target = "fleet.nope"')
    assert run(capsys, "rules", "draft", rule_file(configured, rule_id, text))[0] == 0
    code, _, err = run(capsys, "rules", "validate", f"{rule_id}@1")
    assert code == 1
    assert f"{rule_id}@1 stays DRAFT: 1 problem(s)" in err
    assert "table fleet.nope does not exist" in err
    code, out, _ = run(capsys, "rules", "validate", f"{rule_id}@1", "--static")
    assert code == 0 and "VALIDATED (the rule itself)" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("rules", "approve", "nope-rule@1", "--reason", "x"), "has no version 1"),
    (("rules", "approve", "nope-rule", "--reason", "x"), "name the version"),
    (("rules", "publish", "nope@x", "--reason", "x"), "is not RULE or RULE@VERSION"),
    (("rules", "rollback", "never-drafted", "--reason", "x"), "has been drafted"),
    (("rules", "show", "never-drafted"), "has been drafted"),
    (("rules", "status", "never-drafted"), "has been drafted"),
    (("rules", "draft", "/nonexistent/rule.toml"), "No such file"),
])
def test_errors_print_one_line_and_exit_1(configured, capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 1 and message in err and len(err.splitlines()) == 1


def test_a_bad_rule_file_is_refused_naming_the_problem(configured, capsys):
    path = configured / "bad.toml"
    path.write_text('id = "crew"\ndirection = "SIDEWAYS"\nsource = "shipdb.crew"\n')
    code, _, err = run(capsys, "rules", "draft", str(path))
    assert code == 1 and "direction: 'SIDEWAYS' is not one of" in err
    path.write_text('id = "crew"\ndirection = "UPLINK"\nsource = "shipdb.crew"\n')
    code, _, err = run(capsys, "rules", "draft", str(path))
    assert code == 1 and "select: names no node" in err
    path.write_bytes(b"# " + b"x" * (64 * 1024))
    code, _, err = run(capsys, "rules", "draft", str(path))
    assert code == 1 and "at most 64 KiB" in err


def test_every_release_step_a_person_took_reaches_the_audit_view(pg_database):
    rule_id = new_rule_id()
    app = open_app(pg_database)
    catalogue = default_catalogue()
    try:
        version = app.draft(rule(rule_id), "user:alice", "new table").version
        app.validate(rule_id, version, "user:alice", "checked")
        app.approve(rule_id, version, "user:bob", "reviewed")
        app.publish(rule_id, version, "user:alice", "roll out")
        app.mark_active(rule_id, version, "system:rules", "every node runs it")
        with migrated_pool(pg_database) as pool:
            apps = catalogue.open_applications(small_pools(pg_database.eventsourcing_env()))
            try:
                catalogue.runner("audit", apps, pool).run_until_idle()
            finally:
                apps.close()
            rows = pg_rows(pool, "SELECT aggregate_kind, event_type, actor, reason"
                                 " FROM audit_event WHERE aggregate_id = %s ORDER BY seq",
                           (release_uuid(rule_id, version),))
    finally:
        app.close()
    assert rows == [
        ("rule_release", "RuleRelease.Drafted", "user:alice", "new table"),
        ("rule_release", "RuleRelease.Validated", "user:alice", "checked"),
        ("rule_release", "RuleRelease.Approved", "user:bob", "reviewed"),
        ("rule_release", "RuleRelease.Published", "user:alice", "roll out")]
