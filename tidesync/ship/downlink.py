"""The ship's downlink loop (§12): pull shore commands, apply them in order, ack, advance.

Order of durable steps per command, so that a crash anywhere is safe:
1. `applied_command` row APPLYING (before the business database is written: a captured
   platform write carrying this id is provably ours from now on, §12 loop suppression);
2. the compare-and-set apply (row + `_sync_applied` ledger in one database transaction);
3. `applied_command` DONE with the result and the ack in `pending_command_ack` (one SQLite
   transaction);
4. the ack is sent; only once the shore accepted the acks of every command of a page does the
   commands cursor move past it. A command pulled again is applied again: the ledger answers
   ALREADY_APPLIED.

A resend request writes no business row: the partition's events are queued to be uploaded
again (`tidesync.ship.resend`) and the answer is recorded as in step 3. Pulled again, it is
carried out again, which sends nothing the shore has finished. A reconciliation turn is
answered the same way (`tidesync.ship.reconcile`: the answer is posted before the ack).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tidesync import failpoints
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.downlink_command import CommandResult, ReconcilePayload, SnapshotKeysPayload
from tidesync.ship.reconcile_deferred import ReconcileDeferred
from tidesync.ship.remote_apply import (
    CommandAnswer,
    CommandReason,
    PreparedCommand,
    RemoteApplier,
    command_answer,
    merge_acks,
    prepare,
)
from tidesync.ship.resend import QueueResender, ResendDeferred
from tidesync.ship.side_requests import SideRequests
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.state.commands import COMMANDS_CURSOR, CommandState
from tidesync.ship.telemetry import HealthReason, HealthState, Subsystem
from tidesync.ship.transport import Disposition, LinkError, RetrySchedule, ShoreLink
from tidesync.target.contract import CommitOutcomeUnknown, TargetError, TransientTargetError
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

log = logging.getLogger(__name__)

MAX_ACKS_PER_REQUEST = 1000
_NODE_REFUSALS = frozenset({401, 403, 426})
AFTER_APPLY_FAILPOINT = "ship_after_command_apply"
"""Between the business database commit and recording the result (crash tests)."""

_PULL, _ACKS = "commands", "command acks"
"""The downlink's requests, by the name logs give them."""
HealthSetter = Callable[[Subsystem, HealthState, str, str], None]
LinkFailed = Callable[[RetrySchedule, LinkError, str], None]



class CommandOutcome(Protocol):
    @property
    def result(self) -> CommandResult: ...

    @property
    def reason(self) -> str: ...

    @property
    def detail(self) -> str: ...


class CommandReconciler(Protocol):
    """What answers a reconciliation's turns and queues its repairs
    (`tidesync.ship.reconcile.ShipReconciler`)."""

    def answer(self, turn: ReconcilePayload, command_id: bytes) -> CommandOutcome: ...

    def snapshot(self, request: SnapshotKeysPayload) -> CommandOutcome: ...

@dataclass(frozen=True)
class DownlinkSettings:
    node_id: str
    shore_node_id: str = "shore"
    page_size: int = 200
    interval: float = 5.0


