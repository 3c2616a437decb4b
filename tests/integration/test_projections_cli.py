"""`tidesync projections list|status|rebuild` and `tidesync audit history` against the real
event store: JSON and table output, the audited rebuild, errors with their exit codes."""

from __future__ import annotations

import io
import json
import re
import uuid

import pytest

from tests.integration.projection_support import new_node_id, save_synthetic_jobs, shore_apps
from tests.integration.shore_support import migrated_pool, pg_rows
from tidesync.entrypoints.cli import main
from tidesync.entrypoints.projections_cli import ProgressPrinter
from tidesync.projections.rebuild import RebuildProgress

pytestmark = pytest.mark.services

VIEWS = {"receipts", "record_head", "conflict_center", "node_overview", "backlog", "audit"}


@pytest.fixture
def configured(pg_database, monkeypatch):
    monkeypatch.delenv("TIDESYNC_CONFIG", raising=False)
    for name, value in {
        "KIND": "postgres", "POSTGRES_HOST": pg_database.host,
        "POSTGRES_PORT": str(pg_database.port), "POSTGRES_DBNAME": pg_database.dbname,
        "POSTGRES_USER": pg_database.user, "POSTGRES_PASSWORD": pg_database.password or "",
        "POSTGRES_POOL_SIZE": "2",
    }.items():
        monkeypatch.setenv(f"TIDESYNC_EVENT_STORE__{name}", value)
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps:
        node_id = new_node_id()
        save_synthetic_jobs(apps, node_id, jobs=3, per_job=20)
        yield pool, node_id


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_names_every_view_with_its_tables(capsys):
    code, out, _ = run(capsys, "projections", "list", "--json")
    assert code == 0
    views = {view["name"]: view for view in json.loads(out)}
    assert set(views) == VIEWS
    assert views["backlog"]["tables"] == ["backlog", "backlog_event", "backlog_job"]
    assert {"apply_jobs", "conflict_cases", "nodes", "operations"} <= set(
        views["audit"]["applications"])
    code, out, _ = run(capsys, "projections", "list")
    assert code == 0 and all(name in out for name in VIEWS)


def test_rebuild_reports_progress_and_is_audited_then_status_shows_it_current(configured,
                                                                             capsys):
    pool, node_id = configured
    code, out, err = run(capsys, "projections", "rebuild", "record_head", "--reason",
                         "index fix", "--actor", "tester", "--batch-size", "5")
    assert code == 0, err
    assert re.match(r"rebuilt record_head: [\d,]+ notifications in [\d.]+s; rows"
                    r" record_head=[\d,]+, record_head_decision=[\d,]+;"
                    r" action [0-9a-f-]{36}\n", out)
    lines = err.splitlines()  # not a terminal: plain lines, no bar
    assert lines[0].startswith("rebuild record_head: copying") and "\r" not in err
    assert lines[-1].startswith("rebuild record_head: done 100.0%")
    assert pg_rows(pool, "SELECT count(*) FROM record_head WHERE origin_node_id = %s",
                   (node_id,)) == [(50,)]

    action_id = out.strip().rsplit(" ", 1)[1]
    code, out, _ = run(capsys, "audit", "history", "operator_action", action_id)
    assert code == 0
    history = json.loads(out)
    assert [(e["event_type"], e["actor"], e["reason"]) for e in history["events"]] == [
        ("OperatorAction.Requested", "user:tester", "index fix"),
        ("OperatorAction.Completed", "user:tester", "rebuild switched in")]
    code, out, _ = run(capsys, "audit", "history", "operator_action", action_id,
                       "--version", "2")
    state = json.loads(out)
    assert state["state"]["outcome"] == "COMPLETED" and state["state"]["target"] == "record_head"

    code, out, _ = run(capsys, "projections", "status", "record_head", "--json")
    assert code == 0
    (status,) = json.loads(out)
    feed, decisions = status["feeds"]  # applied results, and decisions applied on the shore
    assert status["view"] == "record_head" and feed["feed"] == "record_head"
    assert decisions["feed"] == "record_head.conflict_cases"
    assert feed["behind"] == 0 and feed["position"] == feed["head"] > 0
    assert feed["rate_per_second"] > 0 and status["rebuilding"] == []
    code, out, _ = run(capsys, "projections", "status")
    assert code == 0
    assert re.search(r"^audit\s+audit\.operations\s+[\d,]+\s+[\d,]+\s+\d", out, re.M)
    assert re.search(r"^record_head\s+record_head\s+[\d,]+", out, re.M)


def test_status_counts_the_events_a_view_has_not_read(configured, capsys):
    pool, _ = configured
    _code, out, _ = run(capsys, "projections", "status", "receipts", "--json")
    (status,) = json.loads(out)
    behind = status["feeds"][0]["behind"]
    position = status["feeds"][0]["position"]
    finalized = pg_rows(pool, "SELECT count(*) FROM apply_jobs_events WHERE notification_id > %s"
                              " AND topic LIKE %s", (position, "%ApplyJob.Finalized"))
    assert behind == finalized[0][0] > 0


