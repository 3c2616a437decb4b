"""The upload pipeline (§9.3): batches cut to the link's measured pace, several requests in
flight, and every answer applied on the client's own thread.

* Each request carries about a second of link time (`tidesync.ship.pace`); up to `slots`
  requests go side by side on their own connections, so the link does not idle while an
  answer travels. While others keep the link busy, a request waits until it can be at least
  half that size.
* A batch keeps its id and body across retries. When a request went out whole and its answer
  was lost, the shore is first asked what it answered (GET /sync/v1/batches/{id}); only a
  batch the shore does not know goes again.
* Events leave the send window only once the shore answered them, so nothing is committed
  before the shore has it; the shore deduplicates by event id whatever is sent twice.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tidesync.domain.backoff import Backoff
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.clock import Clock
from tidesync.ship.batcher import BatchLimits, OutgoingBatch, SendWindow, build_batch
from tidesync.ship.client_settings import ClientSettings
from tidesync.ship.pace import LinkPace, PaceSettings
from tidesync.ship.retries import RetrySchedule
from tidesync.ship.shore_answers import ClientReason, batch_answers, encodable
from tidesync.ship.state import (
    EventState,
    Progress,
    ReceiveAnswer,
    ReceiveOutcome,
    SQLiteShipState,
)
from tidesync.ship.telemetry import HealthState, Subsystem
from tidesync.ship.transport import (
    RESUME_REFUSALS,
    BatchUnknown,
    Disposition,
    LinkDown,
    LinkError,
    LinkReason,
    ShoreLink,
    ShoreRefused,
    link_is_down,
)
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.protocol import WireError, WireReason

log = logging.getLogger(__name__)

_COMPRESSION_GUESS = 0.25
"""Compressed body bytes per byte of the window's size estimates, until measured."""
_TOO_MANY_CONCURRENT = "TOO_MANY_CONCURRENT_REQUESTS"
_TOO_MANY_EVENTS = "TOO_MANY_EVENTS"
STALL_SECONDS = 3.0
"""The least time requests on their way may go without any answer before a probe checks
whether the link went silent (see `UploadPipeline._watch`)."""

Answer = pb.UploadBatchResponse | BatchUnknown | None
"""An upload's answer, or a fate question's (BatchUnknown: the shore kept part of the body)."""


class PipelineHooks(Protocol):
    """What the pipeline needs of the client around it."""

    def moved(self, progress: Progress) -> None: ...

    def set_health(self, subsystem: Subsystem, state: HealthState, reason: str = "",
                   detail: str = "") -> None: ...

    def block_node(self, error: LinkError) -> None: ...

    def transport_healthy(self) -> None: ...


@dataclass
class _Flight:
    """One request on its way: an upload, or the question what became of one."""

    batch: OutgoingBatch
    future: concurrent.futures.Future[Answer]
    started: float
    asks_fate: bool
    estimate: int = 0
    """The window's size estimates of the batch's events (queue record bytes)."""


@dataclass
class _Held:
    """A batch that did not get an answer, kept (same id, same body) to go again."""

    batch: OutgoingBatch
    ask_fate: bool


