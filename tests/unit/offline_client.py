"""A ship client built as `ship run` builds it, against a null shore and no broker: for tests
of its decisions that read neither the queue nor its topics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidesync.bootstrap.ship import build_client
from tidesync.config import ShipConfig
from tidesync.ship.client import ShipClient
from tidesync.ship.null_shore import NullShoreLink


def offline_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: Any
                   ) -> ShipClient:
    monkeypatch.setattr("tidesync.bootstrap.ship.warn_of_shore_topics", lambda ship, queue: None)
    return build_client(ShipConfig(kafka_bootstrap_servers="127.0.0.1:9",
                                   kafka_consumer_options={"log_level": "0"},
                                   state_path=str(tmp_path / "ship.sqlite"), **settings),
                        NullShoreLink())
