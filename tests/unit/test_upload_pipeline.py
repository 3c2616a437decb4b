"""The upload pipeline: requests side by side, sized by the measured goodput; a batch whose
answer was lost is asked after and not sent again; one the shore never got goes again with the
same id and body; a shore that cannot tell gets the same batch again."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clocks import ManualClock
from tests.unit.test_link_recovery import ManualProber
from tests.unit.test_ship_state import NODE, event_record
from tidesync.domain.backoff import Backoff
from tidesync.ingress.answers import compact_answer
from tidesync.ship.batcher import OutgoingBatch, SendWindow
from tidesync.ship.client_settings import ClientSettings
from tidesync.ship.pace import LinkPace, PaceSettings
from tidesync.ship.retries import LinkRecovery, RetrySchedule
from tidesync.ship.state import Progress, SQLiteShipState
from tidesync.ship.telemetry import HealthState, Subsystem
from tidesync.ship.transport import (
    BatchUnknown,
    LinkDown,
    LinkError,
    LinkReason,
    ShoreRefused,
)
from tidesync.ship.uploader import UploadPipeline
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb


class FakeShore:
    """Keeps what arrived by event id and the answers by batch id; `lose` answers go missing
    after the batch arrived, `drop` batches never arrive."""

    def __init__(self, *, lose: int = 0, drop: int = 0, fate: bool = True,
                 keep_part: bool = False, forget: int = 0) -> None:
        self.lose, self.drop, self.knows_fate = lose, drop, fate
        self.keep_part, self.forget = keep_part, forget
        self.uploads: list[OutgoingBatch] = []
        self.fates: list[uuid.UUID] = []
        self.stored: set[bytes] = set()
        self.answers: dict[uuid.UUID, pb.UploadBatchResponse] = {}
        self.kept: dict[uuid.UUID, int] = {}
        """The first bytes of a dropped batch's body the shore kept (`keep_part`)."""

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        self.uploads.append(batch)
        if batch.resume_from and (self.forget or self.kept.pop(batch.batch_id, None)
                                  != batch.resume_from):
            self.forget -= 1
            raise ShoreRefused("RESUME_UNKNOWN", "no part kept", status=409)
        if self.drop:
            self.drop -= 1
            if self.keep_part:  # cut mid-body: the shore keeps the first half
                self.kept[batch.batch_id] = len(batch.body) // 2
                error = LinkDown(LinkReason.NETWORK_ERROR, "reset while writing the body")
                error.body_cut = True
                raise error
            raise _lost("reset while sending")
        raw = codec.decompress_bytes(batch.body, 1 << 24, 1 << 26)
        message = codec.open_batch(codec.compress_bytes(raw), 1 << 24, 1 << 26)[1]
        full = pb.UploadBatchResponse(batch_id=message.batch_id)
        for wire in message.events:
            self.stored.add(wire.event_id)
            full.statuses.add(event_id=wire.event_id, status=pb.RECEIVED)
        answer = compact_answer(message, full)
        self.answers[batch.batch_id] = answer
        if self.lose:
            self.lose -= 1
            raise _lost("reset while the answer came back")
        return answer

    def __getattr__(self, name: str) -> object:
        if name == "batch_fate" and self.knows_fate:
            return self._fate
        raise AttributeError(name)

    def _fate(self, batch_id: uuid.UUID, body: bytes | None = None
              ) -> pb.UploadBatchResponse | BatchUnknown | None:
        self.fates.append(batch_id)
        if batch_id in self.kept and body is not None:
            return BatchUnknown(self.kept[batch_id])
        return self.answers.get(batch_id)


def _lost(message: str) -> LinkDown:
    error = LinkDown(LinkReason.NETWORK_ERROR, message)
    error.answer_lost = True
    return error


class Hooks:
    def __init__(self, window: SendWindow) -> None:
        self.window = window
        self.received: set[uuid.UUID] = set()

    def moved(self, progress: Progress) -> None:
        self.window.discard(progress.terminal | progress.received | progress.blocked)
        self.received |= progress.received

    def set_health(self, subsystem: Subsystem, state: HealthState, reason: str = "",
                   detail: str = "") -> None:
        pass

    def block_node(self, error: LinkError) -> None:
        raise AssertionError(f"blocked: {error}")

    def transport_healthy(self) -> None:
        pass


