"""The /sync/v1 endpoints. Every request passes the same gate: global in-flight cap, signature,
client identity, per-node rate and concurrency, bounded body read, body digest, replay check.

Blocking work (the sync tables, the event store, decompression) runs in the thread pool. The
routes see the tables only through the protocols of `tidesync.ingress.stores`.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from google.protobuf.message import Message
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tidesync.apps.master_key import MasterKeyError
from tidesync.apps.nodes import NodeStoreUnavailable
from tidesync.domain.clock import Clock
from tidesync.domain.downlink_command import (
    MAX_ACKS_PER_REQUEST,
    BadCursor,
    DownlinkUnavailable,
    parse_cursor,
)
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.ingress.answers import BadBatchId, batch_id_from_path, compact_answer
from tidesync.ingress.auth import (
    AuthError,
    AuthReason,
    IdentitySource,
    SignedRequest,
    check_body,
    check_identity,
    check_not_replayed,
    check_signature,
    check_timestamp,
    signed_request,
)
from tidesync.ingress.database import StoreUnavailable, UnstorableValue
from tidesync.ingress.dictionaries import DictionaryCache
from tidesync.ingress.heartbeats import BadHeartbeat
from tidesync.ingress.limits import LimitExceeded, RequestLimiter
from tidesync.ingress.nodes import NodeCredentials, NodeDirectory
from tidesync.ingress.receipts import MAX_COMPACT_PAGE, MAX_PAGE, BadPageRequest, page_request
from tidesync.ingress.reconcile_answers import MAX_ANSWER_BYTES, decode_answer, keep_answer
from tidesync.ingress.rule_reports import BadRuleReport
from tidesync.ingress.rules import (
    NodeConfig,
    NoReleasedRules,
    RuleOffer,
    RulesUnavailable,
    config_response,
    with_link,
)
from tidesync.ingress.stores import SyncTables
from tidesync.ingress.upload_bodies import (
    BODY_IDLE_SECONDS,
    BodyStalled,
    PartialUploads,
    ResumeRefused,
    body_digest,
    read_body,
    upload_body,
)
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import (
    PROTOCOL_VERSION_HEADER,
    UnsupportedProtocol,
    WireError,
    WireReason,
)
from tidesync.wire.dictionaries import MAX_DICTIONARY_BYTES, dictionary_id, load_dictionary
from tidesync.wire.protocol import ShapeTooLarge
from tidesync.wire.signing import RESPONSE_SIGNATURE_HEADER, sign_response

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
HEARTBEAT_MAX_BYTES = 1 << 20
DICTIONARY_BODY = MAX_DICTIONARY_BYTES + 4096
"""Most bytes of a dictionary upload, compressed or not (a dictionary hardly compresses)."""
STORE_RETRY_AFTER = 5
_FRESH_AFTER_FAILURE = 1.0
"""A failed signature re-reads the node if its cached credentials are older than this (s)."""



class IngressReason(enum.StrEnum):
    NODE_MISMATCH = "NODE_MISMATCH"
    TOO_MANY_EVENTS = "TOO_MANY_EVENTS"
    BAD_CURSOR = "BAD_CURSOR"
    BAD_HEARTBEAT = "BAD_HEARTBEAT"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    KEYS_UNAVAILABLE = "KEYS_UNAVAILABLE"
    SYNC_STORE_NOT_CONFIGURED = "SYNC_STORE_NOT_CONFIGURED"
    TOO_MANY_ACKS = "TOO_MANY_ACKS"
    DOWNLINK_UNAVAILABLE = "DOWNLINK_UNAVAILABLE"
    UNSTORABLE_VALUE = "UNSTORABLE_VALUE"
    BAD_RULE_REPORT = "BAD_RULE_REPORT"
    BAD_BATCH_ID = "BAD_BATCH_ID"
    BATCH_UNKNOWN = "BATCH_UNKNOWN"
    TOO_MANY_RULE_REPORTS = "TOO_MANY_RULE_REPORTS"


class IngressError(TidesyncError):
    """A request refused with an HTTP status and a stable reason code."""

    code = ErrorCode.REFUSED

    def __init__(self, status: int, reason: str, message: str,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.retry_after = status, reason, retry_after
        self.resume_from = 0


@dataclass(frozen=True)
class IngressSettings:
    max_compressed_bytes: int
    max_decompressed_bytes: int
    max_events_per_batch: int
    window: dt.timedelta
    heartbeat_interval_seconds: int
    accept_wire_v2: bool = True
    """False: refuse column-wise batches and zstd dictionaries as a shore of major 1 does."""
    body_idle_seconds: float = BODY_IDLE_SECONDS
    """A request body that sends nothing for this long is given up (`read_body`)."""


@dataclass(frozen=True)
class Call:
    """An authenticated request: who sent it, its body, and the server time it arrived."""

    node_id: str
    signed: SignedRequest
    request: Request
    body: bytes
    now: dt.datetime


class DownlinkApi(Protocol):
    """What the command endpoints need of the downlink (tidesync.shore.downlink)."""

    def page(self, node_id: str, cursor: str, limit: int) -> pb.CommandsPage: ...

    def acknowledge(self, node_id: str, acks: pb.CommandAcks) -> pb.CommandAcksResponse: ...

    def close(self) -> None: ...


Store = Callable[[Any], Message]
"""A request's writes and answer, run inside its transaction (given its connection)."""
Handler = Callable[[Call], Store]
"""Checks and decodes a request (in the thread pool, before any transaction opens)."""


