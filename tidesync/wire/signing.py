"""Request and response signing for /sync/v1, shared by the ship and the shore.

HMAC-SHA256 with the node's secret: requests over method, path with query, node, timestamp,
request id and the body's SHA-256; answers over that request plus the status and body digest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Mapping

NODE_HEADER = "Tidesync-Node"
TIMESTAMP_HEADER = "Tidesync-Timestamp"
REQUEST_ID_HEADER = "Tidesync-Request-Id"
CONTENT_SHA256_HEADER = "Tidesync-Content-SHA256"
SIGNATURE_HEADER = "Tidesync-Signature"
SIGNED_HEADERS = (NODE_HEADER, TIMESTAMP_HEADER, REQUEST_ID_HEADER, CONTENT_SHA256_HEADER,
                  SIGNATURE_HEADER)

SCHEME = "TIDESYNC-HMAC-SHA256"
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{8,128}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def canonical_request(method: str, path_with_query: str, node_id: str, timestamp: str,
                      request_id: str, content_sha256: str) -> bytes:
    """The exact bytes both sides sign: one field per line."""
    return "\n".join((SCHEME, method.upper(), path_with_query, node_id, timestamp, request_id,
                      content_sha256)).encode("utf-8")


def signature(secret: bytes, canonical: bytes) -> str:
    return hmac.new(secret, canonical, hashlib.sha256).hexdigest()


def sign_request(node_id: str, secret: bytes, method: str, path_with_query: str, body: bytes,
                 now: dt.datetime, request_id: str) -> dict[str, str]:
    """The headers that authenticate one request; send them with exactly this path and body.

    `path_with_query` is the request target as sent (e.g. "/sync/v1/receipts?cursor=7"),
    without a trailing "?". `request_id` must be new for every request (a UUID is fine).
    """
    if REQUEST_ID_PATTERN.fullmatch(request_id) is None:
        raise ValueError("request_id must be 8-128 characters of [A-Za-z0-9._:-]")
    timestamp = str(int((now - _EPOCH).total_seconds()))
    digest = hashlib.sha256(body).hexdigest()
    canonical = canonical_request(method, path_with_query, node_id, timestamp, request_id,
                                  digest)
    return {
        NODE_HEADER: node_id,
        TIMESTAMP_HEADER: timestamp,
        REQUEST_ID_HEADER: request_id,
        CONTENT_SHA256_HEADER: digest,
        SIGNATURE_HEADER: signature(secret, canonical),
    }


# ----------------------------------------------------------------------------- responses

RESPONSE_SIGNATURE_HEADER = "Tidesync-Response-Signature"
RESPONSE_SCHEME = "TIDESYNC-HMAC-SHA256-RESPONSE"
"""A different first line than requests': a request signature never passes as an answer's."""


def canonical_response(method: str, path_with_query: str, node_id: str, timestamp: str,
                       request_id: str, status: int, body_sha256: str) -> bytes:
    """The bytes the shore signs for one answer: the request it answers (as the ship sent it)
    plus the status and the body's SHA-256, one field per line."""
    return "\n".join((RESPONSE_SCHEME, method.upper(), path_with_query, node_id, timestamp,
                      request_id, str(status), body_sha256)).encode("utf-8")


def sign_response(secret: bytes, request: Mapping[str, str], method: str,
                  path_with_query: str, status: int, body: bytes) -> str:
    """The signature of an answer to the request whose signed headers are `request`."""
    canonical = canonical_response(method, path_with_query, request[NODE_HEADER],
                                   request[TIMESTAMP_HEADER], request[REQUEST_ID_HEADER],
                                   status, hashlib.sha256(body).hexdigest())
    return signature(secret, canonical)


def response_signature_matches(secret: bytes, request: Mapping[str, str], method: str,
                               path_with_query: str, status: int, body: bytes,
                               claimed: str) -> bool:
    """True if `claimed` is the node secret's signature of this answer to this request."""
    expected = sign_response(secret, request, method, path_with_query, status, body)
    return hmac.compare_digest(expected, claimed.strip().lower())