def test_audit_history_shows_events_states_and_diffs_as_json(configured, capsys):
    pool, node_id = configured
    job_id = pg_rows(pool, "SELECT originator_id FROM apply_jobs_events WHERE topic LIKE %s"
                           " ORDER BY notification_id DESC LIMIT 1", ("%ApplyJob.Claimed",))[0][0]
    code, out, _ = run(capsys, "audit", "history", "apply_job", str(job_id))
    assert code == 0
    events = json.loads(out)["events"]
    assert [e["event_type"] for e in events] == [
        "ApplyJob.Claimed", "ApplyJob.TargetCommitted", "ApplyJob.Finalized"]
    code, out, _ = run(capsys, "audit", "history", "apply_job", str(job_id),
                       "--at", events[1]["occurred_at"])
    assert json.loads(out)["version"] == 2
    code, out, _ = run(capsys, "audit", "history", "apply_job", str(job_id), "--diff", "2", "3")
    changes = json.loads(out)["changes"]
    assert {c["change"] for c in changes} >= {"added", "changed"}
    assert all("record_key" not in json.dumps(c) for c in changes)
    assert node_id not in "".join(c["path"] for c in changes)


@pytest.mark.parametrize(("argv", "code", "message"), [
    (("projections", "rebuild", "nope", "--reason", "x"), 2, "no view 'nope'"),
    (("projections", "rebuild", "receipts", "--reason", " "), 2, "needs a reason"),
    (("projections", "status", "nope"), 2, "no view 'nope'"),
    (("audit", "history", "ship", str(uuid.uuid4())), 2, "no aggregate kind 'ship'"),
    (("audit", "history", "node", str(uuid.uuid4())), 1, "no node"),
    (("audit", "history", "node", str(uuid.uuid4()), "--at", "yesterday"), 2,
     "not an ISO 8601 time"),
])
def test_errors_name_the_problem(configured, capsys, argv, code, message):
    got, _, err = run(capsys, *argv)
    assert got == code and message in err


def test_rebuild_needs_a_reason(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["projections", "rebuild", "receipts"])
    assert exited.value.code == 2
    assert "--reason" in capsys.readouterr().err


def test_the_progress_bar_is_redrawn_in_place_on_a_terminal():
    stream = io.StringIO()
    printer = ProgressPrinter(stream, tty=True)
    for position in (0, 50, 100):
        printer(RebuildProgress("receipts", "COPYING", position, 100, position, 1.0))
    printer.finish()
    text = stream.getvalue()
    assert text.count("\r[") == 3 and text.endswith("\n")
    assert "[" + "#" * 15 + "." * 15 + "]" in text and " 50.0%" in text


def test_plain_progress_lines_are_spaced_out_but_every_phase_shows():
    stream = io.StringIO()
    clock = iter([0.0, 1.0, 2.0, 6.0, 7.0])
    printer = ProgressPrinter(stream, interval=5.0, monotonic=lambda: next(clock), tty=False)
    for phase, position in [("COPYING", 0), ("COPYING", 10), ("COPYING", 20),
                            ("COPYING", 90), ("SWITCHING", 100)]:
        printer(RebuildProgress("audit", phase, position, 100, position, 1.0))
    lines = stream.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["copying", "copying", "switching"]


def test_shore_work_keeps_every_view_current(configured, pg_database, shore_mariadb,
                                             monkeypatch, capsys):
    pool, _node_id = configured
    for name, value in {"HOST": shore_mariadb.host, "PORT": str(shore_mariadb.port),
                        "USER": shore_mariadb.user, "PASSWORD": shore_mariadb.password or "",
                        "NODE_ID": "shore"}.items():
        monkeypatch.setenv(f"TIDESYNC_TARGET__{name}", value)
    fresh = new_node_id()
    with shore_apps(pg_database) as apps:
        save_synthetic_jobs(apps, fresh, jobs=1, per_job=5)
    assert main(["shore", "work", "--once"]) == 0
    tracked = {row[0] for row in pg_rows(pool, "SELECT name FROM projection_tracking")}
    assert {"receipts", "record_head", "backlog", "audit.apply_jobs"} <= tracked
    assert pg_rows(pool, "SELECT count(*) FROM record_head WHERE origin_node_id = %s",
                   (fresh,)) == [(5,)]
    _code, out, _ = run(capsys, "projections", "status", "--json")
    statuses = json.loads(out)
    assert {view["view"] for view in statuses} == VIEWS
    assert all(feed["behind"] == 0 for view in statuses for feed in view["feeds"])
