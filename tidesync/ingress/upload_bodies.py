"""Request bodies, read within their limit; uploads cut off mid-body resumed instead of sent
whole again.

When a ship's upload is cut (an outage, a reset) after part of its body arrived, the shore keeps
that part for a while, by the node and the SHA-256 of the whole body (the digest the request
signed, so the part belongs to an authenticated node). The ship's question what became of the
batch (`GET /sync/v1/batches/{id}?body=<sha256>`) is answered `BATCH_UNKNOWN` with
`resume_from`, the bytes kept; the ship then sends only the rest, as
`POST /sync/v1/batches?answer=ranges&resume=<offset>.<sha256 of the whole body>`, signed over
the rest. The shore joins the two and checks the whole body against that digest before it is
read as a batch; a part it no longer holds is refused (`RESUME_UNKNOWN`) and the ship sends the
whole body.

Kept in the server's memory only, bounded: `per_node` parts per node (the latest; a ship has
that many uploads in flight at most), none below
`min_bytes` (not worth a round trip), at most `max_bytes` in all (the oldest go first), for
`ttl_seconds`. A restart forgets them: the ship then sends the whole body, as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.ingress.auth import SignedRequest, check_body
from tidesync.wire.protocol import PayloadTooLarge

RESUME_UNKNOWN = "RESUME_UNKNOWN"
RESUME_MISMATCH = "RESUME_MISMATCH"
BAD_RESUME = "BAD_RESUME"
_RESUME = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")
_DIGEST = re.compile(r"[0-9a-f]{64}")


BODY_STALLED = "BODY_STALLED"
BODY_IDLE_SECONDS = 60.0
"""How long a request body may send nothing before the shore gives it up (see `read_body`)."""


class BodyStalled(TidesyncError):
    """A request body that stopped arriving: answered 408, the request's slots freed."""

    code = ErrorCode.REFUSED
    status, reason = 408, BODY_STALLED


class ResumeRefused(TidesyncError):
    """A resumed upload the shore cannot complete; `status` and `reason` for the answer."""

    code = ErrorCode.REFUSED

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed upload's body starts within the whole body, and the whole's digest."""

    offset: int
    whole_sha256: str


def resume_point(text: str | None) -> ResumePoint | None:
    """The `resume` query value `<offset>.<sha256 hex>` (None when absent)."""
    if text is None:
        return None
    match = _RESUME.fullmatch(text)
    if match is None or int(match.group(1)) == 0:
        raise ResumeRefused(400, BAD_RESUME, "resume must be <offset>.<sha256 hex of the body>")
    return ResumePoint(int(match.group(1)), match.group(2))


def body_digest(text: str | None) -> str | None:
    """The `body` query value of a fate question: a SHA-256 in hex, or None."""
    return text if text is not None and _DIGEST.fullmatch(text) else None


@dataclass
class PartialUploads:
    """The parts of cut-off upload bodies, by (node, SHA-256 of the whole body)."""

    max_bytes: int = 64 * 1024 * 1024
    min_bytes: int = 16 * 1024
    ttl_seconds: float = 600.0
    per_node: int = 4

    def __post_init__(self) -> None:
        self._held: OrderedDict[tuple[str, str], tuple[bytes, float]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def keep(self, node_id: str, whole_sha256: str, part: bytes, now: float) -> None:
        """Keep the first bytes of a body that was cut off (the node's latest parts only)."""
        with self._lock:
            if (node_id, whole_sha256) in self._held:
                self._drop((node_id, whole_sha256))
            if len(part) < self.min_bytes or len(part) > self.max_bytes:
                return
            mine = [key for key in self._held if key[0] == node_id]
            for key in mine[:max(0, len(mine) - self.per_node + 1)]:  # the oldest go
                self._drop(key)
            self._held[(node_id, whole_sha256)] = (part, now)
            self._size += len(part)
            while self._size > self.max_bytes:
                self._drop(next(iter(self._held)))

    def held(self, node_id: str, whole_sha256: str, now: float) -> bytes:
        """The part kept of that body (empty when none is, or it expired)."""
        with self._lock:
            self._expire(now)
            entry = self._held.get((node_id, whole_sha256))
            return entry[0] if entry else b""

    def take(self, node_id: str, whole_sha256: str, offset: int, now: float) -> bytes | None:
        """The part of exactly `offset` bytes, no longer kept; None when it is not held."""
        with self._lock:
            self._expire(now)
            entry = self._held.get((node_id, whole_sha256))
            if entry is None or len(entry[0]) != offset:
                return None
            self._drop((node_id, whole_sha256))
            return entry[0]

    @property
    def size(self) -> int:
        return self._size

    def _expire(self, now: float) -> None:
        for key in [key for key, (_, at) in self._held.items() if now - at > self.ttl_seconds]:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        part, _ = self._held.pop(key)
        self._size -= len(part)


async def read_body(request: Request, limit: int,
                    on_cut: Callable[[bytes], None] | None = None,
                    idle_seconds: float = BODY_IDLE_SECONDS) -> bytes:
    """The request body, read in chunks and abandoned as soon as it passes `limit` bytes;
    `on_cut` gets what arrived when the client goes away mid-body, or when nothing more of it
    arrives for `idle_seconds`.

    A client that went away without a word (a ship that lost power, or a link that went
    silent and whose reset never came through) would otherwise hold the request, and the
    node's and the server's slots with it, for as long as the connection looks open: nothing
    in the server ends a body that stops arriving."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes exceeds {limit}")
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(stream), idle_seconds)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise BodyStalled(f"no body bytes for {idle_seconds:.0f} s") from None
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body exceeds {limit} bytes")
            chunks.append(chunk)
    except (ClientDisconnect, BodyStalled):
        if on_cut is not None:
            on_cut(b"".join(chunks))
        raise
    return b"".join(chunks)


async def upload_body(partials: PartialUploads, request: Request, signed: SignedRequest,
                      limit: int, charge: Callable[[int], None],
                      monotonic: Callable[[], float] = time.monotonic,
                      idle_seconds: float = BODY_IDLE_SECONDS) -> bytes:
    """An upload's whole body (after `check_body` on what this request carried): kept in part
    when the upload is cut off, joined to the part kept before when it resumes one."""
    point = resume_point(request.query_params.get("resume"))
    node = signed.node_id
    whole = point.whole_sha256 if point else signed.content_sha256
    before = b"" if point is None else partials.held(node, whole, monotonic())
    if point is not None and len(before) != point.offset:
        before = b""  # not the part this request continues: a cut keeps nothing

    def cut(received: bytes) -> None:
        if point is None or before:
            charge(len(received))  # counted against the node's quota like a whole body
            partials.keep(node, whole, before + received, monotonic())

    rest = await read_body(request, limit - (point.offset if point else 0), on_cut=cut,
                           idle_seconds=idle_seconds)
    charge(len(rest))
    check_body(signed, rest)
    if point is None:
        return rest
    part = partials.take(node, whole, point.offset, monotonic())
    if part is None:
        raise ResumeRefused(409, RESUME_UNKNOWN, "the shore keeps no part of this body:"
                            " send it whole")
    body = part + rest
    if hashlib.sha256(body).hexdigest() != whole:
        raise ResumeRefused(400, RESUME_MISMATCH, "the joined body does not match its digest")
    return body