class Ingress:
    """The sync API: its routes and the parts they use. `close()` releases the database."""

    def __init__(self, settings: IngressSettings, directory: NodeDirectory,
                 limiter: RequestLimiter, identity: IdentitySource,
                 tables: SyncTables[Any] | None, clock: Clock,
                 offer: RuleOffer | None = None) -> None:
        self.settings, self.directory, self.limiter = settings, directory, limiter
        self.identity, self.tables, self.clock = identity, tables, clock
        self.offer = offer or RuleOffer(NoReleasedRules())
        self.downlink: DownlinkApi | None = None
        self.downlink_refusal = "the downlink is not configured on this server"
        self.dictionaries = DictionaryCache(tables.dictionaries if tables else None)
        self.partials = PartialUploads()

    def use_downlink(self, downlink: DownlinkApi | None, refusal: str = "") -> None:
        """Serve the command endpoints from `downlink`; None answers them 503 with
        `refusal` (e.g. on an event store the downlink does not support yet)."""
        self.downlink = downlink
        if refusal:
            self.downlink_refusal = refusal

    def routes(self) -> list[Route]:
        max_batch = self.settings.max_compressed_bytes
        heartbeat = min(max_batch, HEARTBEAT_MAX_BYTES)
        return [
            Route("/sync/v1/batches", self._endpoint(self._upload, max_batch, resumable=True),
                  methods=["POST"]),
            Route("/sync/v1/batches/{batch_id}", self._endpoint(self._batch_fate, 0),
                  methods=["GET"]),
            Route("/sync/v1/receipts", self._endpoint(self._receipts, 0), methods=["GET"]),
            Route("/sync/v1/heartbeat", self._endpoint(self._heartbeat, heartbeat),
                  methods=["POST"]),
            Route("/sync/v1/dictionaries", self._endpoint(self._dictionary, DICTIONARY_BODY),
                  methods=["POST"]),
            Route("/sync/v1/config", self._endpoint(self._config, 0), methods=["GET"]),
            Route("/sync/v1/commands", self._endpoint(self._commands, 0), methods=["GET"]),
            Route("/sync/v1/command-acks", self._endpoint(self._command_acks, max_batch),
                  methods=["POST"]),
            Route("/sync/v1/reconcile-answers",
                  self._endpoint(self._reconcile_answer, min(max_batch, MAX_ANSWER_BYTES)),
                  methods=["POST"]),
        ]

    def start(self) -> None:
        """Connect and bring the schema up to date (blocking). The database being down is
        logged, not fatal: requests answer 503 until it is back."""
        if self.tables is not None:
            self.tables.database.start()

    def close(self) -> None:
        self.directory.close()
        self.offer.close()
        if self.downlink is not None:
            self.downlink.close()
        if self.tables is not None:
            self.tables.database.close()

    # ------------------------------------------------------------------------ handlers

    def _upload(self, call: Call) -> Store:
        raw, batch = codec.open_batch(call.body, self.settings.max_compressed_bytes,
                                      self.settings.max_decompressed_bytes,
                                      max_events=self.settings.max_events_per_batch,
                                      dictionaries=self.dictionaries.lookup(call.node_id),
                                      accept_v2=self.settings.accept_wire_v2)
        _check_sender(batch.node_id, call)
        tables = self._tables()
        inbox, answers = tables.inbox, tables.answers
        ranges = call.request.query_params.get("answer") == "ranges"

        def store(conn: Any) -> Message:
            full = inbox._receive(conn, call.node_id, raw, batch, call.now)
            compact = compact_answer(batch, full)
            if answers is not None and len(batch.batch_id) == 16:
                # Kept in the receiving transaction: an answer exists iff the batch is in.
                answers._remember(conn, call.node_id, batch.batch_id, compact, call.now)
            return compact if ranges else full
        return store

    def _batch_fate(self, call: Call) -> Store:
        """What the shore answered one of the node's batches (kept a few days), or 404
        BATCH_UNKNOWN: then the batch never arrived (or too long ago) and is sent again."""
        codec.check_protocol_version(call.request.headers.get(PROTOCOL_VERSION_HEADER, ""))
        try:
            batch_id = batch_id_from_path(call.request.path_params.get("batch_id", ""))
        except BadBatchId as error:
            raise IngressError(400, IngressReason.BAD_BATCH_ID, str(error)) from None
        answers = self._tables().answers
        digest = body_digest(call.request.query_params.get("body"))

        def recall(conn: Any) -> Message:
            answer = (None if answers is None
                      else answers._recall(conn, call.node_id, batch_id, call.now))
            if answer is None:
                unknown = IngressError(404, IngressReason.BATCH_UNKNOWN,
                                       "no answer to this batch is known")
                if digest is not None:  # the part of its body kept, if it was cut off
                    unknown.resume_from = len(self.partials.held(call.node_id, digest,
                                                                 time.monotonic()))
                raise unknown
            return answer
        return recall

    def _dictionary(self, call: Call) -> Store:
        """Keep a zstd dictionary the node trained; answer its id (computed here)."""
        store = self._tables().dictionaries
        if store is None or not self.settings.accept_wire_v2:
            refusal = UnsupportedProtocol("this server takes no zstd dictionaries")
            refusal.supported = (codec.PROTOCOL_VERSION,)
            raise refusal
        message = codec.decompress_message(call.body, pb.WireDictionary,
                                           max_compressed=DICTIONARY_BODY,
                                           max_decompressed=DICTIONARY_BODY)
        _check_sender(message.node_id, call)
        content = bytes(message.dictionary)
        name = dictionary_id(content)
        self.dictionaries.put(call.node_id, name, load_dictionary(content))

        def keep(conn: Any) -> Message:
            store._keep(conn, call.node_id, name, content, call.now)
            return pb.WireDictionaryResponse(dictionary_id=name)
        return keep

    def _receipts(self, call: Call) -> Store:
        codec.check_protocol_version(call.request.headers.get(PROTOCOL_VERSION_HEADER, ""))
        params = call.request.query_params
        ranged = params.get("form") == "ranges"
        try:
            after, limit = page_request(params.get("cursor", ""), params.get("limit", ""),
                                        MAX_COMPACT_PAGE if ranged else MAX_PAGE)
        except BadPageRequest as error:
            raise IngressError(400, IngressReason.BAD_CURSOR, str(error)) from None
        receipts = self._tables().receipts
        if ranged:
            return lambda conn: receipts._compact_page(conn, call.node_id, after, limit)
        return lambda conn: receipts._page(conn, call.node_id, after, limit)

    def _heartbeat(self, call: Call) -> Store:
        heartbeat = codec.decompress_message(
            call.body, pb.Heartbeat, max_compressed=HEARTBEAT_MAX_BYTES,
            max_decompressed=4 * HEARTBEAT_MAX_BYTES)
        _check_sender(heartbeat.node_id, call)
        heartbeats = self._tables().heartbeats
        offered = self._offered_version(call.node_id)

        def store(conn: Any) -> Message:
            try:
                heartbeats._record(conn, call.node_id, heartbeat, call.now)
            except BadHeartbeat as error:
                raise IngressError(400, IngressReason.BAD_HEARTBEAT, str(error)) from None
            except BadRuleReport as error:
                raise IngressError(error.status, error.reason, str(error)) from None
            response = pb.HeartbeatResponse(
                server_time_micros=_micros(call.now),
                next_interval_seconds=self.settings.heartbeat_interval_seconds)
            # Only a node that runs another set than it is offered is told to fetch it.
            if offered is not None and offered != heartbeat.active_config_version:
                response.config_version = offered
            return response
        return store

    def _config(self, call: Call) -> Store:
        codec.check_protocol_version(call.request.headers.get(PROTOCOL_VERSION_HEADER, ""))
        response = config_response(self._node_config(call.node_id),
                                   self._control(call.node_id))
        return lambda conn: response

    def _node_config(self, node_id: str) -> NodeConfig:
        # The node authenticated a moment ago: its profile comes from the directory's cache.
        known = self.directory.lookup(node_id)
        return with_link(self.offer.for_node(node_id, known.profile), known.link)

    def _offered_version(self, node_id: str) -> str | None:
        """The config version the node is offered; None when the rules cannot be read (the
        heartbeat is stored all the same, the node asks again next time)."""
        try:
            return self._node_config(node_id).version
        except RulesUnavailable as error:
            log.warning("released rules unreadable for a heartbeat (%s)", error)
            return None

    def _control(self, node_id: str) -> pb.ControlParameters:
        # The node's uplink limit set on the shore (`tidesync nodes uplink`; 0: none, the
        # ship keeps its own [ship] limit).
        link = self.directory.lookup(node_id).link
        return pb.ControlParameters(
            batch_max_events=self.settings.max_events_per_batch,
            batch_max_uncompressed_bytes=self.settings.max_decompressed_bytes,
            heartbeat_interval_seconds=self.settings.heartbeat_interval_seconds,
            rate_bytes_per_sec=link.uplink_rate, burst_bytes=link.uplink_burst)

    def _commands(self, call: Call) -> Store:
        codec.check_protocol_version(call.request.headers.get(PROTOCOL_VERSION_HEADER, ""))
        params = call.request.query_params
        cursor, limit = params.get("cursor", ""), params.get("limit", "")
        try:
            parse_cursor(cursor)
        except BadCursor as error:
            raise IngressError(400, IngressReason.BAD_CURSOR, str(error)) from None
        if limit and (not limit.isdigit() or int(limit) < 1 or len(limit) > 9):
            raise IngressError(400, IngressReason.BAD_CURSOR, "limit must be a positive integer")
        downlink = self._downlink()
        return lambda conn: downlink.page(call.node_id, cursor, int(limit or 0))

    def _command_acks(self, call: Call) -> Store:
        acks = codec.decompress_message(
            call.body, pb.CommandAcks, max_compressed=self.settings.max_compressed_bytes,
            max_decompressed=self.settings.max_decompressed_bytes)
        _check_sender(acks.node_id, call)
        if len(acks.acks) > MAX_ACKS_PER_REQUEST:
            raise IngressError(413, IngressReason.TOO_MANY_ACKS,
                               f"at most {MAX_ACKS_PER_REQUEST} acks per request")
        downlink = self._downlink()
        # The acks commit in the downlink's own transaction, before the answer is sent.
        return lambda conn: downlink.acknowledge(call.node_id, acks)

    def _reconcile_answer(self, call: Call) -> Store:
        answer = decode_answer(call.body, self.settings.max_compressed_bytes)
        _check_sender(answer.node_id, call)
        return lambda conn: keep_answer(conn, call.node_id, answer)

    def _downlink(self) -> DownlinkApi:
        if self.downlink is None:
            raise IngressError(503, IngressReason.DOWNLINK_UNAVAILABLE, self.downlink_refusal,
                               300)
        return self.downlink

    def _tables(self) -> SyncTables[Any]:
        if self.tables is None:
            raise IngressError(503, IngressReason.SYNC_STORE_NOT_CONFIGURED,
                               "the sync API has no tables configured", 60)
        return self.tables

    # ------------------------------------------------------------------------ the gate

    def _endpoint(self, handler: Handler, body_limit: int, resumable: bool = False
                  ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            request_id = request.headers.get("tidesync-request-id", "")[:128]
            signer = ResponseSigner()
            try:
                response = await self._authenticated(request, handler, body_limit, signer,
                                                     resumable)
            except Exception as error:  # noqa: BLE001 - every failure becomes an ErrorResponse
                response = _error_answer(error, request, request_id, self.clock())
            return signer.sign(request, response)
        return endpoint

    async def _authenticated(self, request: Request, handler: Handler, body_limit: int,
                             signer: ResponseSigner, resumable: bool) -> Response:
        signed = signed_request(request.headers)
        now = self.clock()
        check_timestamp(signed, now, self.settings.window)
        signer.secret = await self._check_signature(request, signed, now)
        check_identity(signed, self.identity.identity(request.scope))
        # The server's slots go to authenticated nodes only: unsigned floods cannot take them.
        with self.limiter.request_slot(), self.limiter.node_slot(signed.node_id):
            if resumable:  # an upload: cut off, it is kept in part (upload_bodies)
                body = await upload_body(self.partials, request, signed, body_limit, partial(
                    self.limiter.charge_bytes, signed.node_id),
                    idle_seconds=self.settings.body_idle_seconds)
            else:
                body = await read_body(request, body_limit,
                                       idle_seconds=self.settings.body_idle_seconds)
                self.limiter.charge_bytes(signed.node_id, len(body))
                check_body(signed, body)
            call = Call(signed.node_id, signed, request, body, now)
            message = await run_in_threadpool(self._handle, handler, call)
        return protobuf_response(message)

    def _handle(self, handler: Handler, call: Call) -> Message:
        tables = self._tables()
        store = handler(call)
        # One transaction: the request id counts as used only if the request's own writes
        # commit (a request that failed may be retried as it was), and costs no extra commit.
        with tables.database.transaction() as conn:
            check_not_replayed(call.signed, tables.nonces.within(conn), call.now,
                               self.settings.window)
            return store(conn)

    async def _check_signature(self, request: Request, signed: SignedRequest,
                               now: dt.datetime) -> bytes:
        """The node secret that made the request's signature."""
        target = request_target(request.scope)
        credentials = await self._credentials(signed.node_id, None)
        try:
            return check_signature(signed, request.method, target, credentials, now)
        except AuthError as error:
            # A node registered or rotated seconds ago may not be in the cache yet.
            if error.reason not in (AuthReason.AUTH_BAD_SIGNATURE, AuthReason.NODE_UNKNOWN):
                raise
            fresh = await self._credentials(signed.node_id, _FRESH_AFTER_FAILURE)
            if fresh is credentials:
                raise
            return check_signature(signed, request.method, target, fresh, now)

    async def _credentials(self, node_id: str, max_age: float | None) -> NodeCredentials:
        cached = self.directory.cached(node_id, max_age)
        if cached is not None:
            return cached
        return await run_in_threadpool(self.directory.lookup, node_id, max_age)


# ----------------------------------------------------------------------------- helpers


class ResponseSigner:
    """Signs an answer with the node secret that authenticated its request.

    Every answer after authentication is signed (pages, acks and refusals alike), so a
    man in the middle cannot forge one. Answers to requests that did not authenticate (401)
    cannot be: the shore has no secret it trusts the sender with."""

    def __init__(self) -> None:
        self.secret: bytes | None = None

    def sign(self, request: Request, response: Response) -> Response:
        if self.secret is not None:
            response.headers[RESPONSE_SIGNATURE_HEADER] = sign_response(
                self.secret, request.headers, request.method, request_target(request.scope),
                response.status_code, bytes(response.body))
        return response



def _check_sender(node_id: str, call: Call) -> None:
    if node_id != call.node_id:
        raise IngressError(403, IngressReason.NODE_MISMATCH,
                           "the message names another node than the one authenticated")


def request_target(scope: Mapping[str, Any]) -> str:
    """The path with query exactly as the client sent it (what it signed)."""
    path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    query: bytes = scope.get("query_string", b"")
    return (path + b"?" + query if query else path).decode("latin-1")


def protobuf_response(message: Message, status: int = 200,
                      headers: dict[str, str] | None = None) -> Response:
    return Response(codec.compress(message), status_code=status, media_type=PROTOBUF,
                    headers={"Content-Encoding": "zstd", **(headers or {})})


def _error_answer(error: Exception, request: Request, request_id: str,
                  now: dt.datetime) -> Response:
    status, reason, retry_after = _classify(error)
    # The server's time lets a client whose clock drifted sign its next request correctly.
    body = pb.ErrorResponse(reason_code=reason, message=_message(error, status),
                            request_id=request_id, server_time_micros=_micros(now))
    if status == 426 or reason in (WireReason.UNSUPPORTED_PROTOCOL,
                                   WireReason.MALFORMED_PROTOCOL_VERSION):
        body.supported_protocol_versions.extend(
            error.supported if isinstance(error, UnsupportedProtocol)
            else codec.SUPPORTED_PROTOCOL_VERSIONS)
    headers: dict[str, str] = {}
    if isinstance(error, IngressError) and error.resume_from:
        body.resume_from = error.resume_from
    if retry_after is not None:
        body.retry_after_seconds = retry_after
        headers["Retry-After"] = str(retry_after)
    if status == 401:
        headers["WWW-Authenticate"] = "TIDESYNC-HMAC-SHA256"
    node = request.headers.get("tidesync-node", "")[:63]
    log.log(logging.ERROR if status >= 500 and status != 503 else logging.INFO,
            "refused %s %s node=%s request_id=%s status=%d reason=%s", request.method,
            request.url.path, node, request_id, status, reason)
    return protobuf_response(body, status, headers)


def _classify(error: Exception) -> tuple[int, str, int | None]:
    """HTTP status, reason code and Retry-After seconds for a failure."""
    if isinstance(error, AuthError):
        return 401, error.reason.value, None
    if isinstance(error, LimitExceeded):
        return 429, error.reason.value, error.retry_after
    if isinstance(error, IngressError):
        return error.status, error.reason, error.retry_after
    if isinstance(error, ResumeRefused | BodyStalled):
        return error.status, error.reason, None
    if isinstance(error, WireError):
        return _wire_status(error), error.reason.value, None
    if isinstance(error, StoreUnavailable | NodeStoreUnavailable | DownlinkUnavailable
                  | RulesUnavailable):
        return 503, IngressReason.STORE_UNAVAILABLE.value, STORE_RETRY_AFTER
    if isinstance(error, UnstorableValue):
        return 400, IngressReason.UNSTORABLE_VALUE.value, None
    if isinstance(error, ClientDisconnect):
        return 400, "CLIENT_DISCONNECTED", None
    if isinstance(error, MasterKeyError):
        log.error("node secrets cannot be opened: %s", error)
        return 503, IngressReason.KEYS_UNAVAILABLE.value, 60
    log.exception("unexpected failure in the sync API", exc_info=error)
    return 500, "INTERNAL_ERROR", None


def _wire_status(error: WireError) -> int:
    if isinstance(error, ShapeTooLarge) or error.reason in (
        WireReason.PAYLOAD_TOO_LARGE, WireReason.DECOMPRESSED_TOO_LARGE
    ):
        return 413
    if isinstance(error, UnsupportedProtocol) and (
        error.reason is WireReason.UNSUPPORTED_PROTOCOL
    ):
        return 426
    if error.reason is WireReason.UNKNOWN_DICTIONARY:
        return 409
    return 400


def _message(error: Exception, status: int) -> str:
    # Unexpected failures keep their details in the log, not in the answer.
    return "internal error" if status == 500 else str(error)


def _micros(moment: dt.datetime) -> int:
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