class Downlink:
    """One turn at a time from the client loop; never sleeps (retries are scheduled)."""

    def __init__(self, settings: DownlinkSettings, state: SQLiteShipState, link: ShoreLink,
                 applier: RemoteApplier, *, set_health: HealthSetter,
                 link_failed: LinkFailed, retry: RetrySchedule, clock: Clock = utc_now,
                 monotonic: Callable[[], float] = time.monotonic,
                 resender: QueueResender | None = None,
                 side: SideRequests | None = None) -> None:
        self.settings, self.state, self.link, self.applier = settings, state, link, applier
        self.side = side or SideRequests(threaded=False)
        """Where the pulls and acks go: the client's side thread on a link with a round trip
        (the client's loop never waits for the link); here and now otherwise."""
        self.resender = resender
        self.reconciler: CommandReconciler | None = None
        """Answers reconciliation turns and queues their repair snapshots (None: refused)."""
        self.set_health, self.link_failed, self.retry = set_health, link_failed, retry
        self.clock, self.monotonic = clock, monotonic
        self.next_pull = 0.0
        self.more = True
        self.pulled = False
        self.blocked: tuple[str, str] | None = None

    def idle(self) -> bool:
        """Pulled at least once, no page left, every ack accepted — or the downlink stopped."""
        if self.blocked is not None:
            return True
        return self.pulled and not self.more and self.state.pending_ack_count() == 0

    def step(self) -> None:
        now = self.monotonic()
        if self.blocked is not None or not self.retry.due(now) or self._waiting():
            return
        if self.state.pending_ack_count():
            self._send_acks()
            if self._waiting() or self.state.pending_ack_count():
                return  # the next page only once every ack is in
        if not (self.more or now >= self.next_pull):
            return
        self.next_pull = now + self.settings.interval
        cursor = self.state.cursor(COMMANDS_CURSOR)
        size = self.settings.page_size
        self.side.start(_PULL, lambda: self.link.commands(cursor, size),
                        lambda page: self._pulled(page, cursor),
                        lambda error: self._link_error(error, _PULL))

    def _waiting(self) -> bool:
        return self.side.busy(_PULL) or self.side.busy(_ACKS)

    def _pulled(self, page: pb.CommandsPage, cursor: str) -> None:
        self.retry.succeeded()
        self.pulled = True
        self.more = page.has_more
        if not self._apply_page(page):
            return
        self.state.page_processed(page.next_cursor or cursor)
        self._send_acks()

    def _link_error(self, error: LinkError, what: str) -> None:
        """Identity/protocol refusals block the node as for uploads; any other refusal of a
        downlink request (bad cursor, an endpoint this shore lacks) stops only the downlink,
        so the uplink keeps going, and shows as DOWNLINK_APPLY BLOCKED until a restart."""
        if (error.disposition is Disposition.BLOCK_NODE
                and error.status not in _NODE_REFUSALS):
            self.blocked = (error.reason, str(error)[:300])
            self.set_health(Subsystem.DOWNLINK_APPLY, HealthState.BLOCKED, error.reason,
                            f"{what}: {str(error)[:200]}")
            log.error("the shore refused the %s request (%s, HTTP %s): shore commands stop"
                      " until restarted", what, error.reason, error.status)
            return
        self.link_failed(self.retry, error, what)

    def _apply_page(self, page: pb.CommandsPage) -> bool:
        names = codec.NameTable(page.strings)
        for command in sorted(page.commands, key=lambda c: c.sequence):
            try:
                self._process(command, names)
            except (TransientTargetError, CommitOutcomeUnknown) as error:
                self._apply_failed(error, HealthState.DEGRADED, HealthReason.APPLY_RETRYING)
                return False
            except (ResendDeferred, ReconcileDeferred) as error:
                self._apply_failed(error, HealthState.DEGRADED, HealthReason.APPLY_RETRYING)
                return False
            except TargetError as error:
                self._apply_failed(error, HealthState.BLOCKED, HealthReason.APPLY_FAILED)
                return False
        self.set_health(Subsystem.DOWNLINK_APPLY, HealthState.HEALTHY, "", "")
        return True

    def _apply_failed(self, error: TargetError | ResendDeferred | ReconcileDeferred,
                      state: HealthState,
                      reason: str) -> None:
        """Nothing of the failed command was acked: it is pulled and applied again later."""
        delay = self.retry.failed(self.monotonic())
        self.more = True
        self.set_health(Subsystem.DOWNLINK_APPLY, state, reason, error.reason_code)
        log.warning("applying a shore command failed (%s); retry in %.1f s",
                    error.reason_code, delay)

    def _process(self, command: pb.DownlinkCommand, names: codec.NameTable) -> None:
        prepared = prepare(command, names, self.settings.shore_node_id, self.clock())
        applied_id = prepared.applied_id.bytes if prepared.applied_id is not None else None
        progress, pending = self.state.command_progress(applied_id, prepared.command_id)
        if pending and progress != CommandState.APPLYING:
            return  # its result is recorded; the ack goes out with the others
        if prepared.resend is not None:
            self._record(None, prepared.command_id, prepared.sequence, self._resend(prepared))
            return
        if prepared.reconcile is not None or prepared.snapshot is not None:
            self._record(None, prepared.command_id, prepared.sequence,
                         self._reconcile(prepared))
            return
        if applied_id is not None and prepared.kind is not None and prepared.event is not None:
            self.state.begin_command(applied_id, prepared.command_id, prepared.sequence,
                                     prepared.kind)
        answer = self.applier.apply(prepared, self.clock())
        failpoints.hit(AFTER_APPLY_FAILPOINT)
        self._record(applied_id, prepared.command_id, prepared.sequence, answer)

    def _resend(self, prepared: PreparedCommand) -> CommandAnswer:
        assert prepared.resend is not None
        if self.resender is None:
            return command_answer(prepared, CommandResult.COMMAND_REJECTED, self.clock(),
                                  CommandReason.UNSUPPORTED_COMMAND,
                                  "this ship client does not read the queue")
        outcome = self.resender.resend(prepared.resend)
        return command_answer(prepared, outcome.result, self.clock(), outcome.reason,
                              outcome.detail)

    def _reconcile(self, prepared: PreparedCommand) -> CommandAnswer:
        if self.reconciler is None:
            return command_answer(prepared, CommandResult.COMMAND_REJECTED, self.clock(),
                                  CommandReason.UNSUPPORTED_COMMAND,
                                  "this ship client does not reconcile")
        if prepared.reconcile is not None:
            outcome = self.reconciler.answer(prepared.reconcile, prepared.command_id)
        else:
            assert prepared.snapshot is not None
            outcome = self.reconciler.snapshot(prepared.snapshot)
        return command_answer(prepared, outcome.result, self.clock(), outcome.reason,
                              outcome.detail)

    def _record(self, applied_id: bytes | None, command_id: bytes, sequence: int,
                answer: CommandAnswer) -> None:
        self.state.finish_command(applied_id, command_id, sequence, answer.result,
                                  answer.reason, answer.local_revision,
                                  answer.acks.SerializeToString())
        log.info("shore command %d: %s %s", sequence, answer.result.value, answer.reason)

    def _send_acks(self) -> None:
        """Send the pending acks, a request of up to MAX_ACKS_PER_REQUEST at a time (all of
        them now, on a link without a round trip)."""
        rows = self.state.pending_acks(MAX_ACKS_PER_REQUEST)
        if not rows:
            return
        parts = [codec.parse_message(raw, pb.CommandAcks) for _, raw in rows]
        message = merge_acks(self.settings.node_id, parts)
        self.side.start(_ACKS, lambda: self.link.command_acks(message),
                        lambda response: self._acks_answered(rows, response),
                        lambda error: self._link_error(error, _ACKS))

    def _acks_answered(self, rows: list[tuple[bytes, bytes]],
                       response: pb.CommandAcksResponse) -> None:
        sent = {command_id for command_id, _ in rows}
        rejected = set(response.rejected_command_ids) & sent
        answered = (set(response.accepted_command_ids) | rejected) & sent
        if rejected:
            log.warning("the shore refused %d acks (unknown commands)", len(rejected))
        if not answered:
            self.retry.failed(self.monotonic())
            log.warning("the shore accepted none of %d acks; retrying later", len(rows))
            return
        self.state.acks_answered(answered)
        if len(rows) == MAX_ACKS_PER_REQUEST and not self._waiting():
            self._send_acks()  # more wait (a link without a round trip: at once)
