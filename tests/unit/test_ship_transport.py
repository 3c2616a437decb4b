"""The ship's HTTP link and its retry rules against a small local HTTP stub.

A stub, not the real shore: the conditions here (429 with Retry-After, 503, 426, 413, a
dropped connection, a slow answer) are ones a healthy shore cannot be made to produce on
demand. The real shore is used wherever it can produce the condition (tests/integration)."""

from __future__ import annotations

import datetime as dt
import email.utils
import http.server
import json
import os
import random
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest

from tests.clocks import rounded_now
from tidesync.domain.backoff import Backoff
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.pacing import UplinkPacer
from tidesync.ship.transport import (
    Disposition,
    HttpShoreLink,
    LinkDown,
    LinkReason,
    RetrySchedule,
    ShoreRefused,
    disposition_of,
)
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import (
    NODE_HEADER,
    REQUEST_ID_HEADER,
    RESPONSE_SIGNATURE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign_request,
    sign_response,
)

SECRET = bytes(range(32))
NOW = rounded_now()


class Stub(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next scripted (status, headers, body); records requests."""

    script: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    seen: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []
    delay = threading.Event()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Stub.seen.append((self.command, self.path, dict(self.headers), body))
        status, headers, answer = Stub.script.pop(0)
        if status == 0:  # drop the connection without answering
            self.close_connection = True
            self.connection.close()
            return
        if status == -1:  # answer too late
            Stub.delay.wait(1.5)
            return
        then_hang_up = headers.pop(HANG_UP, None) is not None
        signed_for = headers.pop(SIGN_FOR, None)
        if signed_for is not None:  # as the shore does: sign the answer with the node secret
            signed_headers = {**dict(self.headers), **json.loads(headers.pop(PRETEND, "{}"))}
            headers[RESPONSE_SIGNATURE_HEADER] = sign_response(
                SECRET, CaseInsensitive(signed_headers), self.command, self.path,
                int(headers.pop(SIGNED_STATUS, status)),
                answer if signed_for == "" else bytes.fromhex(signed_for))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        if then_hang_up:  # as a server closing a kept-alive connection once it is idle
            self.wfile.flush()
            self.close_connection = True

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


HANG_UP = "x-stub-hang-up-after"  # scripted: answer (keeping alive), then close silently
SIGN_FOR = "x-stub-sign-body"  # scripted: sign the answer; a hex value signs that body instead
SIGNED_STATUS = "x-stub-signed-status"  # scripted: sign as if answering this status
PRETEND = "x-stub-pretend"  # scripted: JSON of request headers to sign for instead of the real


class CaseInsensitive(dict[str, str]):
    def __getitem__(self, name: str) -> str:
        return next(v for k, v in self.items() if k.lower() == name.lower())


def signed(status: int, headers: dict[str, str], body: bytes, *, signed_body: bytes | None = None,
           pretend: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """A scripted answer the stub signs like the shore (optionally for another body or
    request: what a man in the middle could produce by replaying or editing)."""
    return status, {**headers, SIGN_FOR: "" if signed_body is None else signed_body.hex(),
                    PRETEND: json.dumps(pretend or {})}, body


@contextmanager
def stub(*script: tuple[int, dict[str, str], bytes], keep_alive: bool = False) -> Iterator[str]:
    Stub.script, Stub.seen = [_signed_by_default(line) for line in script], []
    Stub.protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        Stub.delay.set()
        server.shutdown()
        server.server_close()
        Stub.delay.clear()


def _signed_by_default(line: tuple[int, dict[str, str], bytes]
                       ) -> tuple[int, dict[str, str], bytes]:
    status, headers, body = line
    if SIGN_FOR in headers or UNSIGNED in headers or status <= 0:
        headers.pop(UNSIGNED, None)
        return status, headers, body
    return status, {**headers, SIGN_FOR: ""}, body


UNSIGNED = "x-stub-unsigned"  # scripted: send the answer without a signature


def error(reason: str, retry_after: int | None = None) -> bytes:
    message = pb.ErrorResponse(reason_code=reason, message="refused")
    if retry_after is not None:
        message.retry_after_seconds = retry_after
    return codec.compress(message)


def link(url: str, timeout: float = 5.0) -> HttpShoreLink:
    return HttpShoreLink(url, "ship-7", SECRET, clock=lambda: NOW, timeout=timeout)


def batch() -> OutgoingBatch:
    return OutgoingBatch(uuid.uuid4(), (), codec.compress_bytes(b"batch"), 5)


def test_uploads_are_signed_and_answers_decoded() -> None:
    answer = pb.UploadBatchResponse(statuses=[pb.EventReceiveStatus(status=pb.RECEIVED)])
    page = pb.ReceiptsPage(next_cursor="9", has_more=True)
    with stub((200, {}, codec.compress(answer)), (200, {}, codec.compress(page))) as url:
        shore = link(url)
        assert shore.upload(batch()).statuses[0].status == pb.RECEIVED
        assert shore.receipts("7", 100).next_cursor == "9"
        shore.close()
    (method, path, headers, body), (get, target, get_headers, _) = Stub.seen
    assert (method, path, body) == ("POST", "/sync/v1/batches?answer=ranges",
                                    codec.compress_bytes(b"batch"))
    assert headers[NODE_HEADER] == "ship-7" and len(headers[SIGNATURE_HEADER]) == 64
    assert (get, target) == ("GET", "/sync/v1/receipts?cursor=7&limit=100&form=ranges")
    assert get_headers[codec.PROTOCOL_VERSION_HEADER] == codec.PROTOCOL_VERSION
    assert shore.counters.physical_bytes == len(body)


@pytest.mark.parametrize(("status", "reason", "disposition"), [
    (429, "RATE_LIMITED", Disposition.RETRY),
    (503, "STORE_UNAVAILABLE", Disposition.RETRY),
    (408, "", Disposition.RETRY),
    (401, "AUTH_BAD_SIGNATURE", Disposition.BLOCK_NODE),
    (403, "NODE_MISMATCH", Disposition.BLOCK_NODE),
    (426, "UNSUPPORTED_PROTOCOL", Disposition.BLOCK_NODE),
    (413, "PAYLOAD_TOO_LARGE", Disposition.SPLIT),
])
def test_refusals_carry_the_shores_reason_and_their_disposition(
        status: int, reason: str, disposition: Disposition) -> None:
    body = error(reason) if reason else b"not protobuf"
    with stub((status, {}, body)) as url, pytest.raises(ShoreRefused) as refused:
        link(url).upload(batch())
    assert refused.value.status == status
    assert refused.value.reason == (reason or f"HTTP_{status}")
    assert refused.value.disposition is disposition is disposition_of(status)


def test_retry_after_from_the_header_or_the_body() -> None:
    with stub((429, {"Retry-After": "7"}, error("RATE_LIMITED")),
              (503, {}, error("STORE_UNAVAILABLE", retry_after=5))) as url:
        shore = link(url)
        with pytest.raises(ShoreRefused) as first:
            shore.upload(batch())
        with pytest.raises(ShoreRefused) as second:
            shore.upload(batch())
    assert (first.value.retry_after, second.value.retry_after) == (7.0, 5.0)


def test_an_http_date_retry_after_is_read_against_the_links_clock() -> None:
    # A ship whose clock runs three days behind the wall clock: the shore's date is read
    # against the ship's own clock, never against another one.
    ship_now = NOW - dt.timedelta(days=3)
    at = email.utils.format_datetime(ship_now + dt.timedelta(seconds=90), usegmt=True)
    with stub((503, {"Retry-After": at}, error("STORE_UNAVAILABLE"))) as url:
        shore = HttpShoreLink(url, "ship-7", SECRET, clock=lambda: ship_now, timeout=5.0)
        with pytest.raises(ShoreRefused) as refused:
            shore.upload(batch())
    assert refused.value.retry_after == 90.0


def test_dropped_connections_and_timeouts_are_link_down() -> None:
    with stub((0, {}, b""), (-1, {}, b"")) as url:
        shore = link(url, timeout=0.5)
        with pytest.raises(LinkDown) as dropped:
            shore.upload(batch())
        with pytest.raises(LinkDown) as slow:
            shore.upload(batch())
    assert dropped.value.disposition is Disposition.RETRY
    assert slow.value.reason == "TIMEOUT"
    with pytest.raises(LinkDown):  # nothing listens
        link("http://127.0.0.1:9", timeout=0.5).upload(batch())


def test_a_kept_alive_connection_closed_by_the_shore_is_reopened_once() -> None:
    beat = codec.compress(pb.HeartbeatResponse())
    with stub((200, {HANG_UP: "1"}, beat), (200, {}, beat), (200, {HANG_UP: "1"}, beat),
              (0, {}, b""), keep_alive=True) as url:
        shore = link(url)
        shore.heartbeat(pb.Heartbeat())
        shore.heartbeat(pb.Heartbeat())  # the first connection is gone: a new one answers
        shore.heartbeat(pb.Heartbeat())
        with pytest.raises(LinkDown):  # a new connection that fails is not tried again
            shore.heartbeat(pb.Heartbeat())
    assert len(Stub.seen) == 4
    request_ids = {headers[REQUEST_ID_HEADER] for _, _, headers, _ in Stub.seen}
    assert len(request_ids) == 4


def test_the_retry_schedule_is_full_jitter_with_a_retry_after_floor() -> None:
    schedule = RetrySchedule(Backoff(), random.Random(7))
    delays = [schedule.failed(100.0) for _ in range(12)]
    ceilings = [min(300.0, 2.0 ** (n - 1)) for n in range(1, 13)]
    assert all(0 <= d < c for d, c in zip(delays, ceilings, strict=True))
    assert not schedule.due(100.0) and schedule.due(100.0 + delays[-1])
    assert schedule.failed(100.0, retry_after=42.0) >= 42.0
    assert schedule.failed(100.0, retry_after=4000.0) == 300.0  # capped at 5 minutes
    schedule.succeeded()
    assert schedule.attempt == 0 and schedule.due(0.0)


def skew_refusal(shore_now: dt.datetime | None) -> bytes:
    message = pb.ErrorResponse(reason_code="AUTH_EXPIRED_TIMESTAMP", message="refused")
    if shore_now is not None:
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        message.server_time_micros = (shore_now - epoch) // dt.timedelta(microseconds=1)
    return codec.compress(message)


def test_a_clock_refusal_is_answered_by_signing_in_the_shores_time() -> None:
    # The ship's clock runs two hours behind the shore's.
    shore_now = NOW + dt.timedelta(hours=2)
    answer = codec.compress(pb.UploadBatchResponse())
    with stub((401, {}, skew_refusal(shore_now)), (200, {}, answer),
              (200, {}, answer)) as url:
        shore = link(url)
        shore.upload(batch())
        shore.upload(batch())
    stamps = [int(headers[TIMESTAMP_HEADER]) for _, _, headers, _ in Stub.seen]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert stamps == [int((t - epoch).total_seconds()) for t in (NOW, shore_now, shore_now)]
    assert shore.clock_offset == dt.timedelta(hours=2)


def test_a_clock_refusal_is_retried_never_a_block() -> None:
    with stub((401, {}, skew_refusal(None))) as url, pytest.raises(ShoreRefused) as refused:
        link(url).upload(batch())
    assert refused.value.reason == "AUTH_EXPIRED_TIMESTAMP"
    assert refused.value.disposition is Disposition.RETRY


# ----------------------------------------------------------------------------- signed answers


def applied(event_id: bytes) -> bytes:
    page = pb.ReceiptsPage(next_cursor="9")
    page.results.add(event_id=event_id, result=pb.APPLIED)
    return codec.compress(page)


def test_signed_answers_are_acted_on() -> None:
    with stub(signed(200, {}, applied(b"e" * 16))) as url:
        page = link(url).receipts("", 10)
    assert page.results[0].result == pb.APPLIED
    assert RESPONSE_SIGNATURE_HEADER.lower() not in {k.lower() for k in Stub.seen[0][2]}


def test_an_unsigned_answer_is_never_acted_on() -> None:
    # A man in the middle (or a shore too old to sign) answering APPLIED for everything.
    with stub((200, {UNSIGNED: "1"}, applied(b"e" * 16)),
              (503, {UNSIGNED: "1"}, error("STORE_UNAVAILABLE"))) as url:
        shore = link(url)
        with pytest.raises(LinkDown) as page:
            shore.receipts("", 10)
        with pytest.raises(LinkDown) as refusal:
            shore.upload(batch())
    assert page.value.reason == refusal.value.reason == LinkReason.RESPONSE_UNSIGNED
    assert page.value.disposition is Disposition.RETRY


def test_an_edited_answer_is_refused() -> None:
    # The shore signed a page without results; the body arriving says APPLIED.
    honest = codec.compress(pb.ReceiptsPage(next_cursor="9"))
    line = signed(200, {}, applied(b"e" * 16), signed_body=honest)
    with stub(line) as url, pytest.raises(LinkDown) as forged:
        link(url).receipts("", 10)
    assert forged.value.reason == LinkReason.RESPONSE_FORGED


def test_an_answer_signed_for_another_request_is_refused() -> None:
    # A signed APPLIED page recorded earlier and replayed as the answer to a new request.
    other = {REQUEST_ID_HEADER: str(uuid.uuid4())}
    line = signed(200, {}, applied(b"e" * 16), pretend=other)
    with stub(line) as url, pytest.raises(LinkDown) as replayed:
        link(url).receipts("", 10)
    assert replayed.value.reason == LinkReason.RESPONSE_FORGED


def test_a_refusal_whose_status_was_changed_is_refused() -> None:
    # The shore refused 503 (retry); the status arriving says 413 (split the batch).
    line = signed(413, {SIGNED_STATUS: "503"}, error("STORE_UNAVAILABLE"))
    with stub(line) as url, pytest.raises(LinkDown) as forged:
        link(url).upload(batch())
    assert forged.value.reason == LinkReason.RESPONSE_FORGED


def test_an_unsigned_401_is_believed() -> None:
    # The shore cannot sign for a request it did not authenticate.
    line = (401, {UNSIGNED: "1"}, error("NODE_UNKNOWN"))
    with stub(line) as url, pytest.raises(ShoreRefused) as refused:
        link(url).upload(batch())
    assert refused.value.reason == "NODE_UNKNOWN"


def test_a_paced_upload_is_written_in_pieces_and_arrives_whole_and_signed() -> None:
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the pacer's clock moves only while it waits
        waits.append(seconds)

    pacer = UplinkPacer(1_000_000, 16 * 1024, sleep=sleep, monotonic=lambda: sum(waits))
    body = codec.compress_bytes(os.urandom(100_000))  # incompressible: about 100 KB
    answer = pb.UploadBatchResponse(statuses=[pb.EventReceiveStatus(status=pb.RECEIVED)])
    page = pb.ReceiptsPage(next_cursor="9")
    with stub((200, {}, codec.compress(answer)), (200, {}, codec.compress(page))) as url:
        shore = HttpShoreLink(url, "ship-7", SECRET, clock=lambda: NOW, timeout=5.0,
                              pacer=pacer)
        assert shore.pacer is pacer
        assert shore.upload(OutgoingBatch(uuid.uuid4(), (), body, 5)).statuses[0].status \
            == pb.RECEIVED
        asked = len(waits)
        shore.receipts("7", 100)  # only upload bodies are paced
        shore.close()
    (_, _, headers, arrived), (_, _, _, receipts_body) = Stub.seen
    assert arrived == body and headers["Content-Length"] == str(len(body))
    assert "Transfer-Encoding" not in headers
    again = sign_request("ship-7", SECRET, "POST", "/sync/v1/batches?answer=ranges", arrived,
                         NOW, headers[REQUEST_ID_HEADER])
    assert again[SIGNATURE_HEADER] == headers[SIGNATURE_HEADER]
    # The clock moves only while the pacer waits: every piece after the burst waited.
    assert asked >= len(body) // (16 * 1024) - 1 and len(waits) == asked
    assert receipts_body == b""
