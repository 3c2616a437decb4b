"""While uploads go on, the ship keeps asking for the next receipts page as long as the shore says
more wait, instead of one page per receipts interval: events the shore has applied must not
pile up as open until the partition pauses. A shore without a network answers (it pages results
as the real one does); the records are real Debezium envelopes in a real broker."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tests.integration.ship_support import ItemsCapture, produce
from tidesync.bootstrap.ship import build_client
from tidesync.config import ShipConfig
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.null_shore import NullShoreLink
from tidesync.wire import sync_pb2 as pb

EVENTS = 4_000
PAGE = 100


class SlowShore(NullShoreLink):
    """Each upload takes a while (a slow link); each receipts page is noted with how many
    events had been uploaded when it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[tuple[int, int]] = []  # (events uploaded so far, results in the page)
        self.calls = threading.Lock()

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        time.sleep(0.5)
        return super().upload(batch)

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        uploaded = self.uploaded
        page = super().receipts(cursor, limit)
        results = sum(sum(group.ranges[1::2]) for group in page.applied)
        with self.calls:
            self.pages.append((uploaded, results))
        return page


def test_receipt_pages_keep_coming_while_uploads_go_on(kafka_broker: Any,
                                                       tmp_path: Path) -> None:
    capture = ItemsCapture(f"pace_{uuid.uuid4().hex[:8]}")
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(key, f"item {key}", key % 7, "1.50") for key in range(EVENTS)])
    config = ShipConfig(node_id="ship-pace", kafka_bootstrap_servers=kafka_broker.bootstrap_servers,
                        state_path=str(tmp_path / "ship.sqlite"),
                        topic_pattern=rf"^{capture.topic.replace('.', chr(92) + '.')}$",
                        batch_max_events=50, receipts_page_size=PAGE,
                        receipts_interval_seconds=5, heartbeat_interval_seconds=3600)
    shore = SlowShore()
    client = build_client(config, shore)
    try:
        client.run(until_idle=True, timeout=120)
        assert client.state.state_counts() == {"TERMINAL": EVENTS}
    finally:
        client.close()
    assert shore.uploaded == EVENTS
    # 80 uploads of 0.5 s, three side by side: 13 s or more of uploads. One page per receipts
    # interval (5 s) would be three pages before the last upload, 300 events at most; full
    # pages are followed by the next a second later.
    while_uploading = [results for uploaded, results in shore.pages
                       if uploaded < EVENTS and results]
    assert len(while_uploading) >= 6, shore.pages
    assert max(results for _, results in shore.pages) <= PAGE
