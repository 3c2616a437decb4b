"""The capture's topic prefix, for the processes that only need its name: the ship client
reads and answers for these topics without loading the capture itself."""

from __future__ import annotations

from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.config import Config


def topic_prefix(config: Config) -> str:
    """`<capture.topic_prefix>.<logical name>`: Debezium's `topic.prefix` (its server name)."""
    logical_name = config.capture.logical_name or config.ship.node_id
    if not logical_name:
        raise CaptureError(CaptureErrorReason.CONFIGURATION,
                           "capture.logical_name (or ship.node_id) must be set")
    return f"{config.capture.topic_prefix}.{logical_name}"
