"""The link's recovery: probes stay bounded however long the link is down, and the first
success resets every schedule that waited for the link — but not waits the shore asked for."""

from __future__ import annotations

import concurrent.futures
import logging
import random
import re
from collections.abc import Callable

import pytest

from tidesync.domain.backoff import Backoff
from tidesync.ship.retries import BLIP_SECONDS
from tidesync.ship.transport import (
    HttpShoreLink,
    LinkDown,
    LinkReason,
    LinkRecovery,
    ShoreRefused,
    link_is_down,
)


class _Probe:
    def __init__(self, answers: list[bool]) -> None:
        self.answers, self.calls = answers, 0

    def probe(self) -> bool:
        self.calls += 1
        return self.answers.pop(0)


def test_a_working_link_resets_every_schedule_that_waited_for_it() -> None:
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(1))
    upload, receipts, config = (recovery.schedule(Backoff()) for _ in range(3))
    for _ in range(12):  # minutes of outage: each request's own wait has grown long
        upload.failed(0.0, link_down=True)
        receipts.failed(0.0, retry_after=120.0)  # the shore asked for this wait
    config.failed(0.0)  # not the link's fault (the offered rules could not be checked)
    assert not upload.due(0.0) and recovery.down_since == 0.0
    receipts.waits_for_link = False
    heartbeat = recovery.schedule(Backoff())
    heartbeat.succeeded()
    assert upload.due(0.0) and upload.attempt == 0
    assert not receipts.due(0.0) and not config.due(0.0)
    assert recovery.down_since is None


def test_probes_are_bounded_and_a_successful_one_resumes_everything() -> None:
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(2))
    upload = recovery.schedule(Backoff())
    now = 0.0
    for _ in range(20):
        upload.failed(now, link_down=True)
    link = _Probe([False] * 300 + [True])  # about 25 minutes down
    delays = []
    while link.answers:
        if recovery.probe_due(now):
            waited_from = now
            if recovery.probe(link, now):
                break
            delays.append((waited_from, recovery.next_probe - waited_from))
        now += 0.25
    assert delays and all(0.5 <= delay <= 30.0 for _, delay in delays)
    # The first minute down is probed about every second: a short outage costs ~1 s.
    assert all(delay <= 1.0 for at, delay in delays if at < recovery.fast_seconds)
    assert max(delay for _, delay in delays) > 15.0  # later ones grew towards the cap
    assert upload.due(now) and recovery.down_since is None
    assert not recovery.probe(link, now + 100)  # a working link is not probed


def test_only_a_request_without_any_answer_means_the_link_is_down() -> None:
    assert link_is_down(LinkDown(LinkReason.NETWORK_ERROR, "reset"))
    assert link_is_down(LinkDown(LinkReason.TIMEOUT, "slow"))
    assert not link_is_down(LinkDown(LinkReason.RESPONSE_FORGED, "not the shore's"))
    assert not link_is_down(ShoreRefused("HTTP_503", "busy", status=503))


def test_probing_a_shore_nobody_listens_for_fails_quickly() -> None:
    link = HttpShoreLink("http://127.0.0.1:9", "n", bytes(32), clock=lambda: None,  # type: ignore[arg-type, return-value]
                         probe_timeout=2.0)
    assert link.probe() is False
    assert link.counters.connections_opened == 0


def test_the_log_line_says_a_wait_for_the_link_ends_when_it_answers() -> None:
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(3))
    upload, config = recovery.schedule(Backoff()), recovery.schedule(Backoff())
    for _ in range(12):
        delay = upload.failed(0.0, link_down=True)
    assert delay > 30.0  # the request's own backoff has grown past the probe's cap
    assert upload.when(delay) == f"once the link answers, at the latest in {delay:.1f} s"
    refused = config.failed(0.0, retry_after=120.0, link_down=True)  # the shore asked
    assert config.when(refused) == f"in {refused:.1f} s"


