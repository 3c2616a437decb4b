"""Node commands (§17.1): register, rotate and revoke, and the node's uplink limit (§13.1), each
with actor and reason. Register and rotate answer with the new signing secret, once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TypeVar

import strawberry

from tidesync.apps.master_key import MasterKeyError
from tidesync.apps.nodes import (
    Actor,
    IssuedSecret,
    NodeAlreadyRegistered,
    NodeNotFound,
    NodesApplication,
    NodeService,
)
from tidesync.domain.node import InvalidNodeId, InvalidNodeLink, NodeError, NodeLink, NodeRevoked
from tidesync.graphql.common import Long, WritePosition, mutation
from tidesync.graphql.context import Info
from tidesync.graphql.nodes.types import (
    NodeError as NodeErrorResult,
)
from tidesync.graphql.nodes.types import (
    NodeErrorCode,
    NodeRevokedSuccess,
    NodeSecretIssued,
    NodeUplinkSet,
    RegisterNodeResult,
    RevokeNodeResult,
    RotateNodeResult,
    SetNodeUplinkResult,
)
from tidesync.graphql.permissions import CanManageNodes, allow
from tidesync.graphql.positions import Position
from tidesync.graphql.threads import blocking

MAX_OVERLAP_HOURS = 24 * 90
T = TypeVar("T")


@strawberry.input
class RegisterNodeInput:
    node_id: str
    reason: str


@strawberry.input
class RotateNodeInput:
    node_id: str
    reason: str
    overlap_hours: float = 24.0


@strawberry.input
class RevokeNodeInput:
    node_id: str
    reason: str


@strawberry.input
class SetNodeUplinkInput:
    node_id: str
    rate_bytes_per_second: int = strawberry.field(
        description="Compressed bytes per second on the wire; 0 lifts the limit.")
    reason: str
    burst_bytes: int = strawberry.field(
        default=0, description="0: an eighth of a second of the rate, at least 16 KiB.")


@strawberry.type
class NodeMutations:
    @mutation(extensions=allow(CanManageNodes),
                         description="Register a node; the answer holds its secret, once.")
    async def register_node(self, info: Info, input: RegisterNodeInput) -> RegisterNodeResult:
        context = info.context
        actor = Actor(context.actor, input.reason, context.trace_id)

        def run(nodes: NodesApplication) -> IssuedSecret:
            return context.console.node_service(sealing=True).register(
                input.node_id, actor, context.console.clock())

        return await _issue(info, input.node_id, input.reason, run)

    @mutation(extensions=allow(CanManageNodes),
                         description="Issue a new secret; earlier ones stay valid for the "
                                     "overlap. The answer holds the secret, once.")
    async def rotate_node_credentials(self, info: Info,
                                      input: RotateNodeInput) -> RotateNodeResult:
        context = info.context
        if not 0 <= input.overlap_hours <= MAX_OVERLAP_HOURS:
            return NodeErrorResult(code=NodeErrorCode.INVALID_OVERLAP, node_id=input.node_id,
                                   message=f"overlapHours must be 0..{MAX_OVERLAP_HOURS}")
        actor = Actor(context.actor, input.reason, context.trace_id)
        overlap = dt.timedelta(hours=input.overlap_hours)

        def run(nodes: NodesApplication) -> IssuedSecret:
            return context.console.node_service(sealing=True).rotate(
                input.node_id, overlap, actor, context.console.clock())

        return await _issue(info, input.node_id, input.reason, run)

    @mutation(extensions=allow(CanManageNodes),
                         description="Refuse the node's requests from now on; what it "
                                     "already sent stays.")
    async def revoke_node(self, info: Info, input: RevokeNodeInput) -> RevokeNodeResult:
        clock = info.context.console.clock
        done = await _changed(info, input.node_id, input.reason, lambda service, actor:
                              service.revoke(input.node_id, actor, clock()))
        if isinstance(done, NodeErrorResult):
            return done
        return NodeRevokedSuccess(node_id=input.node_id, position=done[1])


    @mutation(extensions=allow(CanManageNodes),
              description="Set the node's uplink limit; its ship takes it with its next config "
                          "and paces at the lower of it and its own.")
    async def set_node_uplink(self, info: Info, input: SetNodeUplinkInput) -> SetNodeUplinkResult:
        try:
            wanted = NodeLink.of(input.rate_bytes_per_second, input.burst_bytes)
        except InvalidNodeLink as error:
            return _refused(input.node_id, NodeErrorCode.INVALID_UPLINK, str(error))
        clock = info.context.console.clock
        done = await _changed(info, input.node_id, input.reason, lambda service, actor:
                              service.change_link(input.node_id, wanted, actor, clock()))
        if isinstance(done, NodeErrorResult):
            return done
        link, position = done
        return NodeUplinkSet(node_id=input.node_id, rate_bytes_per_second=Long(link.uplink_rate),
                             burst_bytes=Long(link.uplink_burst), position=position)


async def _changed(info: Info, node_id: str, reason: str,
                   change: Callable[[NodeService, Actor], T]
                   ) -> tuple[T, WritePosition] | NodeErrorResult:
    """A node command that needs no secret: its result and the write's position, or why it
    was refused."""
    if not reason.strip():
        return _refused(node_id, NodeErrorCode.REASON_REQUIRED, "a reason is required")
    context = info.context
    actor = Actor(context.actor, reason, context.trace_id)

    def run() -> tuple[T, int]:
        apps = context.console.apps()
        result = change(context.console.node_service(sealing=False), actor)
        return result, apps.nodes.recorder.max_notification_id() or 0

    try:
        result, position = await blocking(run)
    except (NodeError, MasterKeyError) as error:
        return _error_of(node_id, error)
    return result, WritePosition.of(Position("nodes", position))


async def _issue(info: Info, node_id: str, reason: str,
                 run: Callable[[NodesApplication], IssuedSecret],
                 ) -> NodeSecretIssued | NodeErrorResult:
    if not reason.strip():
        return _refused(node_id, NodeErrorCode.REASON_REQUIRED, "a reason is required")
    console = info.context.console

    def issue() -> tuple[IssuedSecret, int]:
        nodes = console.apps().nodes
        issued = run(nodes)
        return issued, nodes.recorder.max_notification_id() or 0

    try:
        issued, position = await blocking(issue)
    except (NodeError, MasterKeyError) as error:
        return _error_of(node_id, error)
    return NodeSecretIssued(node_id=issued.node_id, credential_number=issued.number,
                            position=WritePosition.of(Position("nodes", position)),
                            secret_value=issued.text)


def _error_of(node_id: str, error: Exception) -> NodeErrorResult:
    codes: list[tuple[type[Exception], NodeErrorCode, str]] = [
        (InvalidNodeId, NodeErrorCode.INVALID_NODE_ID,
         "a node id is 1-63 of a-z, 0-9 and '-', starting alphanumeric"),
        (NodeAlreadyRegistered, NodeErrorCode.ALREADY_REGISTERED, "already registered"),
        (NodeNotFound, NodeErrorCode.NOT_FOUND, "no such node"),
        (NodeRevoked, NodeErrorCode.REVOKED, "the node is revoked"),
        (MasterKeyError, NodeErrorCode.MASTER_KEY_UNAVAILABLE,
         "the master key that seals node secrets is not available"),
    ]
    for kind, code, message in codes:
        if isinstance(error, kind):
            return _refused(node_id, code, message)
    return _refused(node_id, NodeErrorCode.REFUSED, str(error))


def _refused(node_id: str, code: NodeErrorCode, message: str) -> NodeErrorResult:
    return NodeErrorResult(code=code, message=message, node_id=node_id)
