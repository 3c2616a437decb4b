"""The ship client loop: consume → state → batch → upload → receipts → queue commit.

One thread owns the state; nothing in it sleeps on the link: uploads run side by side on the
upload pipeline's threads (`tidesync.ship.uploader`), whose answers this thread applies, and
retries are scheduled while the queue keeps being read. Memory stays bounded by the send
window, whatever the queue's backlog.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import random
import signal
import threading
import time
from types import FrameType

from tidesync.cdc.kafka import (
    PartitionKey,
    QueueUnavailable,
)
from tidesync.domain.backoff import Backoff
from tidesync.domain.clock import Clock, Monotonic, utc_now
from tidesync.domain.rules.schedule import zone_of
from tidesync.ship.batcher import SendWindow, default_priority
from tidesync.ship.client_settings import ClientSettings, PeriodicTimer
from tidesync.ship.consumer import QueueConsumer, QueueReason
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.remote_apply import RemoteApplier
from tidesync.ship.resend import QueueResender
from tidesync.ship.retries import link_recovery
from tidesync.ship.rules import MaskKeyError, SchemaUnavailable, ShipRules
from tidesync.ship.send_schedule import SendSchedules, TrustedClock
from tidesync.ship.shore_answers import applied_ranges, terminal_results
from tidesync.ship.side_requests import SideRequests
from tidesync.ship.state import (
    Progress,
    SQLiteShipState,
    StateReason,
    StateStoreError,
    Watermark,
)
from tidesync.ship.telemetry import (
    HealthBoard,
    HealthReason,
    HealthState,
    Subsystem,
    SyncStates,
    ThroughputMeter,
    build_heartbeat,
    disk_health,
    partition_backlog,
)
from tidesync.ship.transport import (
    Disposition,
    LinkDown,
    LinkError,
    LinkReason,
    RetrySchedule,
    ShoreLink,
    link_is_down,
    shore_moment,
)
from tidesync.ship.uploader import UploadPipeline
from tidesync.target.contract import TargetApplier
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.protocol import WireError

log = logging.getLogger(__name__)


_QUEUE_RETRY_SECONDS = 1.0
_ANSWER_POLL_SECONDS = 0.02
"""How long the queue is polled while uploads are in flight: their answers are applied soon."""
_CLOCK_SKEW_NOTICE = dt.timedelta(minutes=1)
"""A clock further than this from the shore's is reported in the transport's health."""


_ROOM = 8
"""A full send window takes an eighth more for partitions below their share, then no more."""


class ExitCode(enum.IntEnum):
    IDLE = 0
    BLOCKED = 3
    TIMEOUT = 4


class ShipClient:
    """Composes the queue consumer, state store, send window and shore link."""

    def __init__(self, settings: ClientSettings, consumer: QueueConsumer,
                 state: SQLiteShipState, link: ShoreLink, *, clock: Clock = utc_now,
                 monotonic: Monotonic = time.monotonic, rng: random.Random | None = None,
                 rules: ShipRules | None = None) -> None:
        self.settings, self.consumer, self.state, self.link = settings, consumer, state, link
        self.rules = rules
        self.clock, self.monotonic = clock, monotonic
        self.rng = rng or random.SystemRandom()
        self.backoff = Backoff()
        self.schedules = None if rules is None else SendSchedules(
            rules.schedule_of, zone_of(settings.timezone),
            TrustedClock(clock, monotonic, settings.clock_jump_seconds))
        self.window = SendWindow(default_priority if rules is None else rules.priority_of,
                                 monotonic=monotonic, sendable=None if self.schedules is None
                                 else self.schedules.open)
        self.health = HealthBoard()
        # The first success after an outage resets every request's schedule (not the identity
        # probe's: that one waits for the shore, not the link).
        remote = bool(getattr(link, "remote", False))
        self.recovery = link_recovery(
            link, Backoff(settings.probe_initial_seconds, settings.probe_max_seconds), self.rng,
            monotonic)
        self.upload_retry = self.recovery.schedule(self.backoff)
        self.receipts_retry = self.recovery.schedule(self.backoff)
        self.heartbeat_retry = self.recovery.schedule(self.backoff)
        self.identity_probe = RetrySchedule(self.backoff, self.rng)
        self.config_retry = self.recovery.schedule(self.backoff)
        self.config_wanted = rules is not None
        self.topics = PeriodicTimer(settings.topic_refresh_interval)
        self.receipts = PeriodicTimer(settings.receipts_interval)
        self.heartbeats = PeriodicTimer(settings.heartbeat_interval)
        self.commits = PeriodicTimer(settings.commit_interval)
        self.meter = ThroughputMeter(clock())
        self.node_blocked: tuple[str, str] | None = None
        self.uploads = UploadPipeline(
            settings, state, self.window, link, self.upload_retry, self,
            backoff=self.backoff, random=self.rng.random, clock=clock,
            monotonic=lambda: self.monotonic())
        self.awaiting = state.awaits_receipts()
        self.more_receipts = self.awaiting
        self.pages_waiting = False
        """The last receipts page said more wait: once no upload is due, ask at once."""
        self.stop_event = threading.Event()
        self._watermarks: dict[PartitionKey, Watermark] = {}
        self._queue_down: str | None = None
        self._blocked_dirty = True
        self.downlink: Downlink | None = None
        self.sync_states: SyncStates = tuple  # set by `tidesync.bootstrap.sync_states`
        # Receipts, heartbeats and config travel beside the uploads on a remote link.
        self.side = SideRequests(threaded=remote)

    def enable_downlink(self, settings: DownlinkSettings, target: TargetApplier) -> Downlink:
        """Apply shore commands to `target` (the ship's business database) from now on."""
        self.downlink = Downlink(
            settings, self.state, self.link, RemoteApplier(target, settings.node_id),
            set_health=self._downlink_health, link_failed=self._request_failed,
            retry=self.recovery.schedule(self.backoff), clock=self.clock,
            monotonic=self.monotonic, resender=QueueResender(self.state, self.consumer),
            side=self.side)
        return self.downlink

    def _downlink_health(self, subsystem: Subsystem, state: HealthState, reason: str,
                         detail: str) -> None:
        self._set_health(subsystem, state, reason, detail)

    # ------------------------------------------------------------------ running

    def run(self, until_idle: bool = False, timeout: float | None = None) -> ExitCode:
        """Run until stopped or, with `until_idle`, until nothing more can progress."""
        deadline = None if timeout is None else self.monotonic() + timeout
        self._set_health(Subsystem.TRANSPORT, HealthState.HEALTHY)
        self._set_health(Subsystem.CAPTURE, HealthState.HEALTHY)
        try:
            while not self.stop_event.is_set():
                self.step()
                if until_idle and self.idle():
                    self._final_heartbeat()
                    return ExitCode.BLOCKED if self.stuck() else ExitCode.IDLE
                if deadline is not None and self.monotonic() > deadline:
                    return ExitCode.TIMEOUT
            return ExitCode.IDLE
        except StateStoreError as error:
            log.error("state store failed, stopping without committing further: %s", error)
            self._set_health(Subsystem.DISK, HealthState.BLOCKED,
                             HealthReason.STATE_STORE_FAILED, str(error)[:200], persist=False)
            return ExitCode.BLOCKED

    def stop_on_signals(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("stopping (signal %d)", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def step(self) -> None:
        """One turn: read, send one batch, pull receipts, commit, report — each when due."""
        self.side.collect()
        now = self.monotonic()
        if self.topics.due(now):
            self._refresh_topics(now)
        self.recovery.collect(now)
        if self.node_blocked is None and not self.uploads.probes_link(now):
            self.recovery.probe(self.link, now)  # while the link is down
        self._fetch_config()
        self._intake()
        self._upload()
        self._pull_receipts()
        if self.downlink is not None and self.node_blocked is None:
            self.downlink.step()
        self._commit()
        if self.node_blocked is not None:
            self._probe_identity()
        self._heartbeat()

    def idle(self) -> bool:
        """Caught up with the queue, nothing left to send, no receipt awaited, all committed
        — or the node is blocked and cannot send at all."""
        if self.node_blocked is not None:
            return True
        if self._queue_down is not None or not self.consumer.caught_up() or self.awaiting:
            return False
        if (self.window.has_due(float("inf")) or self.uploads.busy() or self.more_receipts
                or self.side.busy()):
            return False
        if self.downlink is not None and not self.downlink.idle():
            return False
        return not any(wm.commit_due for wm in self._current_watermarks().values())

    def stuck(self) -> bool:
        """Something needs an operator: the node is blocked, or records/partitions are."""
        return (self.node_blocked is not None or bool(self.consumer.blocked_partitions())
                or bool(self.state.blocked_reasons()))

    # ------------------------------------------------------------------ queue

    def _refresh_topics(self, now: float) -> None:
        try:
            new = self.consumer.refresh()
        except QueueUnavailable as error:
            self._queue_unavailable(error)
            return
        finally:
            self.topics.done(now)
        if new:
            log.info("consuming %d new partitions", len(new))
        if not self.consumer.partitions:
            self._set_health(Subsystem.CAPTURE, HealthState.DEGRADED, QueueReason.NO_CDC_TOPICS,
                             "no topic matches the CDC topic pattern")
        else:
            self._set_health(Subsystem.CAPTURE, HealthState.HEALTHY)

    def _intake(self) -> None:
        self.consumer.set_paused(self._full_partitions())
        try:
            recorded = self.consumer.poll(self.settings.poll_records,
                                          self._poll_wait(self.monotonic()))
        except QueueUnavailable as error:
            self._queue_unavailable(error)
            return
        self._queue_down = None
        if recorded.sendable:
            self.window.add(recorded.sendable, recorded.sizes)
        if recorded.awaiting_receipt:
            self.awaiting = self.state.awaits_receipts()
            self.more_receipts = True
        if recorded.new_events or recorded.blocked or recorded.skipped or recorded.rereads:
            self._watermarks.clear()
        if recorded.blocked:
            self._blocked_dirty = True
        self._update_queue_health()

    def _poll_wait(self, now: float) -> float:
        """How long the queue's poll may wait when nothing is there to read: not at all while
        an upload or a receipts page could go now; briefly while answers are on their way."""
        if (self.uploads.can_send(now, self.node_blocked is not None)
                or (not self.side.busy("receipts") and self._receipts_due(now))):
            return 0.0
        if self.uploads.flights or self.side.busy():
            return min(self.settings.idle_poll_seconds, _ANSWER_POLL_SECONDS)
        return self.settings.idle_poll_seconds

    def _full_partitions(self) -> set[PartitionKey]:
        settings, window, partitions = self.settings, self.window, self.consumer.partitions
        count, size = settings.window_per_partition, settings.window_bytes
        if len(window) >= settings.window_total or window.bytes >= settings.window_bytes:
            if (len(window) >= settings.window_total + settings.window_total // _ROOM
                    or window.bytes >= settings.window_bytes + settings.window_bytes // _ROOM):
                return set(partitions)
            # Full: a partition pauses once it holds its share. One that holds less (a CRITICAL
            # rule's topic behind others' backlogs) still reads, so its events can head the
            # next batches (§13.2); the window grows by an eighth at most.
            shares = max(1, len(partitions))
            count = min(count, max(1, settings.window_total // shares))
            size = settings.window_bytes // shares
        watermarks = self._current_watermarks()
        return {key for key in partitions
                if window.count(key) >= count or window.bytes_of(key) >= size
                or (key in watermarks and watermarks[key].open_records
                    >= settings.max_open_per_partition)}

    def _queue_unavailable(self, error: QueueUnavailable) -> None:
        self._queue_down = str(error)
        self._set_health(Subsystem.QUEUE, HealthState.OFFLINE, QueueReason.BROKER_UNREACHABLE,
                         str(error)[:200])
        self.stop_event.wait(_QUEUE_RETRY_SECONDS)

    def _update_queue_health(self) -> None:
        blocked_partitions = self.consumer.blocked_partitions()
        if blocked_partitions:
            reason = next(iter(blocked_partitions.values()))
            self._set_health(Subsystem.QUEUE, HealthState.BLOCKED, reason,
                             f"{len(blocked_partitions)} partitions not consumed")
            return
        if not self._blocked_dirty:
            return
        self._blocked_dirty = False
        reasons = self.state.blocked_reasons()
        if reasons:
            top, _ = reasons.most_common(1)[0]
            # A platform write nobody can prove is an alert of its own (§12).
            reason = (HealthReason.ORIGIN_UNPROVEN if StateReason.ORIGIN_UNPROVEN in reasons
                      else HealthReason.EVENTS_BLOCKED)
            self._set_health(Subsystem.QUEUE, HealthState.BLOCKED, reason,
                             f"{sum(reasons.values())} records blocked, most for {top}")
        else:
            self._set_health(Subsystem.QUEUE, HealthState.HEALTHY)

    def _current_watermarks(self) -> dict[PartitionKey, Watermark]:
        if not self._watermarks:
            self._watermarks = {wm.key: wm for wm in self.state.watermarks()}
        return self._watermarks

    # ------------------------------------------------------------------ upload

    def _may_upload(self) -> bool:
        return self.node_blocked is None and self.upload_retry.due(self.monotonic())

    def _upload(self) -> None:
        self.uploads.step(blocked=self.node_blocked is not None)

    # The pipeline's hooks (PipelineHooks).

    def moved(self, progress: Progress) -> None:
        self._moved(progress)

    def set_health(self, subsystem: Subsystem, state: HealthState, reason: str = "",
                   detail: str = "") -> None:
        self._set_health(subsystem, state, reason, detail)

    def block_node(self, error: LinkError) -> None:
        self._block_node(error)

    def transport_healthy(self) -> None:
        self._transport_healthy()

    def _moved(self, progress: Progress) -> None:
        """Events whose state moved leave the window; receipts are awaited for received ones."""
        self.window.discard(progress.terminal | progress.received | progress.blocked)
        if progress.blocked:
            self._blocked_dirty = True
        if progress.received:
            # While a backlog lasts, receipts are asked at the receipts interval (or sooner
            # while pages of results wait), not after every upload.
            now = self.monotonic()
            self.more_receipts = True
            if not self.uploads.backlog(now):
                self.receipts.due_within(now, self.settings.receipts_after_upload)
        if progress.received or progress.terminal:
            self.awaiting = self.state.awaits_receipts()
        self.meter.confirmed_bytes += progress.terminal_bytes
        self._watermarks.clear()

    def _block_node(self, error: LinkError) -> None:
        self.node_blocked = (error.reason, str(error)[:300])
        delay = self.identity_probe.failed(self.monotonic(), error.retry_after)
        self._blocked_health(error, delay)
        log.error("the shore refused this node (%s, HTTP %s): uploads stop; asking again in"
                  " %.0f s", error.reason, error.status, delay)

    def _probe_identity(self) -> None:
        """A refused node asks again, with backoff, by a heartbeat: the shore may have
        registered, re-keyed or re-enabled it meanwhile. Accepted, everything resumes."""
        if not self.identity_probe.due(self.monotonic()):
            return
        try:
            self.link.heartbeat(self.heartbeat_message())
        except LinkError as error:
            delay = self.identity_probe.failed(self.monotonic(), error.retry_after)
            if error.disposition is Disposition.BLOCK_NODE:
                self.node_blocked = (error.reason, str(error)[:300])
                self._blocked_health(error, delay)
            return
        self.identity_probe.succeeded()
        self.node_blocked = None
        self._transport_healthy()
        log.warning("the shore accepts this node again: uploads resume")

    def _blocked_health(self, error: LinkError, delay: float) -> None:
        self._set_health(Subsystem.TRANSPORT, HealthState.BLOCKED, error.reason,
                         f"refused by the shore (HTTP {error.status}): {str(error)[:200]};"
                         f" asking again in {delay:.0f} s")

    def _transport_healthy(self) -> None:
        """The link works; a clock far from the shore's is still worth an operator's look."""
        offset = getattr(self.link, "clock_offset", None)
        if isinstance(offset, dt.timedelta) and abs(offset) > _CLOCK_SKEW_NOTICE:
            seconds = offset.total_seconds()
            side = "behind" if seconds > 0 else "ahead of"
            self._set_health(Subsystem.TRANSPORT, HealthState.DEGRADED, LinkReason.CLOCK_SKEW,
                             f"the local clock is {abs(seconds):.0f} s {side} the shore's;"
                             " requests are signed in the shore's time")
            return
        self._set_health(Subsystem.TRANSPORT, HealthState.HEALTHY)

    # ------------------------------------------------------------------ receipts

    def _pull_receipts(self) -> None:
        now = self.monotonic()
        # Rejected events keep receipts coming: the shore may replay or skip them later; and
        # so does a page that said more wait, even once no event of this ship awaits one (a
        # restart that read received events again marks more too, and one page may settle
        # them all while it is on its way). While uploads have a backlog, one page per
        # receipts interval (sooner while pages are full); otherwise page after page.
        if self.side.busy("receipts") or not self._receipts_due(now):
            return
        self.receipts.done(now)
        self.more_receipts = False
        cursor, size = self.state.cursor(), self.settings.receipts_page_size
        self.side.start("receipts", lambda: self.link.receipts(cursor, size),
                        self._receipts_page, lambda error: self._request_failed(
                            self.receipts_retry, error, "receipts"))

    def _receipts_due(self, now: float) -> bool:
        return (self.node_blocked is None and self.receipts_retry.due(now)
                and (self.receipts.due(now)
                     or (self.pages_waiting and not self.uploads.backlog(now)))
                and bool(self.awaiting or self.more_receipts
                         or self.state.receipts.shore_rejections()))

    def _receipts_page(self, page: pb.ReceiptsPage) -> None:
        try:
            applied = applied_ranges(page)
        except WireError as error:
            self._request_failed(self.receipts_retry, LinkDown(
                LinkReason.BAD_RESPONSE, f"unreadable receipts: {error}"), "receipts")
            return
        self.receipts_retry.succeeded()
        cursor = page.next_cursor or self.state.cursor()
        self._moved(self.state.receipts.apply_receipts(terminal_results(page), cursor, applied))
        self.pages_waiting = page.has_more
        if page.has_more:
            # More results wait: the next page at once when nothing else waits to go, and
            # soon while uploads go on (on the side thread, beside them), or events the shore
            # has applied would count as open until the partition pauses.
            now = self.monotonic()
            self.more_receipts = True
            self.receipts.due_within(now, 0.0 if not self.uploads.backlog(now)
                                     else self.settings.receipts_after_upload)

    def _request_failed(self, schedule: RetrySchedule, error: LinkError, what: str) -> None:
        if error.disposition is Disposition.BLOCK_NODE:
            self._block_node(error)
            return
        if error.reason == LinkReason.STALLED:  # given up once the link answered again
            log.info("%s request given up after the outage: it goes again", what)
            return
        delay = schedule.failed(self.monotonic(), error.retry_after,
                                link_down=link_is_down(error))
        log.log(schedule.log_level(), "%s request failed (%s); retry %s", what, error.reason,
                schedule.when(delay))

    # ------------------------------------------------------------------ commit

    def _commit(self) -> None:
        now = self.monotonic()
        # Caught up with nothing left to send, the checkpoint goes now, not at the next tick.
        if not self.commits.due(now) and (len(self.window) or not self.consumer.caught_up()):
            return
        self.commits.done(now)
        try:
            committed = self.consumer.commit(self._current_watermarks().values())
        except QueueUnavailable as error:
            self._queue_unavailable(error)
            return
        if committed:
            self._watermarks.clear()
            if self.rules is not None and len(self.rules.generations) > 1:
                self.rules.prune(self._current_watermarks().values())
            if self.settings.retain_offsets:
                self.state.prune(self._current_watermarks().values(),
                                 self.settings.retain_offsets, self.settings.prune_chunk)

    # ------------------------------------------------------------------ sync rules

    def _fetch_config(self) -> None:
        """Ask the shore for this node's rules (at start, and when a heartbeat answer names
        another config version); check them and switch. A failure never blocks the node: the
        rules in force stay, and the config is asked again with backoff."""
        rules, now = self.rules, self.monotonic()
        if (rules is None or not self.config_wanted or self.node_blocked is not None
                or self.side.busy("config") or not self.config_retry.due(now)):
            return
        self.side.start("config", self.link.config, self._config_answered,
                        self._config_failed)

    def _config_failed(self, error: LinkError) -> None:
        delay = self.config_retry.failed(self.monotonic(), error.retry_after,
                                         link_down=link_is_down(error))
        log.warning("config request failed (%s); asking again in %.1f s", error.reason, delay)

    def _config_answered(self, config: pb.ConfigResponse) -> None:
        assert self.rules is not None
        try:
            self.uploads.shore_limits(config.control)
            pacer = getattr(self.link, "pacer", None)
            if pacer is not None:
                pacer.follow_shore(config.control.rate_bytes_per_sec,
                                   config.control.burst_bytes)
            applied = self.rules.apply_config(config, self.clock())
        except (SchemaUnavailable, MaskKeyError) as error:
            delay = self.config_retry.failed(self.monotonic())
            log.warning("offered rules not checked (%s); asking again in %.1f s", error, delay)
            return
        self.config_retry.succeeded()
        self.config_wanted = False
        log.info("config %s applied: %d rules offered, %d failed their checks%s",
                 applied.config_version or "(none)", applied.offered, applied.failed,
                 "" if applied.switched is None
                 else f", switched to generation {applied.switched.number}")

    # ------------------------------------------------------------------ heartbeat

    def _heartbeat(self, force: bool = False) -> None:
        now = self.monotonic()
        if self.node_blocked is not None or not self.heartbeat_retry.due(now) or not (
                force or self.heartbeats.due(now)) or (
                self.side.busy("heartbeat") and not force):
            return
        self.heartbeats.done(now)
        self._check_disk()
        message = self.heartbeat_message()
        self.side.start("heartbeat", lambda: self.link.heartbeat(message),
                        self._heartbeat_answered, lambda error: self._request_failed(
                            self.heartbeat_retry, error, "heartbeat"), wait=force)

    def _heartbeat_answered(self, answer: pb.HeartbeatResponse) -> None:
        self.heartbeat_retry.succeeded()
        shore_time = shore_moment(answer.server_time_micros)
        if self.schedules is not None and shore_time is not None and \
                answer.server_time_micros > 0:
            self.schedules.confirm(shore_time)
        if (self.rules is not None and answer.HasField("config_version")
                and answer.config_version != self.rules.config_version):
            self.config_wanted = True
        if answer.next_interval_seconds:
            self.heartbeats.interval = float(min(max(answer.next_interval_seconds, 5), 3600))

    def heartbeat_message(self) -> pb.Heartbeat:
        ends = self.consumer.end_offsets()
        if ends:
            self.state.set_end_offsets(ends)
        average = self.state.average_bytes()
        backlog = [partition_backlog(wm, self.state.backlog(wm), ends.get(wm.key), average)
                   for wm in self.state.watermarks()]
        counters = getattr(self.link, "counters", None)
        sample = self.meter.sample(self.clock(), getattr(counters, "physical_bytes", 0),
                                   getattr(counters, "active_seconds", 0.0))
        self.state.record_metrics(self.clock())
        rules = self.rules
        return build_heartbeat(self.settings.node_id, self.clock(),
                               self.health.entries.values(), backlog, [sample],
                               "" if rules is None else rules.config_version,
                               () if rules is None else rules.activations(),
                               self.sync_states(), self.settings.timezone)

    def _final_heartbeat(self) -> None:
        self.heartbeat_retry.succeeded()
        self._heartbeat(force=True)

    def _check_disk(self) -> None:
        state, reason, detail = disk_health(self.state.path)
        self._set_health(Subsystem.DISK, state, reason, detail)

    # ------------------------------------------------------------------ health

    def _set_health(self, subsystem: Subsystem, state: HealthState, reason: str = "",
                    detail: str = "", persist: bool = True) -> None:
        if self.health.set(subsystem, state, self.clock(), reason, detail) and persist:
            entry = self.health.get(subsystem)
            if entry is not None:
                self.state.set_health([entry])

    def close(self) -> None:
        self.uploads.close()
        self.side.close()
        self.recovery.close()
        close = getattr(self.link, "close", None)
        if close is not None:
            close()
        if self.downlink is not None:
            self.downlink.applier.target.close()
        self.consumer.queue.close()
        self.state.close()



