"""Requests stuck on a connection the link went silent under are given up, not waited for.

A shore stub that reads each request and never answers stands in for a connection whose
packets were dropped: the request blocks on it as it would while the kernel backs off its
retransmissions."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from tests.clocks import rounded_now
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.transport import HttpShoreLink, LinkDown, LinkReason, link_is_down
from tidesync.wire import codec

NOW = rounded_now()


class SilentShore:
    """A server that reads what comes and never answers: `arrived` is set once a request
    has arrived, and `ended` says how its connection ended ("reset", "closed")."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.ended: list[str] = []


@contextmanager
def silent_shore() -> Iterator[tuple[str, SilentShore]]:
    server = socket.create_server(("127.0.0.1", 0))
    shore = SilentShore()
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            held.append(connection)
            connection.settimeout(5.0)
            try:
                while connection.recv(65536):
                    shore.arrived.set()
                shore.ended.append("closed")
            except ConnectionResetError:
                shore.ended.append("reset")
            except OSError:
                shore.ended.append("timeout")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", shore
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()


def _upload_in_thread(link: HttpShoreLink) -> tuple[threading.Thread, list[BaseException]]:
    failures: list[BaseException] = []
    batch = OutgoingBatch(uuid.uuid4(), (), codec.compress_bytes(b"batch" * 100), 500)

    def run() -> None:
        try:
            link.upload(batch)
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, failures


def test_a_request_stuck_since_before_the_link_came_back_is_given_up_as_stalled() -> None:
    with silent_shore() as (url, shore):
        link = HttpShoreLink(url, "ship-7", bytes(32), clock=lambda: NOW, timeout=60.0)
        thread, failures = _upload_in_thread(link)
        assert shore.arrived.wait(10)
        assert link.abandon(time.monotonic() - 3600) == 0  # it started after that
        assert link.abandon(time.monotonic()) == 1
        thread.join(10)  # far less than its 60 s timeout
        assert not thread.is_alive()
        (error,) = failures
        assert isinstance(error, LinkDown) and error.reason == LinkReason.STALLED
        # The body went out (whole, or the start of it): the shore may have it, so its fate
        # is asked; and being given up says nothing about the link being down.
        assert error.answer_lost or error.body_cut
        assert not link_is_down(error)
        assert link.abandon(time.monotonic()) == 0  # nothing left on its way
        link.close()
    # The shore learns at once that the request is over (a reset: a FIN would wait behind
    # the bytes a silent link lost), so it frees the node's slot and keeps what arrived.
    assert shore.ended == ["reset"]


def test_a_given_up_connection_is_not_used_again() -> None:
    with silent_shore() as (url, shore):
        link = HttpShoreLink(url, "ship-7", bytes(32), clock=lambda: NOW, timeout=60.0)
        thread, failures = _upload_in_thread(link)
        assert shore.arrived.wait(10)
        link.abandon(time.monotonic())
        thread.join(10)
        assert failures and not link._open_connections - {None}  # dropped, not kept alive
        link.close()
