"""A full send window pauses only the partitions holding their share of it, so a partition
that holds little (a CRITICAL rule's topic behind other topics' backlogs) keeps reading and its
events can head the next batches; past an eighth more, every partition pauses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.offline_client import offline_client
from tests.unit.test_ship_batcher import event
from tidesync.cdc.kafka import PartitionKey
from tidesync.ship.client import ShipClient
from tidesync.ship.consumer import PartitionProgress

LOGS, ITEMS, ALARMS = (PartitionKey(f"sync.cdc.fleet.{table}", 0)
                       for table in ("logs", "items", "alarms"))


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ShipClient]:
    built = offline_client(tmp_path, monkeypatch, node_id="ship-7", send_window_events=100,
                           send_window_total_events=120)
    built.consumer.partitions.update({key: PartitionProgress() for key in (LOGS, ITEMS, ALARMS)})
    yield built
    built.close()


def fill(client: ShipClient, table: str, offsets: range) -> None:
    client.window.add([event(offset, table=table) for offset in offsets], {})


def test_a_partition_below_its_share_reads_on_while_the_window_is_full(
        client: ShipClient) -> None:
    fill(client, "logs", range(70))
    fill(client, "items", range(50))
    assert len(client.window) == client.settings.window_total
    # Full: a share is 120 / 3 = 40 events; logs and items hold more, alarms nothing.
    assert client._full_partitions() == {LOGS, ITEMS}
    fill(client, "alarms", range(10))
    assert client._full_partitions() == {LOGS, ITEMS}
    fill(client, "alarms", range(10, 15))  # 135: an eighth over the window, no more
    assert client._full_partitions() == {LOGS, ITEMS, ALARMS}


def test_below_the_total_only_the_per_partition_limit_pauses(client: ShipClient) -> None:
    fill(client, "logs", range(100))
    assert client._full_partitions() == {LOGS}