class UploadPipeline:
    """Builds batches from the send window, keeps requests in flight and applies answers."""

    def __init__(self, settings: ClientSettings, state: SQLiteShipState, window: SendWindow,
                 link: ShoreLink, retry: RetrySchedule, hooks: PipelineHooks, *,
                 backoff: Backoff, random: Callable[[], float], clock: Clock,
                 monotonic: Callable[[], float]) -> None:
        self.settings, self.state, self.window, self.link = settings, state, window, link
        self.retry, self.hooks, self.backoff, self.random = retry, hooks, backoff, random
        self.clock, self.monotonic = clock, monotonic
        self.slots = max(1, settings.uploads_in_flight)
        self.pace = LinkPace(PaceSettings(
            settings.upload_request_seconds, settings.upload_initial_bytes,
            max_bytes=settings.limits.max_bytes))
        self.event_cap = settings.limits.max_events
        self.wire_version = settings.limits.wire_version
        self.compression = _COMPRESSION_GUESS
        self.flights: list[_Flight] = []
        self.held: deque[_Held] = deque()
        self.uploaded_batches = 0
        self.fates_asked = 0
        self.heard = 0.0
        """When a request last ended, or the first of those now on their way started."""
        self._executor = (concurrent.futures.ThreadPoolExecutor(
            self.slots, thread_name_prefix="ship-upload") if self.slots > 1 else None)

    # ------------------------------------------------------------------ the client's view

    def busy(self) -> bool:
        """Requests in flight, or batches waiting to go again."""
        return bool(self.flights or self.held)

    def backlog(self, now: float) -> bool:
        """Something waits to be uploaded (or is on its way)."""
        return self.busy() or self.window.has_due(now)

    def can_send(self, now: float, blocked: bool) -> bool:
        """Whether a request would go out this turn."""
        return (not blocked and self.retry.due(now) and self.pace.may_start(self.slots)
                and bool(self.held or self.window.has_due(now)))

    def shore_limits(self, control: pb.ControlParameters) -> None:
        """The shore's caps of one batch (from its config answer)."""
        if control.batch_max_events:
            self.event_cap = min(self.event_cap, control.batch_max_events)

    def probes_link(self, now: float | None = None) -> bool:
        """While the link is down, the first held batch's fate question is the probe (when it
        can go: no request on its way), and while such questions are on their way no other
        probe is needed — for the recovery's `check_seconds`: one unanswered by then is stuck
        on a link that drops packets (it gets no refusal), and the link's own probes go."""
        recovery = self.retry.recovery
        if recovery is None:
            return False
        now = self.monotonic() if now is None else now
        if any(flight.asks_fate and now - flight.started < recovery.check_seconds
               for flight in self.flights):
            return recovery.down_since is not None
        return bool(self.held) and self.held[0].ask_fate and not self.flights

    def step(self, blocked: bool) -> None:
        """Apply the answers that came, then start what may start."""
        self._collect()
        if not blocked:
            self._start()
            self._collect()  # without threads, requests have ended already
        self._watch(self.monotonic())

    def _watch(self, now: float) -> None:
        """Requests on their way and no answer for much longer than their bytes take: on a
        link that drops packets (a satellite blockage) nothing fails until a timeout, so the
        link's recovery probes whether the link went silent. When it has, the requests stuck
        since are given up once the link answers again (`HttpShoreLink.abandon`): their
        connections would otherwise resume only at the kernel's next retransmission, which
        backs off to minutes."""
        recovery = self.retry.recovery
        if recovery is None or not self.flights or now - self.heard <= self.patience():
            return
        recovery.suspect(self.link, now, self.heard)
        self.heard = now  # the next check after as long again

    def patience(self) -> float:
        """How long requests on their way may go without any answer: twice what the largest
        one's bytes and a round trip take at the measured pace (their answers come about
        that far apart), and at least `STALL_SECONDS`."""
        rate = self.pace.rate
        largest = max((_sent(flight.batch) for flight in self.flights
                       if not flight.asks_fate), default=0)
        transfer = largest / rate if rate else 0.0
        return max(STALL_SECONDS, 2 * (transfer + self.pace.rtt()))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ starting

    def _start(self) -> None:
        probes = 0  # fate questions this turn may still send as the link's probe
        while True:
            now = self.monotonic()
            if not self.pace.may_start(self.slots):
                return
            if not self.retry.due(now):
                if probes and self.held and self.held[0].ask_fate:
                    probes -= 1
                elif self._probing(now):
                    # Each held fate question is a probe: side by side, one lost segment
                    # (a second-long stall) no longer delays the first answer.
                    probes = min(self.slots, len(self.held)) - 1
                else:
                    return
            if self.held:
                held = self.held.popleft()
                fate = getattr(self.link, "batch_fate", None)
                if held.ask_fate and fate is not None:
                    self.fates_asked += 1
                    self._launch(held.batch, True, _asking(fate, held.batch))
                    continue
                self._send(held.batch)
                continue
            if self.flights and not self._enough_due():
                return
            batch = self._next_batch(now)
            if batch is None:
                return
            self._send(batch)

    def _budget(self) -> int:
        """The paced request size in the window's size estimates."""
        return int(self.pace.request_bytes() / max(0.001, self.compression))

    def _enough_due(self) -> bool:
        """While other requests keep the link busy, a request waits until it can be at least
        half the paced size: a small one would hold a slot for a round trip and carry little
        (the queue refills the window a poll at a time)."""
        in_flight = sum(flight.estimate for flight in self.flights)
        return self.window.bytes - in_flight >= self._budget() // 2

    def _probing(self, now: float) -> bool:
        """A held batch's fate question goes out as the link's probe when one is due: when
        the link is back its answer is already the batch's, one round trip sooner."""
        recovery = self.retry.recovery
        if (recovery is None or self.flights or not self.probes_link(now)
                or not recovery.probe_due(now)):
            return False
        recovery.probe_failed(now)  # the next probe's time, unless this one answers
        return True

    def _next_batch(self, now: float) -> OutgoingBatch | None:
        if not self.window.has_due(now):
            return None
        base = self.settings.limits
        limits = BatchLimits(min(self.event_cap, base.max_events), base.max_bytes, base.level,
                             base.include_before, self.wire_version, base.compressor)
        # The window's size estimates are queue record sizes, far from what the wire carries:
        # the paced budget (scaled by the compression measured against them) picks the
        # events, and build_batch holds the batch to max_bytes of its real encoding.
        budget = self._budget()
        events = self.window.take(now, dataclasses.replace(limits, max_bytes=max(1, budget)))
        if not events:
            return None
        try:
            batch, left = build_batch(events, self.settings.node_id, self.clock(), limits)
        except (ValueError, TypeError):
            self._block_unencodable(events)
            return None
        self.window.release(event.event_id for event in left)
        estimate = self.window.estimate(batch.event_ids)
        if estimate > 0:
            measured = len(batch.body) / estimate
            self.compression = measured if self.uploaded_batches == 0 and not self.flights \
                else 0.5 * self.compression + 0.5 * measured
        return batch

    def _send(self, batch: OutgoingBatch) -> None:
        self.state.mark(batch.event_ids, EventState.IN_FLIGHT)
        self._launch(batch, False, lambda: self.link.upload(batch),
                     self.window.estimate(batch.event_ids))

    def _launch(self, batch: OutgoingBatch, asks_fate: bool,
                call: Callable[[], Answer], estimate: int = 0) -> None:
        now = self.monotonic()
        size = 0 if asks_fate else _sent(batch)
        if not self.flights:
            self.heard = now
        self.pace.started(size, now)
        if self._executor is not None:
            future = self._executor.submit(call)
        else:
            future = concurrent.futures.Future()
            try:
                future.set_result(call())
            except Exception as error:  # noqa: BLE001 - handed over like a thread's
                future.set_exception(error)
        self.flights.append(_Flight(batch, future, now, asks_fate, estimate))

    # ------------------------------------------------------------------ answers

    def _collect(self) -> None:
        for flight in [f for f in self.flights if f.future.done()]:
            self.flights.remove(flight)
            now = self.heard = self.monotonic()
            size = 0 if flight.asks_fate else _sent(flight.batch)
            try:
                answer = flight.future.result()
            except LinkError as error:
                self.pace.ended(size, now, now - flight.started, answered=False)
                if flight.asks_fate:
                    self._fate_failed(flight.batch, error)
                else:
                    self._failed(flight.batch, error)
                continue
            except Exception as error:
                self.pace.ended(size, now, now - flight.started, answered=False)
                log.exception("upload of batch %s failed unexpectedly", flight.batch.batch_id)
                self._failed(flight.batch, LinkDown("UNEXPECTED", str(error)[:200]))
                continue
            self.pace.ended(size, now, now - flight.started, answered=True)
            self.retry.succeeded()
            if answer is None or isinstance(answer, BatchUnknown):
                # The shore never had the whole batch: it goes again, only the rest of it
                # when the shore kept the first bytes of the cut upload.
                kept = answer.resume_from if answer is not None else 0
                self.held.appendleft(_Held(dataclasses.replace(flight.batch, resume_from=kept),
                                           ask_fate=False))
                continue
            self.uploaded_batches += not flight.asks_fate
            self._answered(flight.batch, answer, flight.asks_fate)
            self.hooks.transport_healthy()

    def _answered(self, batch: OutgoingBatch, response: pb.UploadBatchResponse,
                  recalled: bool) -> None:
        try:
            answers = batch_answers(batch.events, response)
        except WireError as error:
            log.warning("unreadable answer to batch %s (%s): its events go again",
                        batch.batch_id, error)
            answers = []
        progress = self.state.apply_answers(answers)
        unanswered = set(batch.event_ids) - {answer.event_id for answer in answers}
        self.hooks.moved(progress)
        self._retry_events(progress.retry | unanswered)
        if progress.blocked:
            log.warning("shore rejected %d events of batch %s", len(progress.blocked),
                        batch.batch_id)
        log.info("batch %s%s: %d events, %d bytes compressed; received %d, terminal %d,"
                 " retry %d, rejected %d", batch.batch_id,
                 " (its answer asked for again)" if recalled else "", len(batch.events),
                 len(batch.body), len(progress.received), len(progress.terminal),
                 len(progress.retry), len(progress.blocked))

    def _retry_events(self, event_ids: set[uuid.UUID]) -> None:
        if not event_ids:
            return
        now = self.monotonic()
        for event_id in event_ids:
            attempt = self.window.attempts(event_id) + 1
            self.window.defer([event_id], now + self.backoff.delay(attempt, self.random()))
        self.state.mark(event_ids, EventState.RETRY_WAIT)

    def _fate_failed(self, batch: OutgoingBatch, error: LinkError) -> None:
        if error.reason == LinkReason.STALLED:  # given up after an outage: ask at once
            self.held.appendleft(_Held(batch, ask_fate=True))
            return
        if link_is_down(error) or (error.disposition is Disposition.RETRY
                                   and isinstance(error, ShoreRefused)):
            self.held.appendleft(_Held(batch, ask_fate=True))
            self._schedule(error, "asking the fate of batch", batch)
            return
        if error.disposition is Disposition.BLOCK_NODE and isinstance(error, ShoreRefused):
            self.held.appendleft(_Held(batch, ask_fate=True))
            self.hooks.block_node(error)
            return
        # No usable answer to the question (a shore that does not keep answers): send again.
        log.info("the shore cannot tell what became of batch %s (%s): sending it again",
                 batch.batch_id, error.reason)
        self.held.appendleft(_Held(batch, ask_fate=False))

    def _failed(self, batch: OutgoingBatch, error: LinkError) -> None:
        ids = batch.event_ids
        if batch.resume_from and isinstance(error, ShoreRefused):
            # The shore answered: it no longer keeps the part this upload continued (it took
            # it, or never held it), so the whole body goes from now on.
            batch = dataclasses.replace(batch, resume_from=0)
            if error.reason in RESUME_REFUSALS:
                self.held.appendleft(_Held(batch, ask_fate=False))
                return
        if error.disposition is Disposition.SPLIT:
            self._split(batch, error)
            return
        if error.reason == LinkReason.STALLED:
            # Given up once the link answered again after an outage: its fate is asked now,
            # with no wait (the link works).
            self.state.mark(ids, EventState.RETRY_WAIT)
            self.held.append(_Held(batch, ask_fate=error.answer_lost or error.body_cut))
            return
        if error.reason == WireReason.UNSUPPORTED_PROTOCOL and batch.wire_version > 1:
            # A shore of protocol major 1 only: the same events go again as UploadBatch.
            self.wire_version = 1
            self._release(batch)
            for held in list(self.held):
                self._release(held.batch)
            self.held.clear()
            log.warning("the shore does not take upload batches of major 2; sending major 1")
            return
        if error.disposition is Disposition.BLOCK_NODE:
            self._release(batch)
            self.hooks.block_node(error)
            return
        if error.reason == _TOO_MANY_CONCURRENT and self.slots > 1:
            self.slots -= 1
            log.warning("the shore takes fewer requests side by side: %d uploads in flight"
                        " from now on", self.slots)
        self.state.mark(ids, EventState.RETRY_WAIT)
        self.held.append(_Held(batch, ask_fate=error.answer_lost or error.body_cut))
        self._schedule(error, "upload of batch", batch)

    def _schedule(self, error: LinkError, what: str, batch: OutgoingBatch) -> None:
        delay = self.retry.failed(self.monotonic(), error.retry_after,
                                  link_down=link_is_down(error))
        state = HealthState.OFFLINE if isinstance(error, LinkDown) or (
            error.status is not None and error.status >= 500) else HealthState.DEGRADED
        self.hooks.set_health(Subsystem.TRANSPORT, state, error.reason, str(error)[:200])
        log.log(self.retry.log_level(), "%s %s failed (%s); retry %d %s", what,
                batch.batch_id, error.reason, self.retry.attempt, self.retry.when(delay))

    def _split(self, batch: OutgoingBatch, error: LinkError) -> None:
        ids = batch.event_ids
        if len(ids) > 1:
            if error.reason == _TOO_MANY_EVENTS:
                self.event_cap = max(1, len(ids) // 2)
            else:
                self.pace.too_large()
                self.compression *= 2
            self._release(batch)
            return
        progress = self.state.apply_answers([ReceiveAnswer(
            ids[0], ReceiveOutcome.PERMANENT_REJECTED, ClientReason.PAYLOAD_TOO_LARGE,
            f"one event of {batch.uncompressed_bytes} bytes exceeds the shore's limit")])
        self.hooks.moved(progress)

    def _release(self, batch: OutgoingBatch) -> None:
        """The batch's events go back to the window, to be batched afresh."""
        self.window.release(batch.event_ids)
        self.state.mark(batch.event_ids, EventState.READY)

    def _block_unencodable(self, events: list[ChangeEvent]) -> None:
        """An event the wire cannot carry blocks alone; the rest of the batch goes on."""
        bad = [event.event_id for event in events if not encodable(event)]
        self.window.release(event.event_id for event in events)
        progress = self.state.apply_answers([ReceiveAnswer(
            event_id, ReceiveOutcome.PERMANENT_REJECTED, ClientReason.UNENCODABLE_EVENT,
            "the event cannot be encoded for the wire") for event_id in bad])
        self.hooks.moved(progress)
        log.error("%d events cannot be encoded and are blocked", len(bad))


def _asking(fate: Callable[[uuid.UUID, bytes], Answer], batch: OutgoingBatch
            ) -> Callable[[], Answer]:
    return lambda: fate(batch.batch_id, batch.body)


def _sent(batch: OutgoingBatch) -> int:
    """The body bytes an upload of `batch` sends (less what the shore kept of a cut one)."""
    return len(batch.body) - batch.resume_from
