"""POST /sync/v1/heartbeat: a node's versions, health, backlog and throughput, stored as the
latest heartbeat per node plus metric samples (the input of backlog and ETA views, §15), how it
stands on each rule it was offered (`rule_reports`), and its snapshot and catch-up state per
rule and table (`sync_states`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.ingress.database import Connection, transaction
from tidesync.ingress.rule_reports import checked_reports, store_reports
from tidesync.ingress.sync_states import checked_sync_states, store_sync_states
from tidesync.wire import sync_pb2 as pb

_INT64 = 1 << 63
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UPSERT_LATEST = (
    "INSERT INTO node_heartbeat (node_id, received_at, sent_at, protocol_version,"
    " client_version, active_config_version, health, timezone)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (node_id) DO UPDATE SET received_at = EXCLUDED.received_at,"
    " sent_at = EXCLUDED.sent_at, protocol_version = EXCLUDED.protocol_version,"
    " client_version = EXCLUDED.client_version,"
    " active_config_version = EXCLUDED.active_config_version, health = EXCLUDED.health,"
    " timezone = EXCLUDED.timezone"
    " WHERE node_heartbeat.sent_at <= EXCLUDED.sent_at RETURNING node_id"
)
_INSERT_SAMPLE = (
    "INSERT INTO metric_sample (node_id, sampled_at, dimension, kind, direction, received_at,"
    " topic, source_partition, rule_id, end_offset, received_offset, terminal_offset,"
    " backlog_bytes, estimated_compressed_bytes, oldest_captured_at, oldest_business_at,"
    " window_seconds, payload_bytes_confirmed, physical_bytes, active_transfer_seconds)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (node_id, sampled_at, dimension) DO NOTHING"
)


class BadHeartbeat(TidesyncError, ValueError):
    """A heartbeat whose numbers or times cannot be stored."""

    code = ErrorCode.INVALID_INPUT


_PURGE_SAMPLES = (
    "DELETE FROM metric_sample WHERE ctid IN (SELECT ctid FROM metric_sample"
    " WHERE node_id = %(node)s AND sampled_at < %(cutoff)s AND received_at < %(cutoff)s"
    " LIMIT %(limit)s)")
PURGE_EVERY_SECONDS = 600.0
PURGE_ROWS = 5000


class PostgresHeartbeats:
    """The latest heartbeat per node and its samples; a node's samples older than `retention`
    (by the shore's receive time and the ship's sample time both) are deleted as it sends
    heartbeats, at most `PURGE_ROWS` every `PURGE_EVERY_SECONDS`, so the table stops growing
    and a first purge after a long time never holds a heartbeat up for long."""

    def __init__(self, pool: ConnectionPool[Connection],
                 retention: dt.timedelta = dt.timedelta(days=14),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.pool, self.retention, self.monotonic = pool, retention, monotonic
        self._purged: dict[str, float] = {}

    def record(self, node_id: str, heartbeat: pb.Heartbeat, now: dt.datetime) -> None:
        """Store the heartbeat as the node's latest (unless a newer one is stored) with its
        rule reports and sync states, and its samples (each once). Raises BadHeartbeat for
        out-of-range values and BadRuleReport for rule reports or sync states beyond the
        limits."""
        with transaction(self.pool) as conn:
            self._record(conn, node_id, heartbeat, now)

    def _record(self, conn: Connection, node_id: str, heartbeat: pb.Heartbeat,
                now: dt.datetime) -> None:
        sent_at = _moment(heartbeat.sent_at_micros)
        health = Jsonb([_health(item) for item in heartbeat.health])
        samples = [_backlog_row(node_id, sent_at, item, now) for item in heartbeat.backlog]
        samples += [_throughput_row(node_id, item, now) for item in heartbeat.throughput]
        reports = checked_reports(heartbeat.rules)
        sync_states = checked_sync_states(heartbeat.sync_states)
        newest = conn.execute(_UPSERT_LATEST, (
            node_id, now, sent_at, heartbeat.protocol_version, heartbeat.client_version,
            heartbeat.active_config_version, health, zone_name(heartbeat.timezone),
        )).fetchone() is not None
        # A heartbeat that arrives after a newer one must not bring back what it reported.
        if newest:
            store_reports(conn, node_id, reports, sent_at, now)
            store_sync_states(conn, node_id, sync_states, sent_at, now)
        if samples:
            with conn.cursor() as cursor:
                cursor.executemany(_INSERT_SAMPLE, samples)
        self._purge(conn, node_id, now)

    def _purge(self, conn: Connection, node_id: str, now: dt.datetime) -> None:
        moment = self.monotonic()
        last = self._purged.get(node_id)
        if last is not None and moment - last < PURGE_EVERY_SECONDS:
            return
        if len(self._purged) >= 100_000:
            self._purged.clear()
        self._purged[node_id] = moment
        conn.execute(_PURGE_SAMPLES, {"node": node_id, "cutoff": now - self.retention,
                                      "limit": PURGE_ROWS})


def zone_name(text: str) -> str | None:
    """The node's time zone as stored: an IANA-shaped name, else None (never refused: a
    heartbeat's health matters more than its zone)."""
    return text if len(text) <= 64 and _ZONE.fullmatch(text) else None