def test_an_outage_is_one_warning_not_one_per_failed_request(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(5), monotonic=lambda: clock[0])
    upload, receipts = recovery.schedule(Backoff()), recovery.schedule(Backoff())
    levels = []
    for turn in range(40):  # ten seconds of failures, several requests a second
        clock[0] = turn * 0.25
        for schedule in (upload, receipts):
            schedule.failed(clock[0], link_down=True)
            levels.append(schedule.log_level())
    assert levels[0] == logging.WARNING  # the link went down: said once
    assert set(levels[1:]) == {logging.DEBUG}
    refused = upload.failed(clock[0], retry_after=60.0)  # the shore itself answered
    assert refused >= 60.0 and upload.log_level() == logging.WARNING
    with caplog.at_level(logging.INFO, logger="tidesync.ship.retries"):
        clock[0] = 12.0
        receipts.succeeded()  # a request, not a probe, found the link working
    assert [r.getMessage() for r in caplog.records] == [
        "the shore answers again after 12 s without a link: requests resume"]
    upload.failed(13.0, link_down=True)  # a new outage is told again
    assert upload.log_level() == logging.WARNING


def test_failed_probes_are_told_ever_less_often(caplog: pytest.LogCaptureFixture) -> None:
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(6))
    recovery.schedule(Backoff()).failed(0.0, link_down=True)
    link = _Probe([False] * 40 + [True])
    now = 0.0
    with caplog.at_level(logging.DEBUG, logger="tidesync.ship.retries"):
        while link.answers:
            recovery.probe(link, now)
            now += 0.25
    told = [r for r in caplog.records if r.levelno >= logging.INFO]
    failed = [r.getMessage() for r in told if "unreachable for" in r.getMessage()]
    assert len(failed) == 6  # probes 1, 2, 4, 8, 16, 32 of 40
    assert len([r for r in caplog.records if "unreachable for" in r.getMessage()]) == 40
    seconds = [int(re.fullmatch(r"the shore has been unreachable for (\d+) s; the next probe"
                                r" in \d+\.\d s", line).group(1)) for line in failed]  # type: ignore[union-attr]
    assert seconds == sorted(seconds) and seconds[-1] > 20  # how long, as it grows
    assert told[-1].getMessage().startswith("the shore answers again after ")
    assert told[-1].levelno == logging.WARNING


def test_the_end_of_a_blip_is_not_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(8), monotonic=lambda: clock[0])
    upload = recovery.schedule(Backoff())
    with caplog.at_level(logging.INFO, logger="tidesync.ship.retries"):
        upload.failed(clock[0], link_down=True)  # one connection reset
        clock[0] += 0.4
        upload.succeeded()  # the next request gets through at once
        upload.failed(clock[0], link_down=True)  # an outage
        clock[0] += BLIP_SECONDS
        upload.succeeded()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "the shore answers again after 0 s without a link: requests resume"),
        (logging.WARNING, "the shore answers again after 5 s without a link: requests resume")]


# ----------------------------------------------------------------------------- a silent link


class ManualProber(concurrent.futures.Executor):
    """Runs each probe when the test says so, as a thread would finish it later."""

    def __init__(self) -> None:
        self.waiting: list[tuple[concurrent.futures.Future[bool], Callable[[], bool]]] = []

    def submit(self, fn: Callable[..., bool], /, *args: object, **kwargs: object
               ) -> concurrent.futures.Future[bool]:
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self.waiting.append((future, lambda: fn(*args, **kwargs)))
        return future

    def finish(self) -> None:
        for future, call in self.waiting:
            future.set_result(call())
        self.waiting.clear()


def _silent_recovery(answers: list[bool]) -> tuple[LinkRecovery, _Probe, ManualProber, list[float]]:
    prober = ManualProber()
    recovery = LinkRecovery(Backoff(0.5, 30.0), random.Random(3), prober=prober)
    returned: list[float] = []
    recovery.on_return.append(returned.append)
    return recovery, _Probe(answers), prober, returned


