"""How requests to the shore are retried: one schedule per kind of request (full jitter,
Retry-After as a floor), and the link's recovery that probes while no request gets an answer
and makes every waiting request due at once when one does.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from tidesync.domain.backoff import Backoff

log = logging.getLogger(__name__)


BLIP_SECONDS = 5.0
"""A link down for less than this was a blip: its end is logged at info level, not as a
warning."""


@dataclass
class RetrySchedule:
    """When one kind of request may be tried again (full jitter, Retry-After floor).

    The client loop never sleeps inside a request: it asks `due(now)` each turn, so reading
    the queue goes on while the link waits. Network failures retry for ever (a ship can be
    offline for months) with the delay capped at 5 minutes; a schedule that belongs to a
    `LinkRecovery` is cut short as soon as any request or probe gets through again."""

    backoff: Backoff = field(default_factory=Backoff)
    rng: random.Random = field(default_factory=random.SystemRandom)
    attempt: int = 0
    not_before: float = 0.0
    recovery: LinkRecovery | None = None
    waits_for_link: bool = False
    """The last failure was the network's (no answer, no Retry-After): a working link ends
    the wait. Waits the shore asked for, or for other causes, are kept."""
    link_known_down: bool = False
    """The last failure was the network's while the link was already known to be down: it
    says nothing an operator has not been told (see `log_level`)."""

    def due(self, now: float) -> bool:
        return now >= self.not_before

    def failed(self, now: float, retry_after: float | None = None, *,
               link_down: bool = False) -> float:
        """Record a failure; returns the delay before the next try. `link_down`: the request
        got no answer, so the link's recovery starts probing."""
        self.attempt += 1
        delay = self.backoff.delay(self.attempt, self.rng.random(), retry_after)
        self.not_before = now + delay
        self.waits_for_link = link_down and retry_after is None
        self.link_known_down = (link_down and self.recovery is not None
                                and self.recovery.down_since is not None)
        if link_down and self.recovery is not None:
            self.recovery.lost(now)
        return delay

    def log_level(self) -> int:
        """The level to log the last failure at: a warning, except for the failures of a link
        already known to be down. While an outage lasts, the requests that wait for the link
        (a batch's fate question several times a second in the first minute) would otherwise
        each log a warning; the first failure says the link went down, and the recovery says
        when it answers again and, ever less often, that it still does not."""
        return logging.DEBUG if self.link_known_down else logging.WARNING

    def when(self, delay: float) -> str:
        """The next try, as a log line says it: a wait for the link ends when a probe gets
        through, however long the backoff has grown."""
        if self.waits_for_link and self.recovery is not None:
            return f"once the link answers, at the latest in {delay:.1f} s"
        return f"in {delay:.1f} s"

    def succeeded(self) -> None:
        """The request got through: this schedule restarts, and so does every schedule of the
        same link that waited only for the link to come back."""
        self.reset()
        if self.recovery is not None:
            self.recovery.works()

    def reset(self) -> None:
        self.attempt, self.not_before, self.waits_for_link = 0, 0.0, False
        self.link_known_down = False