def _health(item: pb.SubsystemHealth) -> dict[str, Any]:
    return {
        "subsystem": pb.Subsystem.Name(item.subsystem) if item.subsystem in
        pb.Subsystem.values() else str(item.subsystem),
        "state": pb.HealthState.Name(item.state) if item.state in
        pb.HealthState.values() else str(item.state),
        "reason_code": item.reason_code[:128], "detail": item.detail[:512],
        "since": _moment(item.since_micros).isoformat() if item.since_micros else None,
    }


def _direction(direction: pb.Direction) -> str:
    if direction not in (pb.UPLINK, pb.DOWNLINK):
        raise BadHeartbeat("direction must be UPLINK or DOWNLINK")
    return pb.Direction.Name(direction)


def _backlog_row(node_id: str, sent_at: dt.datetime, item: pb.PartitionBacklog,
                 now: dt.datetime) -> tuple[object, ...]:
    direction = _direction(item.direction)
    dimension = json.dumps(["BACKLOG", direction, item.topic, item.partition])
    optional = (_optional(item, "received_offset"), _optional(item, "terminal_offset"))
    return (
        node_id, sent_at, dimension, "BACKLOG", direction, now, item.topic,
        _int32(item.partition), item.rule_id or None, _int64(item.end_offset), *optional,
        _int64(item.bytes), _int64(item.estimated_compressed_bytes),
        _optional_moment(item, "oldest_captured_at_micros"),
        _optional_moment(item, "oldest_business_at_micros"), None, None, None, None,
    )


def _throughput_row(node_id: str, item: pb.ThroughputSample,
                    now: dt.datetime) -> tuple[object, ...]:
    direction = _direction(item.direction)
    dimension = json.dumps(["THROUGHPUT", direction, item.window_seconds])
    return (
        node_id, _moment(item.window_start_micros), dimension, "THROUGHPUT", direction, now,
        None, None, None, None, None, None, None, None, None, None,
        _int32(item.window_seconds), _int64(item.payload_bytes_confirmed),
        _int64(item.physical_bytes), item.active_transfer_seconds,
    )


def _optional(item: Any, name: str) -> int | None:
    return _int64(getattr(item, name)) if item.HasField(name) else None


def _optional_moment(item: Any, name: str) -> dt.datetime | None:
    return _moment(getattr(item, name)) if item.HasField(name) else None


def _int64(value: int) -> int:
    if value >= _INT64:
        raise BadHeartbeat("a counter exceeds 2^63")
    return value


def _int32(value: int) -> int:
    if value >= 1 << 31:
        raise BadHeartbeat("a partition or window exceeds 2^31")
    return value


def _moment(micros: int) -> dt.datetime:
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError as error:
        raise BadHeartbeat("a time is out of range") from error
