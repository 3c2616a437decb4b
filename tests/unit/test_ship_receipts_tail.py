"""When the uploads' backlog ends while the shore said more receipts wait, the ship asks for the
next page at once and its queue poll does not wait meanwhile: the events the shore applied
become terminal as soon as the pages can come, not a receipts interval later. (While uploads
go on, those pages come at most once per `receipts_after_upload`, beside the uploads.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.offline_client import offline_client
from tidesync.ship.client import ShipClient
from tidesync.wire import sync_pb2 as pb


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ShipClient]:
    built = offline_client(tmp_path, monkeypatch, node_id="ship-tail",
                           receipts_interval_seconds=5, heartbeat_interval_seconds=3600)
    yield built
    built.close()


def test_a_page_that_said_more_is_followed_at_once_when_the_uploads_end(
        client: ShipClient, monkeypatch: pytest.MonkeyPatch) -> None:
    backlog = {"now": True}
    monkeypatch.setattr(client.uploads, "backlog", lambda now: backlog["now"])
    asked: list[str] = []
    link_receipts = client.link.receipts
    monkeypatch.setattr(client.link, "receipts",
                        lambda cursor, limit: asked.append(cursor) or link_receipts(cursor, limit))
    now = client.monotonic()
    client.receipts.done(now)
    client._receipts_page(pb.ReceiptsPage(next_cursor="5000", has_more=True))
    # Uploads still go: the next page waits for its turn beside them.
    assert not client._receipts_due(now)
    assert client._poll_wait(now) > 0
    backlog["now"] = False
    assert client._receipts_due(now)
    assert client._poll_wait(now) == 0.0
    client._pull_receipts()
    assert asked == ["5000"]


def test_after_the_last_page_with_nothing_awaited_no_page_is_asked(client: ShipClient) -> None:
    now = client.monotonic()
    client.receipts.done(now)
    client._receipts_page(pb.ReceiptsPage(next_cursor="5000", has_more=False))
    assert not client._receipts_due(now)
    assert not client._receipts_due(now + 10 * client.settings.receipts_interval)
    assert client._poll_wait(now) == client.settings.idle_poll_seconds
