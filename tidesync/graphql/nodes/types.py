"""Node types: the overview of a ship node, and the results of node commands."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated

import strawberry

from tidesync.apps.nodes import NodeNotFound
from tidesync.graphql.backlogs.types import Backlog
from tidesync.graphql.common import JSON, Long, WritePosition, field, long_or_none
from tidesync.graphql.console import Console
from tidesync.graphql.context import Info
from tidesync.graphql.nodes.eta import NodeEtaView, fetch_eta
from tidesync.graphql.nodes.loaders import NodeRow
from tidesync.graphql.nodes.permissions import CanSeeNodeSecret
from tidesync.graphql.permissions import allow
from tidesync.graphql.threads import blocking


@strawberry.type(description="A ship node: registration from its stream; version, health, "
                             "backlog and throughput as its latest heartbeat reported them.")
class Node:
    node_id: str
    status: str
    registered_at: dt.datetime | None
    revoked_at: dt.datetime | None
    client_version: str | None
    last_heartbeat_at: dt.datetime | None
    heartbeat_sent_at: dt.datetime | None
    protocol_version: str | None
    active_config_version: str | None
    health_state: str | None
    health: JSON | None
    backlog_events: Long | None
    backlog_bytes: Long | None
    throughput: JSON | None
    version: Long

    @field(description="This node's backlog rows.")
    async def backlogs(self, info: Info) -> list[Backlog]:
        rows = await info.context.loaders.backlogs_of_node.load(self.node_id)
        return [Backlog.from_row(row) for row in rows]

    @field(description="When this node's upload backlog should be through, and what that "
                       "estimate rests on (§15.3).")
    async def eta(self, info: Info) -> NodeEtaView:
        console = info.context.console
        eta = await blocking(fetch_eta, console.pool, self.node_id,
                             lambda: _schedules(console))
        return NodeEtaView.of(eta, await blocking(_uplink_limit, console, self.node_id))

    @classmethod
    def from_row(cls, row: NodeRow) -> Node:
        return cls(
            node_id=row.node_id, status=row.status, registered_at=row.registered_at,
            revoked_at=row.revoked_at, client_version=row.client_version,
            last_heartbeat_at=row.last_heartbeat_at, heartbeat_sent_at=row.heartbeat_sent_at,
            protocol_version=row.protocol_version,
            active_config_version=row.active_config_version, health_state=row.health_state,
            health=JSON(row.health), backlog_events=long_or_none(row.backlog_events),
            backlog_bytes=long_or_none(row.backlog_bytes), throughput=JSON(row.throughput),
            version=Long(row.version),
        )


@strawberry.enum
class NodeErrorCode(enum.Enum):
    INVALID_NODE_ID = "INVALID_NODE_ID"
    ALREADY_REGISTERED = "ALREADY_REGISTERED"
    NOT_FOUND = "NOT_FOUND"
    REVOKED = "REVOKED"
    REASON_REQUIRED = "REASON_REQUIRED"
    INVALID_OVERLAP = "INVALID_OVERLAP"
    MASTER_KEY_UNAVAILABLE = "MASTER_KEY_UNAVAILABLE"
    INVALID_UPLINK = "INVALID_UPLINK"
    REFUSED = "REFUSED"


@strawberry.type(description="A node command that was refused, and why.")
class NodeError:
    code: NodeErrorCode
    message: str
    node_id: str


@strawberry.type(description="A signing secret was issued. The secret is shown only in this "
                             "answer; put it into the ship's configuration.")
class NodeSecretIssued:
    node_id: str
    credential_number: int
    position: WritePosition
    secret_value: strawberry.Private[str]

    @field(extensions=allow(CanSeeNodeSecret),
                      description="The signing secret (base64url), shown once.")
    def secret(self) -> str:
        return self.secret_value


@strawberry.type(description="The node's requests are refused from now on.")
class NodeRevokedSuccess:
    node_id: str
    position: WritePosition


@strawberry.type(description="The node's uplink limit is set; its ship takes it with its next "
                             "config (within a heartbeat).")
class NodeUplinkSet:
    node_id: str
    rate_bytes_per_second: Long
    burst_bytes: Long
    position: WritePosition


RegisterNodeResult = Annotated[NodeSecretIssued | NodeError,
                               strawberry.union("RegisterNodeResult")]
RotateNodeResult = Annotated[NodeSecretIssued | NodeError, strawberry.union("RotateNodeResult")]
RevokeNodeResult = Annotated[NodeRevokedSuccess | NodeError,
                             strawberry.union("RevokeNodeResult")]
SetNodeUplinkResult = Annotated[NodeUplinkSet | NodeError, strawberry.union("SetNodeUplinkResult")]


def _uplink_limit(console: Console, node_id: str) -> int:
    """The uplink limit the shore set for the node (0: none, or a node it does not know)."""
    try:
        return console.apps().nodes.node(node_id).link.uplink_rate
    except NodeNotFound:
        return 0


def _schedules(console: Console) -> dict[str, str]:
    """Each rule's schedule in the version ships are offered."""
    return {rule.rule_id: rule.schedule for rule, _ in console.rule_releases().offered()}
