"""Request signing for /sync/v1: the shore's checks of the client's `sign_request`.

The signer itself lives in `tidesync.wire.signing` (the ship imports it from there) and is
re-exported here. A timestamp window plus a persisted request-id cache stop replays.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.node import NodeStatus
from tidesync.ingress.nodes import NodeCredentials
from tidesync.wire.signing import (
    CONTENT_SHA256_HEADER,
    NODE_HEADER,
    REQUEST_ID_HEADER,
    REQUEST_ID_PATTERN,
    SCHEME,
    SIGNATURE_HEADER,
    SIGNED_HEADERS,
    TIMESTAMP_HEADER,
    canonical_request,
    sign_request,
    signature,
)

DEFAULT_WINDOW = dt.timedelta(minutes=5)
_REQUEST_ID = REQUEST_ID_PATTERN
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class AuthReason(enum.StrEnum):
    AUTH_MISSING = "AUTH_MISSING"
    AUTH_MALFORMED = "AUTH_MALFORMED"
    AUTH_BAD_SIGNATURE = "AUTH_BAD_SIGNATURE"
    AUTH_BAD_DIGEST = "AUTH_BAD_DIGEST"
    AUTH_EXPIRED_TIMESTAMP = "AUTH_EXPIRED_TIMESTAMP"
    AUTH_REPLAYED = "AUTH_REPLAYED"
    AUTH_IDENTITY_MISMATCH = "AUTH_IDENTITY_MISMATCH"
    NODE_UNKNOWN = "NODE_UNKNOWN"
    NODE_REVOKED = "NODE_REVOKED"


class AuthError(TidesyncError):
    """A request that is not (or no longer) authentic; answered 401 with `reason`."""

    code = ErrorCode.UNAUTHENTICATED

    def __init__(self, reason: AuthReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ----------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """The authentication headers of a request, syntactically checked."""

    node_id: str
    timestamp: str
    request_id: str
    content_sha256: str
    signature: str

    @property
    def signed_at(self) -> dt.datetime:
        return _EPOCH + dt.timedelta(seconds=int(self.timestamp))


def signed_request(headers: Mapping[str, str]) -> SignedRequest:
    """The request's authentication headers; AUTH_MISSING / AUTH_MALFORMED if unusable."""
    values = [headers.get(name, "") for name in SIGNED_HEADERS]
    missing = [name for name, value in zip(SIGNED_HEADERS, values, strict=True) if not value]
    if missing:
        raise AuthError(AuthReason.AUTH_MISSING, f"missing {', '.join(missing)}")
    request = SignedRequest(*values)
    if _TIMESTAMP.fullmatch(request.timestamp) is None:
        raise AuthError(AuthReason.AUTH_MALFORMED, f"{TIMESTAMP_HEADER} is not unix seconds")
    if _REQUEST_ID.fullmatch(request.request_id) is None:
        raise AuthError(AuthReason.AUTH_MALFORMED, f"{REQUEST_ID_HEADER} is malformed")
    for name, value in ((CONTENT_SHA256_HEADER, request.content_sha256),
                        (SIGNATURE_HEADER, request.signature)):
        if _HEX_DIGEST.fullmatch(value) is None:
            raise AuthError(AuthReason.AUTH_MALFORMED, f"{name} is not 64 lower-case hex digits")
    return request


def check_timestamp(request: SignedRequest, now: dt.datetime,
                    window: dt.timedelta = DEFAULT_WINDOW) -> None:
    # Compared as whole seconds: a 12-digit timestamp lies beyond what a datetime can hold.
    skew = abs(int(request.timestamp) - (now - _EPOCH) // dt.timedelta(seconds=1))
    if skew > window // dt.timedelta(seconds=1):
        raise AuthError(AuthReason.AUTH_EXPIRED_TIMESTAMP,
                        f"timestamp is more than {int(window.total_seconds())} s from server time")


def check_signature(request: SignedRequest, method: str, path_with_query: str,
                    credentials: NodeCredentials, now: dt.datetime) -> bytes:
    """The node is known and active and one of its valid secrets made the signature; returns
    that secret (the answer is signed with it)."""
    if credentials.status is None:
        raise AuthError(AuthReason.NODE_UNKNOWN, "unknown node")
    if credentials.status is NodeStatus.REVOKED:
        raise AuthError(AuthReason.NODE_REVOKED, "node is revoked")
    canonical = canonical_request(method, path_with_query, request.node_id, request.timestamp,
                                  request.request_id, request.content_sha256)
    # Every valid secret is tried, so timing does not tell which one matched.
    matched: bytes | None = None
    for secret in credentials.secrets_at(now):
        if hmac.compare_digest(signature(secret, canonical), request.signature):
            matched = secret
    if matched is None:
        raise AuthError(AuthReason.AUTH_BAD_SIGNATURE, "signature does not match")
    return matched


def check_body(request: SignedRequest, body: bytes) -> None:
    """The body is the one the signature covers."""
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest(), request.content_sha256):
        raise AuthError(AuthReason.AUTH_BAD_DIGEST, "body does not match its signed digest")


