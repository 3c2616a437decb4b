"""Ships see the shore's verdicts, on real services: events the shore rejects show in `ship
status` by reason and keep the ship from looking healthy; once an operator fixes the cause on
the shore and replays them, the running ship pulls the new receipts and counts them applied."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.shore_support import use_event_store
from tests.integration.test_ship_client import inbox, ship_config, shore_for_ship
from tidesync.bootstrap.ship import build_client
from tidesync.entrypoints.cli import main
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.ship.client import ExitCode

pytestmark = pytest.mark.services

TOO_LONG = "n" * 30  # the shore's `name` is VARCHAR(20) until an operator widens it


def shore_results(pg_database: Any, node_id: str) -> set[tuple[str, str | None]]:
    return {(row[3], row[4]) for row in inbox(pg_database, node_id)}


def wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_rejections_show_on_the_ship_and_a_shore_replay_clears_them(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path,
        monkeypatch, capsys):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    records = [capture.insert(k, TOO_LONG if k % 3 == 0 else f"p{k}", k, "1.00")
               for k in range(1, 31)]
    produce(kafka_broker.bootstrap_servers, records)
    with shore_for_ship(pg_database, shore_mariadb, database) as shore:
        client = build_client(ship_config(shore, kafka_broker, tmp_path / "ship.sqlite"))
        try:
            # Every event is terminal on the ship, and ten of them are rejected on the shore.
            assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
            assert client.state.state_counts() == {"TERMINAL": 30}
            report = status_report(client.state)
            assert report["shore_verdicts"]["rejected"] == 10
            assert report["shore_verdicts"]["rejected_by_reason"] == {"DATA_TOO_LONG": 10}
            assert report["overall"] == "DEGRADED"
            (verdict,) = [h for h in report["health"] if h["subsystem"] == "SHORE_APPLY"]
            assert verdict["detail"] == ("10 events rejected on the shore: top reasons"
                                         " DATA_TOO_LONG (10)")

            # The shore's operator widens the column and replays the class.
            conn = shore_mariadb.connect(database=database, autocommit=True)
            with conn.cursor() as cursor:
                cursor.execute("ALTER TABLE items MODIFY name VARCHAR(80) NOT NULL")
            conn.close()
            use_event_store(monkeypatch, pg_database)
            assert main(["jobs", "replay", "--class", "DATA", "--node", shore.node_id,
                         "--reason", "name widened"]) == 0
            assert "10 event(s) sent back to apply" in capsys.readouterr().out
            wait_for(lambda: shore_results(pg_database, shore.node_id)
                     == {("TERMINAL", "APPLIED")})

            # The same running client, with nothing awaiting a receipt, takes the new verdicts.
            wait_for(lambda: client.step() or client.state.receipts.shore_rejections() == 0)
            report = status_report(client.state)
        finally:
            client.close()
    assert report["shore_verdicts"]["rejected"] == 0
    assert report["shore_verdicts"]["by_result"] == {"APPLIED": 30}
    assert report["overall"] == "HEALTHY"
    assert not [h for h in report["health"] if h["subsystem"] == "SHORE_APPLY"]
