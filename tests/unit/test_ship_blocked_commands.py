"""`tidesync ship blocked list|expire` on a real state file: what an operator sees, the
disposition recorded, and the state store's lock keeping it away from a running client."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tests.unit.test_ship_state import TOPIC, block_record, event_record
from tidesync.entrypoints.cli import main
from tidesync.ship.run_lock import StateInUse, exclusive
from tidesync.ship.state import SQLiteShipState

NODE = "ship-7"
GROUP = "tidesync-ship-ship-7"


@pytest.fixture
def state_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ship.sqlite"
    monkeypatch.setenv("TIDESYNC_SHIP__STATE_PATH", str(path))
    monkeypatch.setenv("TIDESYNC_SHIP__NODE_ID", NODE)
    state = SQLiteShipState(path, NODE, GROUP)
    state.record([block_record(0, key=2), event_record(1, 2), event_record(2, 3)], 0)
    state.close()
    return path


def expire(*extra: str) -> int:
    return main(["ship", "blocked", "expire", "--topic", TOPIC, "--partition", "0",
                 *extra, "--actor", "user:ana", "--reason", "capture fixed upstream"])


def hold_lock(path: str, started: multiprocessing.synchronize.Event,
              release: multiprocessing.synchronize.Event) -> None:
    with exclusive(path, "ship run"):
        started.set()
        release.wait(30)


def test_list_shows_positions_and_reasons_and_expire_records_who_and_why(
        state_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ship", "blocked", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["blocked_reasons"] == {"MALFORMED_JSON": 1, "BEHIND_BLOCKED_RECORD": 1}
    assert [(b["offset"], b["reason"]) for b in listed["blocked"]] == [
        (0, "MALFORMED_JSON"), (1, "BEHIND_BLOCKED_RECORD")]
    assert listed["operator_actions"] == []

    assert expire("--offset", "1") == 1  # it only waits: the one it waits behind is named
    assert "WAITS_BEHIND" in capsys.readouterr().err
    assert main(["ship", "blocked", "confirm-origin", "--topic", TOPIC, "--partition", "0",
                 "--offset", "0", "--actor", "user:ana", "--reason", "r"]) == 1
    assert "NOT_ORIGIN_UNPROVEN" in capsys.readouterr().err  # it is unreadable, not unproven
    assert expire("--offset", "0") == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["expired"]["offset"], done["released_behind_it"]) == (0, 1)

    assert main(["ship", "blocked", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["blocked"] == []
    (action,) = listed["operator_actions"]
    assert (action["actor"], action["reason"], action["offset"]) == (
        "user:ana", "capture fixed upstream", 0)


def test_expire_refuses_while_another_process_holds_the_state(
        state_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    context = multiprocessing.get_context("spawn")
    started, release = context.Event(), context.Event()
    holder = context.Process(target=hold_lock, args=(str(state_path), started, release))
    holder.start()
    try:
        assert started.wait(30)
        assert expire("--offset", "0") == 1
        error = capsys.readouterr().err
        assert "in use (ship run, pid" in error and "stop `ship run` first" in error
        with pytest.raises(StateInUse), exclusive(state_path, "ship run"):
            pass  # a second client would refuse the same way
    finally:
        release.set()
        holder.join(30)
    assert expire("--offset", "0") == 0  # the lock went with the process


def test_list_reads_a_state_file_older_than_the_operator_actions(
        state_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = SQLiteShipState(state_path, NODE, GROUP)
    state.conn.execute("DROP TABLE operator_action")
    state.conn.execute("DELETE FROM schema_version WHERE version = 3")
    state.close()
    assert main(["ship", "blocked", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed["blocked"]) == 2 and listed["operator_actions"] == []
