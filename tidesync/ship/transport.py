"""The ship's link to the shore: signed /sync/v1 requests over HTTP(S), answers acted on only
when the shore signed them for that request, and how failures retry.

408, 429, 5xx and network errors retry with full jitter (1 s … 5 min, Retry-After as a floor);
401/403 (identity) and 426 (protocol) block the node with the shore's reason instead, except a
timestamp outside the shore's window: the link then signs in the shore's time (the refusal
tells it) and sends again. While requests get no answer at all, a cheap probe (GET /livez)
watches for the link's return, and the first answer resets every request's backoff.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import http.client
import logging
import socket
import ssl
import struct
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Protocol

from tidesync.domain.clock import Clock
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.link_errors import CLOCK_SKEW_REASON as CLOCK_SKEW_REASON
from tidesync.ship.link_errors import BatchUnknown as BatchUnknown
from tidesync.ship.link_errors import ConnectionClosed as ConnectionClosed
from tidesync.ship.link_errors import Disposition as Disposition
from tidesync.ship.link_errors import LinkDown as LinkDown
from tidesync.ship.link_errors import LinkError as LinkError
from tidesync.ship.link_errors import LinkReason as LinkReason
from tidesync.ship.link_errors import ShoreRefused as ShoreRefused
from tidesync.ship.link_errors import disposition_of as disposition_of
from tidesync.ship.link_errors import link_is_down as link_is_down
from tidesync.ship.measured_rate import SMALL_REQUEST_BYTES
from tidesync.ship.pacing import UplinkPacer
from tidesync.ship.retries import LinkRecovery as LinkRecovery
from tidesync.ship.retries import RetrySchedule as RetrySchedule
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import (
    RESPONSE_SIGNATURE_HEADER,
    response_signature_matches,
    sign_request,
)

log = logging.getLogger(__name__)

BATCHES_PATH = "/sync/v1/batches"
RECEIPTS_PATH = "/sync/v1/receipts"
HEARTBEAT_PATH = "/sync/v1/heartbeat"
COMMANDS_PATH = "/sync/v1/commands"
COMMAND_ACKS_PATH = "/sync/v1/command-acks"
RECONCILE_ANSWERS_PATH = "/sync/v1/reconcile-answers"
CONFIG_PATH = "/sync/v1/config"
DICTIONARIES_PATH = "/sync/v1/dictionaries"
LIVEZ_PATH = "/livez"
PROTOBUF = "application/x-protobuf"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_RESPONSE_DECOMPRESSED = 64 * 1024 * 1024
BATCH_UNKNOWN = "BATCH_UNKNOWN"
RESUME_REFUSALS = frozenset({"RESUME_UNKNOWN", "RESUME_MISMATCH", "BAD_RESUME"})
"""A resumed upload the shore cannot complete: the whole body goes again."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PROBE_ANSWER_BYTES = 64 * 1024



class ShoreLink(Protocol):
    """The /sync/v1 calls of the uplink and of the downlink (shore commands, §12)."""

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse: ...

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage: ...

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse: ...

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage: ...

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse: ...

    def config(self) -> pb.ConfigResponse: ...


@dataclass
class LinkCounters:
    """Physical bytes sent (retries included) and seconds spent in successful transfers;
    connections opened, requests that met a connection the shore had closed, and requests given
    up as stuck after the link went silent."""

    physical_bytes: int = 0
    active_seconds: float = 0.0
    connections_opened: int = 0
    closed_by_peer: int = 0
    given_up: int = 0


class _ThreadConnection(threading.local):
    """The kept-alive connection of one thread and when it was last used."""

    connection: http.client.HTTPConnection | None = None
    used_at: float = 0.0
    exchange: _Exchange | None = None


@dataclass
class _Exchange:
    """A request on its way on some thread's connection, for `HttpShoreLink.abandon`."""

    connection: http.client.HTTPConnection
    started: float
    abandoned: bool = False


