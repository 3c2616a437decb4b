"""The link simulator relaying real TCP on loopback: bytes arrive intact and in order both
ways, outages refuse, hold or lose bytes (then resent at the sender's next retransmission),
resets close connections, and the link comes back."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tidesync.linksim import (
    LinkProfile,
    LinkSimulator,
    LinkStats,
    OutageMode,
    ResetPlan,
    connection_rng,
    retransmission_after,
)

TIMEOUT = 30.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(OSError):  # the resets the tests make
            while data := self.request.recv(65536):
                self.request.sendall(data)


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[0], server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def connect(link: LinkSimulator) -> socket.socket:
    return socket.create_connection(("127.0.0.1", link.port), timeout=TIMEOUT)


def receive(sock: socket.socket, size: int) -> bytes:
    chunks, received = [], 0
    while received < size:
        chunk = sock.recv(min(65536, size - received))
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
    return b"".join(chunks)


def echo(sock: socket.socket, payload: bytes) -> bytes:
    """Send while receiving (a thread), so neither side's buffers fill and block."""
    def send() -> None:
        with contextlib.suppress(OSError):  # a reset shows on the receiving side
            sock.sendall(payload)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = receive(sock, len(payload))
    sender.join(TIMEOUT)
    return answer


def test_bytes_arrive_intact_and_in_order_both_ways(echo_server: tuple[str, int]) -> None:
    profile = LinkProfile(rate_bytes_per_second=4 * 1024 * 1024, latency_seconds=0.005,
                          loss=0.2, retransmit_seconds=0.01, segment_bytes=700, seed=1)
    payload = os.urandom(300_000)
    with LinkSimulator(echo_server, profile) as link, connect(link) as sock:
        assert echo(sock, payload) == payload
        stats = link.stats
    assert stats.up_delivered == stats.down_delivered == len(payload)
    assert stats.connections == 1 and stats.resets == 0 and stats.up_cut == 0


def test_a_stalled_link_holds_bytes_and_delivers_them_after(
        echo_server: tuple[str, int]) -> None:
    profile = LinkProfile(outage_mode=OutageMode.STALL)
    with LinkSimulator(echo_server, profile) as link, connect(link) as sock:
        assert echo(sock, b"before") == b"before"
        link.set_down(True)
        sock.sendall(b"held while down")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(100)
        assert link.stats.up_delivered == len(b"before")
        link.set_down(False)
        sock.settimeout(TIMEOUT)
        assert receive(sock, len(b"held while down")) == b"held while down"
        assert link.stats.resets == 0


BLACKHOLE = LinkProfile(outage_mode=OutageMode.BLACKHOLE, retransmit_seconds=0.5)
SLACK = 0.05  # the link's clock and the test's are one (monotonic); this is for rounding


def test_bytes_lost_in_a_blackhole_arrive_at_the_next_retransmission_after_it(
        echo_server: tuple[str, int]) -> None:
    with LinkSimulator(echo_server, BLACKHOLE) as link, connect(link) as sock:
        assert echo(sock, b"before") == b"before"
        link.set_down(True)
        time.sleep(0.1)  # set_down takes effect on the link's thread
        written = time.monotonic()  # the link reads them, and loses them, no earlier
        up, answered = _send_through_the_end_of_an_outage(link, sock, b"lost while down", 2.0)
        assert echo(sock, b"after") == b"after"  # the same connection, not reset
        stats = link.stats
    # Resent 0.5, 1.5 and 3.5 s after the loss: the link was back after about 2 s.
    _resumed_at_retransmission(written, up, answered, stats)


def _send_through_the_end_of_an_outage(link: LinkSimulator, sock: socket.socket, data: bytes,
                                       down_for: float) -> tuple[float, float]:
    """Send `data` to the echo server while the link is down; after `down_for` seconds
    without an echo, bring the link back. Returns when it came back and when the echo came."""
    sock.sendall(data)
    sock.settimeout(down_for)
    with pytest.raises(TimeoutError):
        sock.recv(100)
    up = time.monotonic()
    link.set_down(False)
    sock.settimeout(TIMEOUT)
    assert receive(sock, len(data)) == data
    return up, time.monotonic()


def _resumed_at_retransmission(lost: float, up: float, answered: float,
                               stats: LinkStats) -> None:
    """Bytes lost at `lost` came through at the third retransmission (the link came back at
    `up`, about 2 s later), on the one connection, which was never reset."""
    resent = retransmission_after(lost, up, BLACKHOLE.retransmit_seconds)
    assert resent - lost == pytest.approx(3.5)
    assert answered >= resent - SLACK
    assert stats.resets == 0 and stats.refused == 0 and stats.connections == 1


def test_a_connection_opened_in_a_blackhole_sends_at_its_syn_retransmission(
        echo_server: tuple[str, int]) -> None:
    with LinkSimulator(echo_server, BLACKHOLE) as link:
        link.set_down(True)
        time.sleep(0.1)
        opened = time.monotonic()
        with connect(link) as sock:  # the kernel accepts on loopback at once
            up, answered = _send_through_the_end_of_an_outage(link, sock, b"first", 1.8)
            assert echo(sock, b"then at once") == b"then at once"
        stats = link.stats
    # The SYN was resent 0.5, 1.5 and 3.5 s after the connect.
    _resumed_at_retransmission(opened, up, answered, stats)


def test_a_refusing_outage_resets_connections_and_the_link_comes_back(
        echo_server: tuple[str, int]) -> None:
    with LinkSimulator(echo_server, LinkProfile()) as link:
        with connect(link) as open_before:
            assert echo(open_before, b"ping") == b"ping"
            link.set_down(True)
            with pytest.raises(ConnectionError):
                open_before.sendall(b"x")
                if not open_before.recv(10):
                    raise ConnectionResetError("closed")
        # The reset may come before the connect returns, or on the first send or read.
        with pytest.raises(ConnectionError), connect(link) as during:
            during.sendall(b"x")
            if not during.recv(10):
                raise ConnectionResetError("closed")
        link.set_down(False)
        with connect(link) as after:
            assert echo(after, b"back") == b"back"
        stats = link.stats
    assert stats.refused >= 1 and stats.resets >= 1


def test_random_resets_close_connections(echo_server: tuple[str, int]) -> None:
    # On average one reset every 10 KiB relayed: 1 MiB never gets through on one connection.
    profile = LinkProfile(resets_per_mib=100.0, seed=3)
    with LinkSimulator(echo_server, profile) as link, connect(link) as sock:
        with pytest.raises(ConnectionError):
            answer = echo(sock, os.urandom(1024 * 1024))
            if len(answer) < 1024 * 1024:
                raise ConnectionResetError("closed early")
        stats = link.stats
    assert stats.resets == 1
    # What the client sent either reached the other side or was on the link when it was cut.
    assert stats.up_cut > 0 and stats.up_bytes == stats.up_delivered + stats.up_cut


def test_a_reset_after_n_bytes_relays_exactly_n(echo_server: tuple[str, int]) -> None:
    profile = LinkProfile(resets_per_mib=100.0, seed=3)
    plan = ResetPlan.draw(profile, connection_rng(profile.seed, 0, "resets"))
    with LinkSimulator(echo_server, profile) as link, connect(link) as sock:
        with contextlib.suppress(ConnectionError):
            echo(sock, os.urandom(1024 * 1024))  # written in one go: reads of 64 KiB
        stats = link.stats
    assert stats.resets == 1
    # Both directions count; what the client wrote after the reset's byte was not relayed.
    assert stats.up_bytes + stats.down_bytes == math.ceil(plan.bytes)
    assert stats.up_bytes == stats.up_delivered + stats.up_cut