class NonceStore(Protocol):
    def remember(self, node_id: str, request_id: str, expires_at: dt.datetime,
                 now: dt.datetime) -> bool:
        """Record a request id; False if it was already recorded and has not expired."""
        ...


def check_not_replayed(request: SignedRequest, nonces: NonceStore, now: dt.datetime,
                       window: dt.timedelta = DEFAULT_WINDOW) -> None:
    """Record the request id (blocking); a second use inside the window is a replay."""
    # A request cannot pass the timestamp check after signed_at + window: forget it then.
    if not nonces.remember(request.node_id, request.request_id, request.signed_at + window, now):
        raise AuthError(AuthReason.AUTH_REPLAYED, "request id was already used")


# ----------------------------------------------------------------------------- client identity


@dataclass(frozen=True)
class IdentitySource:
    """Where a verified client-certificate identity may come from.

    uvicorn verifies client certificates (`--ssl-cert-reqs 2 --ssl-ca-certs …`) but does not
    put the certificate into the ASGI scope, so behind uvicorn the identity comes from a
    TLS-terminating proxy header, believed only from `trusted_proxies`. Servers implementing
    the ASGI TLS extension (hypercorn) give `client_cert_name`, which is used directly.
    """

    header: str = ""
    trusted_proxies: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()

    @classmethod
    def of(cls, header: str, trusted_proxies: Iterable[str]) -> IdentitySource:
        addresses = (part.strip() for part in trusted_proxies)
        return cls(header.lower(), frozenset(ipaddress.ip_address(a) for a in addresses if a))

    def identity(self, scope: Mapping[str, Any]) -> str | None:
        """The certificate identity (its CN) the connection proved, or None."""
        tls = (scope.get("extensions") or {}).get("tls") or {}
        name = tls.get("client_cert_name")
        if name and tls.get("client_cert_error") is None:
            return common_name(str(name))
        if self.header and self._from_trusted_proxy(scope):
            for key, value in scope.get("headers", ()):
                if key.decode("latin-1").lower() == self.header:
                    return common_name(value.decode("latin-1"))
        return None

    def _from_trusted_proxy(self, scope: Mapping[str, Any]) -> bool:
        client = scope.get("client")
        if not client:
            return False
        try:
            return ipaddress.ip_address(client[0]) in self.trusted_proxies
        except ValueError:
            return False


def common_name(distinguished_name: str) -> str:
    """The CN of an RFC 4514 name ("CN=ship-7,O=Fleet"), or the text itself if it has none."""
    for part in _rdn_parts(distinguished_name):
        key, sep, value = part.partition("=")
        if sep and key.strip().upper() == "CN":
            return value.strip()
    return distinguished_name.strip()


def _rdn_parts(name: str) -> Iterable[str]:
    return re.split(r"(?<!\\)[,/]", name)


def check_identity(request: SignedRequest, identity: str | None) -> None:
    """A certificate identity, when the connection has one, must name the signing node."""
    if identity is not None and identity != request.node_id:
        raise AuthError(AuthReason.AUTH_IDENTITY_MISMATCH,
                        "client certificate belongs to another node")


__all__ = [
    "CONTENT_SHA256_HEADER", "DEFAULT_WINDOW", "NODE_HEADER", "REQUEST_ID_HEADER", "SCHEME",
    "SIGNATURE_HEADER", "SIGNED_HEADERS", "TIMESTAMP_HEADER", "AuthError", "AuthReason",
    "IdentitySource", "NonceStore", "SignedRequest", "canonical_request", "check_body",
    "check_identity", "check_not_replayed", "check_signature", "check_timestamp",
    "common_name", "sign_request", "signature", "signed_request",
]