@pytest.fixture
def state(tmp_path: Path) -> Iterator[SQLiteShipState]:
    store = SQLiteShipState(tmp_path / "ship.sqlite", NODE, "group-1")
    yield store
    store.close()


def pipeline(state: SQLiteShipState, link: object, clock: ManualClock, events: int = 30,
             slots: int = 1) -> tuple[UploadPipeline, Hooks, list[uuid.UUID]]:
    recorded = state.record([event_record(o, o) for o in range(events)], 0)
    window = SendWindow()
    window.add(recorded.sendable, recorded.sizes)
    hooks = Hooks(window)
    settings = ClientSettings(node_id=NODE, uploads_in_flight=slots)
    uploads = UploadPipeline(settings, state, window, link, RetrySchedule(Backoff(1.0, 4.0)),  # type: ignore[arg-type]
                             hooks, backoff=Backoff(1.0, 4.0), random=lambda: 0.5,
                             clock=clock, monotonic=clock.monotonic)
    return uploads, hooks, [e.event_id for e in recorded.sendable]


def run(uploads: UploadPipeline, clock: ManualClock, turns: int = 20) -> None:
    for _ in range(turns):
        uploads.step(blocked=False)
        clock.advance(5.0)


def test_a_lost_answer_is_asked_for_and_the_batch_is_not_sent_again(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), FakeShore(lose=1)
    uploads, hooks, ids = pipeline(state, shore, clock)
    run(uploads, clock)
    assert hooks.received == set(ids)
    assert len(shore.uploads) == 1
    assert shore.fates == [shore.uploads[0].batch_id]
    assert state.state_counts() == {"RECEIVED": len(ids)}


def test_a_batch_the_shore_never_got_goes_again_with_its_id_and_body(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), FakeShore(drop=1)
    uploads, hooks, ids = pipeline(state, shore, clock)
    run(uploads, clock)
    first, again = shore.uploads
    assert (again.batch_id, again.body) == (first.batch_id, first.body)
    assert shore.fates == [first.batch_id]
    assert hooks.received == set(ids)


def test_a_batch_cut_mid_body_goes_on_with_the_rest_the_shore_lacks(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), FakeShore(drop=1, keep_part=True)
    uploads, hooks, ids = pipeline(state, shore, clock)
    run(uploads, clock)
    first, rest = shore.uploads
    assert (rest.batch_id, rest.body) == (first.batch_id, first.body)
    assert (first.resume_from, rest.resume_from) == (0, len(first.body) // 2)
    assert shore.fates == [first.batch_id]
    assert hooks.received == set(ids)


def test_a_resume_the_shore_refuses_sends_the_whole_batch(state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), FakeShore(drop=1, keep_part=True, forget=1)
    uploads, hooks, ids = pipeline(state, shore, clock)
    run(uploads, clock)
    first, rest, whole = shore.uploads
    assert rest.resume_from == len(first.body) // 2 and whole.resume_from == 0
    assert whole.body == first.body
    assert hooks.received == set(ids)  # and the node was never blocked


def test_a_shore_that_keeps_no_answers_gets_the_same_batch_again(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), FakeShore(lose=1, fate=False)
    uploads, hooks, ids = pipeline(state, shore, clock)
    run(uploads, clock)
    first, again = shore.uploads
    assert (again.batch_id, again.body) == (first.batch_id, first.body)
    assert hooks.received == set(ids)


class DownShore(FakeShore):
    """Its first answer is lost, then nothing gets through for `down` fate questions."""

    def __init__(self, down: int) -> None:
        super().__init__(lose=1)
        self.down = down

    def _fate(self, batch_id: uuid.UUID, body: bytes | None = None
              ) -> pb.UploadBatchResponse | BatchUnknown | None:
        if self.down:
            self.down -= 1
            raise LinkDown(LinkReason.NETWORK_ERROR, "connection refused")
        return super()._fate(batch_id, body)


def test_an_outage_is_one_warning_however_often_the_lost_batch_is_asked_after(
        state: SQLiteShipState, caplog: pytest.LogCaptureFixture) -> None:
    clock, shore = ManualClock(), DownShore(down=25)
    uploads, hooks, ids = pipeline(state, shore, clock)
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(7), monotonic=clock.monotonic)
    uploads.retry = recovery.schedule(Backoff(1.0, 300.0))
    with caplog.at_level(logging.DEBUG, logger="tidesync.ship"):
        for _ in range(200):  # the fate question is the link's probe, about once a second
            uploads.step(blocked=False)
            clock.advance(0.25)
    assert hooks.received == set(ids) and len(shore.uploads) == 1
    assert shore.fates == [shore.uploads[0].batch_id] and shore.down == 0  # 25 failed before
    failures = [r for r in caplog.records if "failed (NETWORK_ERROR)" in r.getMessage()]
    assert len(failures) == 26  # the upload whose answer was lost, then 25 fate questions
    assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 25
    # The fate questions were the link's probes: told at info level ever less often.
    down = [r for r in caplog.records if "unreachable for" in r.getMessage()]
    assert [r.levelno for r in down].count(logging.INFO) == 5  # probes 1, 2, 4, 8, 16 of 25
    assert all(r.levelno in (logging.INFO, logging.DEBUG) for r in down)
    back = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert len(back) == 1 and back[0].startswith("the shore answers again after ")