class HttpShoreLink:
    """/sync/v1 over a kept-alive http.client connection per calling thread (re-opened after
    any failure, and before a request once it has been idle `keep_alive` seconds: the shore
    drops idle connections after its own, longer, keep-alive timeout). Threads may call it at
    once: each has its own connection, so uploads can be in flight side by side.

    Every request is signed with a fresh request id; every socket operation has a timeout.
    """

    remote = True
    """Requests take a round trip: the client sends its side requests from a thread."""

    def __init__(self, url: str, node_id: str, secret: bytes, *, clock: Clock,
                 timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 keep_alive: float = 60.0, probe_timeout: float = 5.0,
                 pacer: UplinkPacer | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("the shore URL must be http(s)://host[:port]")
        self.scheme, self.host, self.port = parsed.scheme, parsed.hostname, parsed.port
        self.prefix = parsed.path.rstrip("/")
        self.node_id, self.secret, self.clock = node_id, secret, clock
        self.timeout, self.ssl_context, self.monotonic = timeout, ssl_context, monotonic
        self.keep_alive, self.probe_timeout = keep_alive, min(probe_timeout, timeout)
        self.pacer = pacer
        """Writes upload bodies at the uplink limit (`tidesync.ship.pacing`); None: at once."""
        self._local = _ThreadConnection()
        self._open_connections: set[http.client.HTTPConnection] = set()
        self._exchanges: dict[int, _Exchange] = {}
        self._lock = threading.Lock()
        self.counters = LinkCounters()
        self.clock_offset = dt.timedelta(0)
        """Added to the local clock when signing: the shore's time minus ours, learnt from a
        timestamp refusal (kept while the process runs; relearnt after a restart)."""

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        """Send the batch; the shore answers events RECEIVED by offset ranges (a shore that
        does not know ranges answers every event). A request whose answer is lost is not sent
        again here: the caller asks the batch's fate first."""
        body, target = batch.body, f"{BATCHES_PATH}?answer=ranges"
        if 0 < batch.resume_from < len(batch.body):  # the shore kept the first bytes
            whole = hashlib.sha256(batch.body).hexdigest()
            body, target = batch.body[batch.resume_from:], \
                f"{target}&resume={batch.resume_from}.{whole}"
        pacer = self.pacer
        snapshot = None if pacer is None else pacer.upload_started()
        answered: int | None = None
        try:
            raw = self._request("POST", target, body, resend_unanswered=False, paced=True)
            answered = len(body)
        finally:
            if pacer is not None:
                pacer.upload_ended(snapshot, answered)
        return _parse(raw, pb.UploadBatchResponse)

    def batch_fate(self, batch_id: uuid.UUID, body: bytes | None = None
                   ) -> pb.UploadBatchResponse | BatchUnknown | None:
        """What the shore answered the batch `batch_id`, or None when it does not know the
        batch (it never arrived whole); BatchUnknown when it keeps the first bytes of `body`
        from an upload cut off mid-way. Raises ShoreRefused when the shore cannot tell (a
        shore without this request answers an unsigned 404: LinkDown RESPONSE_UNSIGNED)."""
        query = f"?body={hashlib.sha256(body).hexdigest()}" if body else ""
        try:
            raw = self._request("GET", f"{BATCHES_PATH}/{batch_id.hex}{query}", b"")
        except ShoreRefused as refused:
            if refused.status == 404 and refused.reason == BATCH_UNKNOWN:
                kept = refused.resume_from if body and refused.resume_from < len(body) else 0
                return BatchUnknown(kept) if kept else None
            raise
        return _parse(raw, pb.UploadBatchResponse)

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        """Results after `cursor`; plain APPLIED ones come as offset ranges from a shore that
        knows them (`applied`), every other one as an entry."""
        query = urllib.parse.urlencode({**({"cursor": cursor} if cursor else {}),
                                        "limit": str(limit), "form": "ranges"})
        raw = self._request("GET", f"{RECEIPTS_PATH}?{query}", b"")
        return _parse(raw, pb.ReceiptsPage)

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse:
        raw = self._request("POST", HEARTBEAT_PATH, codec.compress(message))
        return _parse(raw, pb.HeartbeatResponse)

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        """This node's shore commands after `cursor` (opaque; empty = from the start)."""
        query = urllib.parse.urlencode({**({"cursor": cursor} if cursor else {}),
                                        "limit": str(limit)})
        raw = self._request("GET", f"{COMMANDS_PATH}?{query}", b"")
        return _parse(raw, pb.CommandsPage)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        raw = self._request("POST", COMMAND_ACKS_PATH, codec.compress(message))
        return _parse(raw, pb.CommandAcksResponse)

    def reconcile_answer(self, message: pb.ReconcileAnswer) -> pb.ReconcileAnswerResponse:
        raw = self._request("POST", RECONCILE_ANSWERS_PATH, codec.compress(message))
        return _parse(raw, pb.ReconcileAnswerResponse)

    def config(self) -> pb.ConfigResponse:
        """The sync rules the shore offers this node, with its config version."""
        raw = self._request("GET", CONFIG_PATH, b"")
        return _parse(raw, pb.ConfigResponse)

    def send_dictionary(self, message: pb.WireDictionary) -> pb.WireDictionaryResponse:
        raw = self._request("POST", DICTIONARIES_PATH, codec.compress(message))
        return _parse(raw, pb.WireDictionaryResponse)

    def probe(self) -> bool:
        """Whether the shore's server answers at all: GET /livez, unsigned and with a short
        timeout, so probing a link that is down stays cheap. An answer below 500 counts (it
        only tells the client to try its real requests now; nothing in it is acted on).
        Its connection is not kept: the requests that follow go on their own threads'."""
        try:
            connection = self._open(self.probe_timeout)
            connection.request("GET", self.prefix + LIVEZ_PATH,
                               headers={"Accept": "application/json"})
            response = connection.getresponse()
            response.read(_PROBE_ANSWER_BYTES)
        except (OSError, http.client.HTTPException):
            return False
        finally:
            self._drop()
        return response.status < 500

    def abandon(self, started_before: float) -> int:
        """Give up the requests on their way that started before `started_before` (monotonic):
        each fails at once with LinkReason.STALLED; returns how many.

        After the link went silent (packets dropped, not refused), a connection that had bytes
        on their way resumes only at its kernel's next retransmission, which backs off
        exponentially: seconds after a short outage, minutes after a long one. Its request
        goes again on a new connection instead (an upload asks its batch's fate first)."""
        with self._lock:
            stale = [exchange for exchange in self._exchanges.values()
                     if exchange.started < started_before and not exchange.abandoned]
            for exchange in stale:
                exchange.abandoned = True
            self.counters.given_up += len(stale)
        for exchange in stale:
            sock = exchange.connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    # Closed with a reset, not a FIN: a FIN would wait behind the bytes the
                    # link lost, and the shore would hold the request (and the node's slot,
                    # and what arrived of the body) until they got through; a reset ends it
                    # there, and the shore keeps the part of the body it has.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)  # wakes the thread waiting for the answer
        return len(stale)

    def close(self) -> None:
        """Close every thread's connection (a request still running on one fails)."""
        with self._lock:
            connections, self._open_connections = self._open_connections, set()
        for connection in connections:
            connection.close()
        self._local.connection = None

    def _drop(self) -> None:
        """Close this thread's connection."""
        connection, self._local.connection = self._local.connection, None
        if connection is not None:
            with self._lock:
                self._open_connections.discard(connection)
            connection.close()

    def _count(self, *, sent: int = 0, seconds: float = 0.0, opened: int = 0,
               closed: int = 0) -> None:
        with self._lock:
            counters = self.counters
            counters.physical_bytes += sent
            counters.active_seconds += seconds
            counters.connections_opened += opened
            counters.closed_by_peer += closed

    def _request(self, method: str, target: str, body: bytes, *,
                 resend_unanswered: bool = True, paced: bool = False) -> bytes:
        """The decompressed body of a 200 answer; raises LinkDown or ShoreRefused.

        A kept-alive connection the shore has meanwhile closed as idle fails on first use;
        that one failure is not a link problem, so the request goes once more on a new
        connection (signed afresh: every request id is used once). Every request here is
        idempotent on the shore (batches by event id, acks by command), so a request that did
        arrive before the close is answered the same way again. `resend_unanswered=False`
        keeps a request that went out whole from going again (an upload: its fate is asked)."""
        target = self.prefix + target
        try:
            return self._send_reopening(method, target, body, resend_unanswered, paced)
        except ShoreRefused as refused:
            if refused.reason != CLOCK_SKEW_REASON or refused.server_time is None:
                raise
            self._learn_offset(refused.server_time)
        return self._send_reopening(method, target, body, resend_unanswered, paced)

    def _send_reopening(self, method: str, target: str, body: bytes,
                        resend_unanswered: bool, paced: bool) -> bytes:
        local = self._local
        if (local.connection is not None
                and self.monotonic() - local.used_at > self.keep_alive):
            self._drop()  # idle too long: the shore may be closing it right now
        reused = local.connection is not None
        try:
            return self._send(method, target, body, paced)
        except ConnectionClosed as closed:
            if not reused or (not resend_unanswered and (closed.answer_lost
                                                         or closed.body_cut)):
                raise
            self._count(closed=1)
        return self._send(method, target, body, paced)

    def _learn_offset(self, server_time: dt.datetime) -> None:
        # The answer left the shore at most a round trip ago: well inside its window.
        self.clock_offset = server_time - self.clock()
        log.warning("the shore refused this node's clock: signing %+.0f s off the local clock",
                    self.clock_offset.total_seconds())

    def now(self) -> dt.datetime:
        """The time requests are signed with: the local clock corrected to the shore's."""
        return self.clock() + self.clock_offset

    def _send(self, method: str, target: str, body: bytes, paced: bool = False) -> bytes:
        headers = {"Content-Type": PROTOBUF, "Content-Encoding": "zstd",
                   "Accept-Encoding": "zstd",
                   codec.PROTOCOL_VERSION_HEADER: codec.PROTOCOL_VERSION,
                   **sign_request(self.node_id, self.secret, method, target, body, self.now(),
                                  str(uuid.uuid4()))}
        payload: bytes | Generator[bytes] | None = body or None
        if paced and self.pacer is not None and self.pacer.limited and body:
            # Written piece by piece as the limit allows; the length is known up front.
            payload = self._unless_given_up(self.pacer.pieces(body))
            headers["Content-Length"] = str(len(body))
        try:
            return self._exchange(method, target, body, payload, headers)
        finally:
            if isinstance(payload, Generator):
                payload.close()  # a write cut short gives the next body its turn now

    def _unless_given_up(self, pieces: Generator[bytes]) -> Generator[bytes]:
        """A paced body's pieces, until its request is given up (`abandon`)."""
        try:
            for piece in pieces:
                exchange = self._local.exchange
                if exchange is not None and exchange.abandoned:
                    raise BrokenPipeError("given up")
                yield piece
        finally:
            pieces.close()  # the pacer's turn goes to the next body now

    def _exchange(self, method: str, target: str, body: bytes,
                  payload: bytes | Generator[bytes] | None, headers: dict[str, str]) -> bytes:
        started = self.monotonic()
        self._count(sent=len(body))
        response, answer = self._converse(method, target, body, payload, headers, started)
        retry_after = _retry_after(response.getheader("Retry-After"), self.clock())
        status = response.status
        answer_signature = response.getheader(RESPONSE_SIGNATURE_HEADER)
        self._local.used_at = self.monotonic()
        if response.will_close:
            self._drop()
        if len(answer) > MAX_RESPONSE_BYTES:
            self._drop()
            raise _down(LinkDown(LinkReason.BAD_RESPONSE, "answer too large"), True)
        self._check_answer(headers, method, target, status, answer, answer_signature)
        if status != 200:
            raise _refused(status, answer, retry_after)
        seconds = self.monotonic() - started
        self._count(seconds=seconds)
        if self.pacer is not None and len(body) <= SMALL_REQUEST_BYTES:
            self.pacer.round_trip(seconds)  # the first pace of a measured link
        return _decompressed(answer)

    def _converse(self, method: str, target: str, body: bytes,
                  payload: bytes | Generator[bytes] | None, headers: dict[str, str],
                  started: float) -> tuple[http.client.HTTPResponse, bytes]:
        """Write the request and read the answer (on this thread's connection). A request
        given up by `abandon` fails as STALLED, whatever its thread then met."""
        exchange: _Exchange | None = None
        try:
            sent = writing = False
            try:
                connection = self._open()
                exchange = self._begin(connection, started)
                writing = bool(body)
                connection.request(method, target, body=payload, headers=headers)
                sent = True
                response = connection.getresponse()
                answer = response.read(MAX_RESPONSE_BYTES + 1)
            except TimeoutError as error:
                self._drop()
                raise _down(LinkDown(LinkReason.TIMEOUT, f"{method} timed out"), sent,
                            writing) from error
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError) as error:
                self._drop()
                raise _down(ConnectionClosed(LinkReason.NETWORK_ERROR,
                                             f"{method} failed: {type(error).__name__}"),
                            sent, writing) from error
            except (OSError, http.client.HTTPException) as error:
                self._drop()
                raise _down(LinkDown(LinkReason.NETWORK_ERROR,
                                     f"{method} failed: {type(error).__name__}"), sent,
                            writing) from error
            return response, answer
        except LinkDown as error:
            if exchange is None or not exchange.abandoned:
                raise
            stalled = LinkDown(LinkReason.STALLED, f"{method} given up: the link went silent"
                               " while it was on its way")
            stalled.answer_lost, stalled.body_cut = error.answer_lost, error.body_cut
            raise stalled from error
        finally:
            if exchange is not None:
                self._local.exchange = None
                with self._lock:
                    self._exchanges.pop(id(exchange), None)
                if exchange.abandoned:
                    self._drop()  # shut down under it, even if the answer made it

    def _begin(self, connection: http.client.HTTPConnection, started: float) -> _Exchange:
        exchange = self._local.exchange = _Exchange(connection, started)
        with self._lock:
            self._exchanges[id(exchange)] = exchange
        return exchange

    def _check_answer(self, request: dict[str, str], method: str, target: str, status: int,
                      answer: bytes, claimed: str | None) -> None:
        """Act only on answers the shore signed with this node's secret for this request.

        A 401 comes unsigned (the shore did not authenticate the request, so it has no secret
        to sign with); whatever a forged one makes the link do (block, relearn the clock) it
        undoes once the real shore answers. Anything else unsigned or mis-signed is not the
        shore's and is retried, never acted on."""
        if claimed is None:
            if status == 401:
                return
            self._drop()
            raise _down(LinkDown(LinkReason.RESPONSE_UNSIGNED,
                                 f"{method} answer {status} carries no shore signature"), True)
        if not response_signature_matches(self.secret, request, method, target, status,
                                          answer, claimed):
            self._drop()
            raise _down(LinkDown(LinkReason.RESPONSE_FORGED,
                                 f"{method} answer {status} is not signed by the shore"), True)

    def _open(self, timeout: float | None = None) -> http.client.HTTPConnection:
        """The kept-alive connection (opened if needed), its socket timeout set to `timeout`
        (default: the request timeout)."""
        timeout = self.timeout if timeout is None else timeout
        connection = self._local.connection
        if connection is not None and connection.sock is None:
            self._drop()  # closed by `close()` from another thread
            connection = None
        if connection is None:
            if self.scheme == "https":
                connection = http.client.HTTPSConnection(
                    self.host, self.port, timeout=timeout,
                    context=self.ssl_context or ssl.create_default_context())
            else:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.connection = connection
            with self._lock:
                self._open_connections.add(connection)
            connection.connect()
            self._count(opened=1)
            if connection.sock is not None:
                connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection


def tls_context(ca_file: str = "", client_cert_file: str = "",
                client_key_file: str = "") -> ssl.SSLContext:
    """A verifying client context: only `ca_file`'s CAs when given (pinning the shore's CA),
    else the system's; presents the client certificate when given."""
    context = ssl.create_default_context(cafile=ca_file or None)
    if client_cert_file:
        context.load_cert_chain(client_cert_file, client_key_file or None)
    return context


def _down(error: LinkDown, answer_lost: bool, writing: bool = False) -> LinkDown:
    error.answer_lost = answer_lost
    error.body_cut = writing and not answer_lost
    return error


def _decompressed(answer: bytes) -> bytes:
    try:
        return codec.decompress_bytes(answer, MAX_RESPONSE_BYTES, MAX_RESPONSE_DECOMPRESSED)
    except codec.WireError as error:
        raise LinkDown(LinkReason.BAD_RESPONSE, f"unreadable answer: {error}") from error


def _parse(raw: bytes, cls: type[codec.M]) -> codec.M:
    try:
        return codec.parse_message(raw, cls)
    except codec.WireError as error:
        raise LinkDown(LinkReason.BAD_RESPONSE, f"unreadable answer: {error}") from error


def _refused(status: int, answer: bytes, retry_after: float | None) -> ShoreRefused:
    reason, message = f"HTTP_{status}", f"the shore answered {status}"
    try:
        error = codec.parse_message(_decompressed(answer), pb.ErrorResponse)
    except LinkError:
        error = None
    server_time = None
    if error is not None and error.reason_code:
        reason, message = error.reason_code, error.message[:300] or message
        if error.HasField("retry_after_seconds") and retry_after is None:
            retry_after = float(error.retry_after_seconds)
        server_time = shore_moment(error.server_time_micros)
    refused = ShoreRefused(reason, message, status=status, retry_after=retry_after,
                           server_time=server_time)
    refused.resume_from = error.resume_from if error is not None else 0
    return refused


def shore_moment(micros: int) -> dt.datetime | None:
    """A time the shore sent, or None when it sent none (or one no datetime can hold)."""
    if not micros:
        return None
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        return None


def _retry_after(value: str | None, now: dt.datetime) -> float | None:
    """Retry-After as seconds (delta-seconds form; an HTTP date is read against `now`, the
    link's clock)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (moment - now).total_seconds())
