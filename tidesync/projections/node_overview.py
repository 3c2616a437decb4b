"""The node overview view (§17.1, §18.2, §21.2): each registered node's status from its Node
stream, plus what its latest heartbeat reported (version, health, backlog, throughput).

The heartbeat columns are copied as the node reported them; the shore does not verify them.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application

from tidesync.projections.engine import Cursor, Events
from tidesync.projections.states import StreamStates, plain

HEALTH_ORDER = ("HEALTHY", "DEGRADED", "BLOCKED", "OFFLINE")
"""Subsystem states from least to most severe (§18.2): a node shows its most severe one."""


class NodeOverviewProjection:
    name = "node_overview"
    topics: tuple[str, ...] = ()

    def __init__(self, app: Application[Any], table: str = "node_overview") -> None:
        self.table = table
        self._states = StreamStates(app.repository)

    def process(self, cursor: Cursor, events: Events) -> None:
        nodes: dict[object, Any] = {}
        for _, event in events:
            nodes[event.originator_id] = self._states.advance(event)
        cursor.executemany(
            f"INSERT INTO {self.table} (node_id, status, registered_at, revoked_at, version)"  # noqa: S608
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (node_id) DO UPDATE"
            " SET status = EXCLUDED.status, registered_at = EXCLUDED.registered_at,"
            " revoked_at = EXCLUDED.revoked_at, version = EXCLUDED.version"
            f" WHERE {self.table}.version < EXCLUDED.version",
            [(node.node_id, plain(node.status), node.registered_at, node.revoked_at,
              node.version) for node in nodes.values()],
        )


class NodeHeartbeatRefresher:
    """Copies each node's latest heartbeat into the overview (only rows whose heartbeat
    changed): versions, health and its most severe state, uplink backlog, throughput."""

    def __init__(self, table: str = "node_overview") -> None:
        self.table = table

    def refresh(self, cursor: Cursor) -> None:
        cursor.execute(
            f"UPDATE {self.table} AS o SET client_version = h.client_version,"  # noqa: S608
            " last_heartbeat_at = h.received_at, heartbeat_sent_at = h.sent_at,"
            " protocol_version = h.protocol_version,"
            " active_config_version = h.active_config_version, health = h.health,"
            " health_state = (SELECT e.value->>'state' FROM jsonb_array_elements(h.health) e"
            "   ORDER BY array_position(%(order)s::text[], e.value->>'state') DESC NULLS LAST"
            "   LIMIT 1),"
            " backlog_events = b.events, backlog_bytes = b.bytes,"
            " throughput = t.throughput"
            " FROM node_heartbeat h"
            " LEFT JOIN LATERAL ("
            "   SELECT sum(greatest(m.end_offset - coalesce(m.terminal_offset + 1, 0), 0))"
            "     AS events, sum(m.backlog_bytes) AS bytes"
            "   FROM metric_sample m WHERE m.node_id = h.node_id AND m.sampled_at = h.sent_at"
            "   AND m.kind = 'BACKLOG' AND m.direction = 'UPLINK') b ON true"
            " LEFT JOIN LATERAL ("
            "   SELECT jsonb_object_agg(d.direction, to_jsonb(s)) AS throughput"
            "   FROM (VALUES ('UPLINK'), ('DOWNLINK')) AS d(direction)"
            "   CROSS JOIN LATERAL ("
            "     SELECT m.sampled_at AS window_start, m.window_seconds,"
            "       m.payload_bytes_confirmed, m.physical_bytes, m.active_transfer_seconds,"
            "       CASE WHEN m.active_transfer_seconds > 0"
            "         THEN m.payload_bytes_confirmed / m.active_transfer_seconds END"
            "         AS effective_bytes_per_second"
            "     FROM metric_sample m WHERE m.node_id = h.node_id AND m.kind = 'THROUGHPUT'"
            "     AND m.direction = d.direction ORDER BY m.sampled_at DESC LIMIT 1) s) t ON true"
            " WHERE o.node_id = h.node_id"
            " AND (o.last_heartbeat_at IS DISTINCT FROM h.received_at"
            "   OR o.heartbeat_sent_at IS DISTINCT FROM h.sent_at)",
            {"order": list(HEALTH_ORDER)},
        )