class GatedShore(FakeShore):
    """Holds the first uploads until two are waiting side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=30)
        self.lock = threading.Lock()
        self.active = self.peak = 0

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            gated = len(self.uploads) < 2
            answer = super().upload(batch)
        if gated:
            self.barrier.wait()
        with self.lock:
            self.active -= 1
        return answer


def test_two_uploads_go_side_by_side(state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), GatedShore()
    uploads, hooks, ids = pipeline(state, shore, clock, events=40, slots=2)
    # One event a batch.
    uploads.pace = LinkPace(PaceSettings(initial_bytes=1, min_bytes=1, max_bytes=1))
    try:
        while hooks.received != set(ids):
            uploads.step(blocked=False)
            for flight in list(uploads.flights):
                flight.future.result(timeout=30)
    finally:
        uploads.close()
    assert shore.peak == 2  # the first two were in flight together
    assert len(shore.uploads) == len(ids)


def test_requests_carry_about_a_second_of_the_measured_goodput() -> None:
    pace = LinkPace(PaceSettings(request_seconds=1.0, initial_bytes=64_000, min_bytes=1_000,
                                 max_bytes=10_000_000))
    assert pace.request_bytes() == 64_000
    now = 100.0
    for _ in range(20):  # 128 kB answered per second of busy link, 0.6 s round trip
        pace.started(128_000, now)
        pace.started(128_000, now)
        now += 2.0
        pace.ended(128_000, now - 0.6, 1.6, answered=True)
        pace.ended(128_000, now, 2.0, answered=True)
    assert not pace.starting  # the goodput stopped rising
    assert 128_000 <= pace.request_bytes() <= 200_000  # a second of it, a quarter more
    assert 0.3 < pace.rtt() < 0.9
    pace.started(pace.request_bytes(), now)
    assert pace.may_start(2)
    pace.started(pace.request_bytes(), now)
    assert not pace.may_start(2) and pace.may_start(3)  # the slots decide


def _link(pace: LinkPace, rate: float, rtt: float, seconds: float) -> float:
    """Drive `pace` over a link of `rate` bytes/s and `rtt`, two requests side by side
    sharing it; returns the goodput of the last ten seconds."""
    now, answered = 0.0, []
    while now < seconds:
        size = pace.request_bytes()
        pace.started(size, now)
        pace.started(size, now)
        took = rtt + 2 * size / rate
        now += took
        pace.ended(size, now, took, answered=True)
        pace.ended(size, now, took, answered=True)
        answered.append((now, 2 * size))
    recent = [size for at, size in answered if at > seconds - 10]
    return sum(recent) / 10


def test_small_first_requests_grow_until_the_link_is_full() -> None:
    # A goodput measured on small requests is the ship's, not the link's: the size doubles
    # while the goodput still rises, so it ends near the link's rate, not the first sample's.
    pace = LinkPace(PaceSettings(request_seconds=1.0, initial_bytes=16_000, min_bytes=1_000,
                                 max_bytes=10_000_000))
    # The start ends early (an answer took max_request_seconds); the settled pace, sized by the
    # best goodput measured, takes the rest of the way within a minute or two.
    goodput = _link(pace, rate=131_072, rtt=0.6, seconds=120)
    assert not pace.starting
    assert goodput > 0.7 * 131_072
    # …and no request carries more than max_request_seconds of link time.
    assert pace.request_bytes() <= 131_072 * pace.settings.max_request_seconds * 1.25


def test_a_fixed_size_would_not_fill_the_link() -> None:
    # The control: requests kept at the first size leave most of the link idle.
    pace = LinkPace(PaceSettings(request_seconds=1.0, initial_bytes=16_000, min_bytes=16_000,
                                 max_bytes=16_000))
    assert _link(pace, rate=131_072, rtt=0.6, seconds=60) < 0.5 * 131_072


class HeldFates(FakeShore):
    """Answers the questions what became of a batch only once `release` is set."""

    def __init__(self) -> None:
        super().__init__(lose=3)
        self.release = threading.Event()

    def _fate(self, batch_id: uuid.UUID, body: bytes | None = None
              ) -> pb.UploadBatchResponse | None:
        assert self.release.wait(30)
        return super()._fate(batch_id)


def test_after_an_outage_every_cut_batch_s_question_is_a_probe_and_none_is_doubled(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), HeldFates()
    uploads, hooks, ids = pipeline(state, shore, clock, events=3, slots=3)
    recovery = LinkRecovery(Backoff(1.0, 30.0), random.Random(4))
    uploads.retry = recovery.schedule(Backoff(60.0, 300.0))  # its own wait grows long
    uploads.pace = LinkPace(PaceSettings(initial_bytes=1, min_bytes=1, max_bytes=1))
    try:
        uploads.step(blocked=False)  # three uploads side by side; every answer is lost
        for flight in list(uploads.flights):
            with contextlib.suppress(LinkError):
                flight.future.result(timeout=30)
        uploads.step(blocked=False)
        assert len(uploads.held) == 3 and recovery.down_since is not None
        assert uploads.probes_link()  # the client sends no probe of its own
        clock.advance(1.0)  # the link's probe is due, the uploads' own retry is not
        uploads.step(blocked=False)
        # All three questions went in the probe's turn, and while they are on their way the
        # client still needs no other probe.
        assert [flight.asks_fate for flight in uploads.flights] == [True, True, True]
        assert uploads.probes_link()
        # Unanswered for longer than a probe may take: stuck on a link that drops packets
        # (no refusal comes), so the client's own probes watch the link again.
        clock.advance(recovery.check_seconds + 0.1)
        assert not uploads.probes_link()
        shore.release.set()
        for flight in list(uploads.flights):
            flight.future.result(timeout=30)
        uploads.step(blocked=False)
    finally:
        uploads.close()
    assert sorted(shore.fates) == sorted(batch.batch_id for batch in shore.uploads)
    assert len(shore.uploads) == 3  # nothing was sent twice
    assert hooks.received == set(ids)


def _started_sizes(pace: LinkPace, slots: int, rate: float, rtt: float,
                   seconds: float) -> tuple[list[int], float]:
    """Drive `pace` with `slots` requests in flight over one link of `rate` bytes/s that
    sends their bytes one after another, each answered `rtt` after its last byte left;
    returns the size of every request started and the goodput of the last ten seconds."""
    now = link_free = 0.0
    flights: list[tuple[float, float, int]] = []
    sizes: list[int] = []
    answered: list[tuple[float, int]] = []
    while now < seconds:
        while pace.may_start(slots):
            size = pace.request_bytes()
            sizes.append(size)
            pace.started(size, now)
            link_free = max(link_free, now) + size / rate
            flights.append((link_free + rtt, now, size))
        flights.sort()
        answered_at, began, size = flights.pop(0)
        now = answered_at
        pace.ended(size, now, now - began, answered=True)
        answered.append((now, size))
    return sizes, sum(size for at, size in answered if at > seconds - 10) / 10


def test_the_start_never_puts_more_on_the_link_than_a_settled_request() -> None:
    # Three requests share the link, so each answer also waits for the others' bytes. The
    # start doubles the size per answered request; it must stop before a request carries
    # more link time than the settled pace gives one (a reset loses what is on its way).
    rate = 131_072
    pace = LinkPace(PaceSettings(request_seconds=1.0, initial_bytes=64 * 1024))
    sizes, goodput = _started_sizes(pace, slots=3, rate=rate, rtt=0.6, seconds=60)
    assert not pace.starting
    assert max(sizes) <= rate * pace.settings.request_seconds * 1.25
    # …and the three requests still keep the link full.
    assert goodput >= 0.95 * rate


class SilentShore(FakeShore):
    """Takes the first `stuck` uploads, then their connections go silent: they end only when
    given up (`abandon`), as STALLED. Probes answer as scripted."""

    def __init__(self, stuck: int, probes: list[bool]) -> None:
        super().__init__()
        self.stuck, self.probes = stuck, probes
        self.released = threading.Event()
        self.waiting = 0

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        answer = super().upload(batch)
        if len(self.uploads) > self.stuck:
            return answer
        self.waiting += 1
        self.released.wait(30)
        error = LinkDown(LinkReason.STALLED, "given up")
        error.answer_lost = True  # the body went out whole: the shore may have it
        raise error

    def probe(self) -> bool:
        return self.probes.pop(0)

    def abandon(self, started_before: float) -> int:
        self.released.set()
        return self.waiting


def test_uploads_stuck_in_a_silent_link_are_given_up_when_it_answers_and_asked_after(
        state: SQLiteShipState) -> None:
    clock, shore = ManualClock(), SilentShore(stuck=2, probes=[False, True])
    uploads, hooks, ids = pipeline(state, shore, clock, events=40, slots=2)
    uploads.pace = LinkPace(PaceSettings(initial_bytes=400, min_bytes=400, max_bytes=400))
    prober = ManualProber()
    recovery = LinkRecovery(Backoff(0.5, 30.0), random.Random(5), prober=prober)

    def give_up(cutoff: float) -> None:
        shore.abandon(cutoff)

    recovery.on_return.append(give_up)
    uploads.retry = recovery.schedule(Backoff(1.0, 300.0))
    try:
        uploads.step(blocked=False)
        assert len(uploads.flights) == 2
        while shore.waiting < 2:  # both on their way, and no answer comes
            threading.Event().wait(0.01)
        clock.advance(uploads.patience() - 0.5)
        uploads.step(blocked=False)
        assert recovery.suspected_since is None  # not yet overdue
        clock.advance(1.0)
        uploads.step(blocked=False)
        assert recovery.suspected_since is not None and len(prober.waiting) == 1
        prober.finish()  # no answer to the check: the link went silent
        recovery.collect(clock.monotonic())
        assert recovery.down_since is not None and len(uploads.flights) == 2
        clock.advance(10.0)
        recovery.probe(shore, clock.monotonic())  # the link is back: this probe gets through
        prober.finish()
        assert recovery.collect(clock.monotonic())  # ... and the stuck uploads are given up
        while uploads.flights and not all(f.future.done() for f in uploads.flights):
            threading.Event().wait(0.01)
        for _ in range(20):  # no clock advance: nothing waits for a backoff
            uploads.step(blocked=False)
            for flight in list(uploads.flights):
                flight.future.result(timeout=30)
    finally:
        uploads.close()
    assert hooks.received == set(ids)
    assert shore.fates == [batch.batch_id for batch in shore.uploads[:2]]
    assert len(shore.uploads) == len({batch.batch_id for batch in shore.uploads})  # none twice
    assert uploads.retry.attempt == 0
