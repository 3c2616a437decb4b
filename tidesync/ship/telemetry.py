"""Ship telemetry (§18.2, §15): subsystem health, backlog per partition, throughput samples,
assembled into the Heartbeat sent to POST /sync/v1/heartbeat.
"""

from __future__ import annotations

import datetime as dt
import enum
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidesync.cdc.kafka import PartitionKey
from tidesync.ship.state.reporting import Health, PartitionBacklog
from tidesync.ship.state.watermarks import Watermark
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

CLIENT_VERSION = "tidesync-ship/0.1.0"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
DISK_DEGRADED_FREE = 0.10
DISK_BLOCKED_FREE = 0.05

SyncStates = Callable[[], Iterable[pb.SyncState]]
"""The snapshot and catch-up states a heartbeat carries (`tidesync.bootstrap.sync_states`)."""


class Subsystem(enum.StrEnum):
    CAPTURE = "CAPTURE"
    QUEUE = "QUEUE"
    TRANSPORT = "TRANSPORT"
    DOWNLINK_APPLY = "DOWNLINK_APPLY"
    DISK = "DISK"


class HealthState(enum.StrEnum):
    """In order of severity: the overall state is the most severe one (§18.2)."""

    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    BLOCKED = "BLOCKED"
    OFFLINE = "OFFLINE"


_SEVERITY = {HealthState.HEALTHY: 0, HealthState.DEGRADED: 1, HealthState.OFFLINE: 2,
             HealthState.BLOCKED: 3}


class HealthReason(enum.StrEnum):
    NONE = ""
    DISK_LOW = "DISK_LOW"
    DISK_FULL = "DISK_FULL"
    STATE_STORE_FAILED = "STATE_STORE_FAILED"
    EVENTS_BLOCKED = "EVENTS_BLOCKED"
    BACKLOG_HELD = "BACKLOG_HELD"
    RETRYING = "RETRYING"
    ORIGIN_UNPROVEN = "ORIGIN_UNPROVEN"
    APPLY_RETRYING = "APPLY_RETRYING"
    APPLY_FAILED = "APPLY_FAILED"


@dataclass
class HealthBoard:
    """The current health of each subsystem; `since` changes only when state or reason does."""

    entries: dict[Subsystem, Health] = field(default_factory=dict)

    def set(self, subsystem: Subsystem, state: HealthState, now: dt.datetime,
            reason: str = "", detail: str = "") -> bool:
        """Record a health; True when it differs from the previous one."""
        previous = self.entries.get(subsystem)
        if previous is not None and (previous.state, previous.reason_code) == (state, reason):
            if previous.detail != detail:
                self.entries[subsystem] = Health(subsystem, state, reason, detail,
                                                 previous.since)
            return False
        self.entries[subsystem] = Health(subsystem, state, reason, detail, now)
        return True

    def get(self, subsystem: Subsystem) -> Health | None:
        return self.entries.get(subsystem)

    def overall(self) -> HealthState:
        states = [HealthState(h.state) for h in self.entries.values()]
        return max(states, key=_SEVERITY.__getitem__, default=HealthState.HEALTHY)


def disk_health(path: Path) -> tuple[HealthState, str, str]:
    """The state store's file system: DEGRADED under 10% free, BLOCKED under 5%."""
    try:
        usage = shutil.disk_usage(path if path.exists() else path.parent)
    except OSError as error:
        return HealthState.BLOCKED, HealthReason.STATE_STORE_FAILED, type(error).__name__
    free = usage.free / usage.total if usage.total else 0.0
    detail = f"{free:.0%} free"
    if free < DISK_BLOCKED_FREE:
        return HealthState.BLOCKED, HealthReason.DISK_FULL, detail
    if free < DISK_DEGRADED_FREE:
        return HealthState.DEGRADED, HealthReason.DISK_LOW, detail
    return HealthState.HEALTHY, HealthReason.NONE, detail


@dataclass
class ThroughputMeter:
    """Confirmed payload bytes, physical bytes and active seconds since the last sample."""

    window_start: dt.datetime
    confirmed_bytes: int = 0
    physical_bytes: int = 0
    active_seconds: float = 0.0

    def sample(self, now: dt.datetime, physical_total: int, active_total: float
               ) -> pb.ThroughputSample:
        """The sample of the window ending now; a new window starts. Totals are the link's
        running counters (the meter keeps their last values)."""
        seconds = max(1, int((now - self.window_start).total_seconds()))
        sample = pb.ThroughputSample(
            direction=pb.UPLINK, window_start_micros=_micros(self.window_start),
            window_seconds=seconds, payload_bytes_confirmed=self.confirmed_bytes,
            physical_bytes=max(0, physical_total - self.physical_bytes),
            active_transfer_seconds=max(0.0, active_total - self.active_seconds))
        self.window_start, self.confirmed_bytes = now, 0
        self.physical_bytes, self.active_seconds = physical_total, active_total
        return sample


def partition_backlog(watermark: Watermark, open_events: PartitionBacklog,
                      end_offset: int | None, average_bytes: float) -> pb.PartitionBacklog:
    """end_offset − terminal_offset as §7.7 counts it, with bytes: recorded sizes of open
    events plus an estimate for records not read yet."""
    end = max(end_offset or 0, watermark.read_offset + 1)
    unread = max(0, end - watermark.read_offset - 1)
    backlog = pb.PartitionBacklog(
        direction=pb.UPLINK, topic=watermark.topic, partition=watermark.partition,
        end_offset=end, bytes=open_events.bytes + int(unread * average_bytes),
        rule_id=open_events.rule_id or "")
    if watermark.received_offset >= 0:
        backlog.received_offset = watermark.received_offset
    if watermark.terminal_offset >= 0:
        backlog.terminal_offset = watermark.terminal_offset
    if open_events.oldest_captured_micros is not None:
        backlog.oldest_captured_at_micros = open_events.oldest_captured_micros
    return backlog


def build_heartbeat(node_id: str, now: dt.datetime, health: Iterable[Health],
                    backlog: Iterable[pb.PartitionBacklog],
                    throughput: Iterable[pb.ThroughputSample],
                    config_version: str = "",
                    rules: Iterable[pb.RuleActivation] = (),
                    sync_states: Iterable[pb.SyncState] = (), timezone: str = "") -> pb.Heartbeat:
    """`config_version` is the config the ship applied; `rules` one activation per rule the
    shore offers it (versions, validation and problems: names only, never values);
    `sync_states` the snapshot and catch-up state per rule and table; `timezone` the zone its
    rules' schedules are read in."""
    message = pb.Heartbeat(protocol_version=codec.PROTOCOL_VERSION, node_id=node_id,
                           client_version=CLIENT_VERSION, sent_at_micros=_micros(now),
                           active_config_version=config_version, timezone=timezone[:64])
    message.rules.extend(rules)
    message.sync_states.extend(sync_states)
    for item in health:
        message.health.add(subsystem=pb.Subsystem.Value(item.subsystem),
                           state=pb.HealthState.Value(item.state), reason_code=item.reason_code,
                           detail=item.detail[:500], since_micros=_micros(item.since))
    message.backlog.extend(backlog)
    message.throughput.extend(throughput)
    return message


def backlog_total(backlogs: Mapping[PartitionKey, pb.PartitionBacklog]) -> int:
    return sum(b.end_offset - (b.terminal_offset + 1 if b.HasField("terminal_offset") else 0)
               for b in backlogs.values())


def _micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)
