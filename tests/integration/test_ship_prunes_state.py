"""A running ship client prunes its applied events from the state file as its queue commits
move: after a run of 3,000 events with `state_retain_offsets = 500`, the file holds about the
newest 500 rows, and `ship status` still counts every event terminal. Real Debezium envelopes
in a real broker; the shore answers as a real one does, without a network."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.integration.ship_support import ItemsCapture, produce
from tidesync.bootstrap.ship import build_client
from tidesync.config import ShipConfig
from tidesync.entrypoints.ship_client_cli import status_report
from tidesync.ship.client import ExitCode
from tidesync.ship.null_shore import NullShoreLink

EVENTS = 3_000
RETAIN = 500


def test_applied_events_leave_the_state_file_and_still_count(kafka_broker: Any,
                                                             tmp_path: Path) -> None:
    capture = ItemsCapture(f"prune_{uuid.uuid4().hex[:8]}")
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(key, f"item {key}", key % 7, "1.50") for key in range(EVENTS)])
    config = ShipConfig(node_id="ship-prune",
                        kafka_bootstrap_servers=kafka_broker.bootstrap_servers,
                        state_path=str(tmp_path / "ship.sqlite"),
                        topic_pattern=rf"^{capture.topic.replace('.', chr(92) + '.')}$",
                        state_retain_offsets=RETAIN, heartbeat_interval_seconds=3600)
    client = build_client(config, NullShoreLink())
    try:
        assert client.run(until_idle=True, timeout=120) is ExitCode.IDLE
        (watermark,) = client.state.watermarks()
        rows = client.state.conn.execute(
            "SELECT min(kafka_offset), count(*) FROM event_state").fetchone()
        report = status_report(client.state)
    finally:
        client.close()
    assert watermark.committed_offset == EVENTS
    assert rows == (EVENTS - RETAIN, RETAIN)  # the newest 500 rows
    assert report["events_by_state"] == {"TERMINAL": EVENTS}
    assert report["shore_verdicts"]["by_result"] == {"APPLIED": EVENTS}