def test_requests_without_answers_are_checked_by_a_probe_and_a_silent_link_is_down() -> None:
    recovery, link, prober, returned = _silent_recovery([False, False, True])
    recovery.suspect(link, 10.0, since=4.0)
    recovery.suspect(link, 10.5, since=4.0)  # one check at a time
    assert len(prober.waiting) == 1 and recovery.down_since is None
    prober.finish()  # no answer: the link went silent when the answers stopped
    assert not recovery.collect(13.0)
    assert recovery.down_since == 4.0 and recovery.suspected_since is None
    # Probes now go side by side, each on its own thread, while the link stays down.
    now = 13.0
    while len(prober.waiting) < 2:
        recovery.probe(link, now)
        now += 0.1
    first_sent, second_sent = (sent for _, sent in recovery._probes)
    prober.waiting[0][0].set_result(link.probe())  # the first one sent: still no answer
    prober.waiting.pop(0)
    assert not recovery.collect(now) and not returned
    prober.finish()  # one sent after the link came back gets through
    assert recovery.collect(now + 1.0)
    assert returned == [second_sent] and first_sent < second_sent
    assert recovery.down_since is None


def test_a_probe_that_gets_through_during_the_check_means_the_requests_are_only_slow() -> None:
    recovery, link, prober, returned = _silent_recovery([True])
    upload = recovery.schedule(Backoff())
    recovery.suspect(link, 10.0, since=4.0)
    prober.finish()
    assert not recovery.collect(10.7)
    assert recovery.down_since is None and recovery.suspected_since is None
    assert upload.due(10.7) and not returned  # nothing was given up


def test_requests_that_end_a_refusing_outage_give_nothing_up() -> None:
    recovery, _, _, returned = _silent_recovery([])
    upload = recovery.schedule(Backoff())
    upload.failed(0.0, link_down=True)
    upload.succeeded()  # a request got through: no probe says since when the link works
    assert recovery.down_since is None and not returned


def test_a_check_without_an_answer_in_time_means_down_and_its_late_answer_means_back() -> None:
    recovery, link, prober, returned = _silent_recovery([True])
    recovery.suspect(link, 10.0, since=6.0)
    assert not recovery.collect(10.0 + recovery.check_seconds / 2)
    assert recovery.down_since is None  # not yet: the check may still answer in time
    assert not recovery.collect(10.0 + recovery.check_seconds + 0.1)
    assert recovery.down_since == 6.0
    prober.finish()  # it got through at its retransmission, after the link came back
    assert recovery.collect(20.0)
    assert returned == [10.0] and recovery.down_since is None


def test_a_shore_that_stays_slow_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    recovery, link, prober, returned = _silent_recovery([True] * 5)
    with caplog.at_level(logging.DEBUG, logger="tidesync.ship"):
        for check in range(5):  # every few seconds the uploads are overdue again
            recovery.suspect(link, 10.0 * check, since=10.0 * check - 4)
            prober.finish()
            recovery.collect(10.0 * check + 0.5)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, text in lines if "probing the link" in text] == \
        [logging.INFO] + [logging.DEBUG] * 4
    assert [level for level, text in lines if "slow to answer" in text] == \
        [logging.INFO] + [logging.DEBUG] * 4
    assert recovery.down_since is None and not returned


def test_after_a_silent_outage_a_request_getting_through_gives_up_what_is_stuck() -> None:
    recovery, link, prober, returned = _silent_recovery([False])
    recovery.monotonic = lambda: 20.0
    upload = recovery.schedule(Backoff())
    recovery.suspect(link, 10.0, since=4.0)
    prober.finish()
    recovery.collect(13.5)
    assert recovery.down_since == 4.0
    upload.succeeded()  # a request's retransmission got through before any probe did
    # What went before a few seconds ago is stuck behind the retransmissions' backoff.
    assert returned == [20.0 - recovery.check_seconds] and recovery.down_since is None
    recovery.lost(30.0)  # an outage of refusals: the requests failed, nothing is stuck
    upload.succeeded()
    assert returned == [20.0 - recovery.check_seconds]