@dataclass
class LinkRecovery:
    """The retry schedules of one link, and the probe that watches it while it is down.

    A request without an answer marks the link down; from then on a cheap probe is due every
    `probe_backoff`'s first delay (about 1 s) while the link has been down for less than
    `fast_seconds`, so a short outage costs at most about that once the link is back. Longer
    outages are probed ever less often, the interval doubling with each doubling of the time
    down, up to the cap (default 30 s), however long each request's own backoff has grown. The
    first success — a probe's or any request's — resets every schedule that waited for the
    link, so uploads resume at once instead of minutes after the link came back."""

    probe_backoff: Backoff = field(default_factory=lambda: Backoff(1.0, 30.0))
    rng: random.Random = field(default_factory=random.SystemRandom)
    schedules: list[RetrySchedule] = field(default_factory=list)
    fast_seconds: float = 60.0
    down_since: float | None = None
    probes: int = 0
    next_probe: float = 0.0
    monotonic: Callable[[], float] | None = None
    """The clock `down_since` is on, to say how long the link was down when a request (not
    a probe) finds it working again; None: not said."""
    prober: concurrent.futures.Executor | None = None
    """Runs probes off the client's thread, several side by side (`max_probes`): on a link
    that drops packets a probe gets no answer until its timeout, and one sent after the link
    came back must not wait for those sent before. None: each probe runs on the client's
    thread and ends before the next starts (links without a round trip)."""
    max_probes: int = 16
    """Enough, at the fast interval, to keep one sent within the last few seconds while the
    earlier ones wait out their timeout (5 s on the HTTP link): on a link that drops packets
    only a probe sent after it came back (or just before) gets through soon."""
    on_return: list[Callable[[float], None]] = field(default_factory=list)
    """Called when the link answers again after it was down (a probe got through, or anything
    after an outage found by silence) with the time requests still on their way from before
    are stuck (see `HttpShoreLink.abandon`): when the probe was sent; when a request got
    through, `check_seconds` before (one sent into the outage since then resumes at its
    first retransmissions, soon)."""
    suspected_since: float | None = None
    """Requests have had no answer since then and a probe checks whether the link went silent
    (see `suspect`); None: no check under way."""
    check_seconds: float = 3.0
    """How long that probe may take: one without an answer by then says the link is down
    (a probe sent into a silent link gets through only at its retransmissions, if ever)."""
    _check_sent: float = 0.0
    _slow_checks: int = 0
    """Checks in a row that found the link working (the shore slow); 0 after an outage."""
    _went_silent: bool = False
    """The link is down since the answers stopped (`suspect`), not by refusals."""
    _probes: list[tuple[concurrent.futures.Future[bool], float]] = field(default_factory=list)

    def schedule(self, backoff: Backoff) -> RetrySchedule:
        """A new retry schedule that this recovery resets."""
        schedule = RetrySchedule(backoff, self.rng, recovery=self)
        self.schedules.append(schedule)
        return schedule

    def lost(self, now: float) -> None:
        if self.down_since is None:
            self.down_since, self.probes = now, 0
            self.next_probe = now + self.probe_backoff.probe_delay(1, self.rng.random())

    def probe_due(self, now: float) -> bool:
        return self.down_since is not None and now >= self.next_probe

    def probe(self, link: object, now: float) -> bool:
        """Probe `link` if the link is down and a probe is due; True when it answered (every
        schedule that waited for it is then due at once). Links without a probe (fakes,
        benchmarks) are left to their requests' own schedules. With a `prober`, the probe
        goes on its thread and a later call (or `collect`) sees its answer."""
        probe = getattr(link, "probe", None)
        if probe is None:
            return False
        if self.prober is not None:
            if self.collect(now):
                return True
            if self.probe_due(now) and len(self._probes) < self.max_probes:
                self._launch(probe, now)
                self.probe_failed(now)  # the next probe's time, unless this one answers
            return False
        if not self.probe_due(now):
            return False
        if not probe():
            self.probe_failed(now)
            return False
        self.works(now)
        return True

    def suspect(self, link: object, now: float, since: float) -> None:
        """Requests on their way have had no answer since `since`, longer than they should
        take: a link that drops packets fails no request until its timeout, so a probe checks
        it. If the probe gets no answer, the link is down since `since`; if it does, the
        requests are just slow. Only with a `prober`, and one check at a time."""
        probe = getattr(link, "probe", None)
        if (probe is None or self.prober is None or self.down_since is not None
                or self.suspected_since is not None):
            return
        self.suspected_since, self._check_sent = since, now
        # A shore that is only slow is told once, not at every check while it stays slow.
        log.log(logging.DEBUG if self._slow_checks else logging.INFO,
                "no answer from the shore for %.0f s: probing the link", now - since)
        self._launch(probe, now)

    def collect(self, now: float) -> bool:
        """Take the answers of the probes that ended; True when one found the link working
        again after it was down."""
        answered = False
        for future, sent in [entry for entry in self._probes if entry[0].done()]:
            self._probes.remove((future, sent))
            try:
                works = future.result()
            except Exception:  # noqa: BLE001 - a probe that broke answered nothing
                works = False
            if works:
                if self.down_since is not None:
                    self.works(now, up_at=sent)
                    answered = True
                elif self.suspected_since is not None:
                    self._slow_checks += 1
                    log.log(logging.INFO if self._slow_checks == 1 else logging.DEBUG,
                            "the link works: the shore is slow to answer")
                self.suspected_since = None
            elif self.suspected_since is not None and self.down_since is None:
                self._silent(now)
        if self.suspected_since is not None and now - self._check_sent > self.check_seconds:
            self._silent(now)  # the check's probe may still get through: then it is back
        return answered

    def _silent(self, now: float) -> None:
        assert self.suspected_since is not None
        log.warning("the shore has not answered for %.0f s, nor a probe: the link is down",
                    now - self.suspected_since)
        self.lost(self.suspected_since)
        self.suspected_since, self._went_silent = None, True

    def close(self) -> None:
        if self.prober is not None:
            self.prober.shutdown(wait=False, cancel_futures=True)

    def _launch(self, probe: Callable[[], bool], now: float) -> None:
        assert self.prober is not None
        self._probes.append((self.prober.submit(probe), now))

    def log_level(self) -> int:
        """The level of the line `probe_failed` logs: info for the 1st, 2nd, 4th, 8th … probe
        of an outage, debug for the others (probes are due every second or so in the first
        minute down)."""
        probes = self.probes
        return logging.INFO if probes & (probes - 1) == 0 else logging.DEBUG

    def probe_failed(self, now: float) -> float:
        """Record a failed probe (or one going out now that the link is known down: a cut
        upload's fate question); returns the delay before the next one."""
        self.probes += 1
        delay = self.probe_backoff.probe_delay(self._attempt(now), self.rng.random())
        self.next_probe = now + delay
        down_since = now if self.down_since is None else self.down_since
        log.log(self.log_level(), "the shore has been unreachable for %.0f s; the next probe"
                " in %.1f s", now - down_since, delay)
        return delay

    def _attempt(self, now: float) -> int:
        """The probe backoff's attempt number for the time the link has been down."""
        down_for = now - (self.down_since if self.down_since is not None else now)
        if down_for < self.fast_seconds:
            return 1
        return 2 + int(math.log2(down_for / self.fast_seconds))

    def works(self, now: float | None = None, up_at: float | None = None) -> None:
        """Something got through: the link works (`now`: when, to say how long it was down;
        `up_at`: when a probe that got through was sent, to give up what is stuck from
        before)."""
        if now is None and self.monotonic is not None:
            now = self.monotonic()
        if self.down_since is not None:
            self._slow_checks = 0
            cutoff = up_at if up_at is not None else (
                None if now is None or not self._went_silent else now - self.check_seconds)
            if cutoff is not None:
                for returned in self.on_return:
                    returned(cutoff)
            if now is None:
                log.warning("the shore answers again: requests resume")
            else:
                # A blip (one reset connection) was told by the request it failed; only the
                # end of an outage is worth a warning of its own.
                down_for = now - self.down_since
                log.log(logging.WARNING if down_for >= BLIP_SECONDS else logging.INFO,
                        "the shore answers again after %.0f s without a link: requests resume",
                        down_for)
        self.down_since, self.probes, self._went_silent = None, 0, False
        for schedule in self.schedules:
            if schedule.waits_for_link:
                schedule.reset()


def link_recovery(link: object, probe_backoff: Backoff, rng: random.Random,
                  monotonic: Callable[[], float]) -> LinkRecovery:
    """The recovery of a client's link: probes on threads of their own for a link with a
    round trip, and requests stuck since the link went silent given up once it answers."""
    remote = bool(getattr(link, "remote", False))
    recovery = LinkRecovery(probe_backoff, rng, monotonic=monotonic, prober=(
        concurrent.futures.ThreadPoolExecutor(LinkRecovery.max_probes,
                                              thread_name_prefix="ship-probe")
        if remote else None))
    abandon = getattr(link, "abandon", None)
    if abandon is not None:
        def give_up_stuck(cutoff: float) -> None:
            # What is still on its way from before waits for the kernel's retransmissions:
            # it goes again on new connections.
            count = abandon(cutoff)
            if count:
                log.info("%d requests stuck since the link went silent are given up and go"
                         " again", count)

        recovery.on_return.append(give_up_stuck)
    return recovery
