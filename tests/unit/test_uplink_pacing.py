"""The uplink limit applied to the bytes as they are written: pieces, waits and the shared
limit of uploads side by side (a fake clock that the pacer's sleep moves on)."""

from __future__ import annotations

import itertools
import os
import threading
import time

from tidesync.ship.pacing import PIECE_BYTES, UplinkPacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.lock = threading.Lock()
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)
            self.now += seconds


def test_a_body_leaves_in_pieces_no_faster_than_the_limit_after_the_burst() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(64 * 1024, 32 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    body = os.urandom(256 * 1024)
    written: list[tuple[float, int]] = []
    for piece in pacer.pieces(body):
        written.append((clock.now, len(piece)))
    assert b"".join(pacer.pieces(b"")) == b""
    assert sum(size for _, size in written) == len(body)
    assert max(size for _, size in written) <= PIECE_BYTES
    # The burst goes at once; the rest at 64 KiB/s: (256 - 32) KiB take 3.5 s.
    assert clock.now - 100.0 == sum(clock.sleeps)
    assert abs(sum(clock.sleeps) - 3.5) < 1e-6 and abs(pacer.waited - 3.5) < 1e-6
    sent_by = {moment: sum(size for when, size in written if when <= moment)
               for moment, _ in written}
    for moment, total in sent_by.items():  # never ahead of burst + rate × time
        assert total <= 32 * 1024 + (moment - 100.0) * 64 * 1024 + PIECE_BYTES


def test_the_pieces_are_the_body() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(10_000, 3_000, monotonic=clock.monotonic, sleep=clock.sleep)
    body = os.urandom(50_001)
    assert b"".join(pacer.pieces(body)) == body
    assert pacer.piece_bytes == 3_000  # never more than the burst at once


def test_a_limit_changed_while_a_body_is_written_leaves_the_body_whole() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(64 * 1024, 16 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    body = os.urandom(100_000)
    pieces = pacer.pieces(body)
    written = [next(pieces)]
    pacer.follow_shore(32 * 1024, 4 * 1024)  # the shore's lower limit, a smaller burst
    written += list(pieces)
    assert b"".join(written) == body
    assert pacer.piece_bytes == 4 * 1024 and pacer.rate == 32 * 1024


def test_uploads_side_by_side_share_one_limit() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(100_000, 16 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    bodies = [os.urandom(200_000) for _ in range(3)]
    received: list[bytes] = [b""] * 3

    def upload(number: int) -> None:
        received[number] = b"".join(pacer.pieces(bodies[number]))

    threads = [threading.Thread(target=upload, args=(number,)) for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert received == bodies
    # 600,000 bytes at 100,000 B/s after a 16 KiB burst: the three waited about 5.8 s in
    # all on the shared clock, not 3 × 1.8 s each as three separate limits would allow.
    assert pacer.waited >= (600_000 - 16 * 1024) / 100_000 - 1e-6


def test_bodies_on_their_way_take_turns_a_piece_each() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(1_000_000, 16 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    bodies = [os.urandom(200_000), os.urandom(100_000), os.urandom(60_000)]
    turns: list[str] = []
    take = pacer._take

    def noted_take(size: int) -> None:  # a piece is taken only on its body's turn
        while len(pacer._queue) < 3 and not turns:  # the three are on their way
            time.sleep(0.001)
        turns.append(threading.current_thread().name)
        take(size)

    pacer._take = noted_take  # type: ignore[method-assign]
    received: dict[str, bytes] = {}
    started = threading.Barrier(3)

    def upload(number: int) -> None:
        started.wait()
        received[str(number)] = b"".join(pacer.pieces(bodies[number]))

    threads = [threading.Thread(target=upload, args=(n,), name=str(n)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [received[str(n)] for n in range(3)] == bodies
    # Once all three have begun, none takes two pieces in a row while the others have bytes
    # left, so the shortest body (4 pieces) is done within 12 turns of that, not after the
    # 20 pieces of the other two.
    begun = max(turns.index(name) for name in "012")
    last_of = {name: max(i for i, turn in enumerate(turns) if turn == name) for name in "012"}
    assert begun < min(last_of.values())  # all three were on their way at once
    shared = turns[begun:min(last_of.values()) + 1]
    assert all(a != b for a, b in itertools.pairwise(shared))
    assert last_of["2"] < 4 * 3 + begun


def test_a_body_cut_short_gives_the_next_one_its_turn() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(1_000_000, 16 * 1024, monotonic=clock.monotonic, sleep=clock.sleep)
    cut = pacer.pieces(os.urandom(100_000))
    next(cut)
    done = threading.Event()

    def after() -> None:
        if b"".join(pacer.pieces(b"x" * 40_000)) == b"x" * 40_000:
            done.set()

    thread = threading.Thread(target=after)
    thread.start()
    assert not done.wait(0.2)  # waits for the body before it
    cut.close()  # the connection failed mid-body
    thread.join(30)
    assert done.is_set()
