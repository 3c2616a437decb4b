"""Request signing: what `sign_request` covers, and each check the shore makes of it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import uuid
from collections.abc import Callable

import pytest

from tests.clocks import rounded_now
from tidesync.domain.node import NodeStatus
from tidesync.ingress.auth import (
    CONTENT_SHA256_HEADER,
    NODE_HEADER,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AuthError,
    AuthReason,
    IdentitySource,
    SignedRequest,
    check_body,
    check_identity,
    check_not_replayed,
    check_signature,
    check_timestamp,
    common_name,
    sign_request,
    signed_request,
)
from tidesync.ingress.nodes import NodeCredentials, SigningKey
from tidesync.wire.signing import response_signature_matches, sign_response

NOW = rounded_now()
SECRET = bytes(range(32))
NODE = "ship-0042"
PATH = "/sync/v1/receipts?cursor=17&limit=100"


def credentials(*keys: SigningKey, status: NodeStatus | None = NodeStatus.ACTIVE
                ) -> NodeCredentials:
    return NodeCredentials(NODE, status, keys or (SigningKey(SECRET, None),))


def signed(body: bytes = b"body", method: str = "POST", path: str = PATH,
           secret: bytes = SECRET, at: dt.datetime = NOW,
           request_id: str = "8d0c7f7e-1c1b-4f61-9b8e-6f3f0f9f7a10") -> SignedRequest:
    return signed_request(sign_request(NODE, secret, method, path, body, at, request_id))


def verify(request: SignedRequest, method: str = "POST", path: str = PATH,
           creds: NodeCredentials | None = None, now: dt.datetime = NOW,
           body: bytes = b"body") -> None:
    check_timestamp(request, now)
    check_signature(request, method, path, creds or credentials(), now)
    check_body(request, body)


def reason(action: Callable[[], object]) -> AuthReason:
    with pytest.raises(AuthError) as caught:
        action()
    return caught.value.reason


def test_a_signed_request_verifies() -> None:
    request = signed()
    verify(request)
    assert request.node_id == NODE
    assert request.content_sha256 == hashlib.sha256(b"body").hexdigest()


def test_headers_are_the_documented_names() -> None:
    headers = sign_request(NODE, SECRET, "GET", "/sync/v1/receipts", b"", NOW, "req-00000001")
    assert set(headers) == {NODE_HEADER, TIMESTAMP_HEADER, REQUEST_ID_HEADER,
                            CONTENT_SHA256_HEADER, SIGNATURE_HEADER}
    assert headers[TIMESTAMP_HEADER] == str(int(NOW.timestamp()))


@pytest.mark.parametrize("change", [
    {"method": "GET"}, {"path": "/sync/v1/receipts?cursor=18&limit=100"},
    {"path": "/sync/v1/batches"},
])
def test_the_signature_covers_method_and_path_with_query(change: dict[str, str]) -> None:
    request = signed()
    assert reason(lambda: verify(request, **change)) is AuthReason.AUTH_BAD_SIGNATURE


def test_the_signature_covers_every_signed_header() -> None:
    request = signed()
    for field, value in (("node_id", "ship-0043"), ("request_id", "another-request-id"),
                         ("timestamp", str(int(NOW.timestamp()) + 1)),
                         ("content_sha256", hashlib.sha256(b"other").hexdigest())):
        forged = dataclasses.replace(request, **{field: value})
        assert reason(lambda f=forged: check_signature(  # type: ignore[misc]
            f, "POST", PATH, credentials(), NOW)) is AuthReason.AUTH_BAD_SIGNATURE


def test_a_body_other_than_the_signed_one_is_refused() -> None:
    request = signed(body=b"body")
    assert reason(lambda: check_body(request, b"b0dy")) is AuthReason.AUTH_BAD_DIGEST


def test_the_timestamp_window_is_five_minutes_each_way() -> None:
    window = dt.timedelta(minutes=5)
    verify(signed(at=NOW - window))
    verify(signed(at=NOW + window))
    for skew in (window + dt.timedelta(seconds=1), -window - dt.timedelta(seconds=1)):
        request = signed(at=NOW + skew)
        assert reason(lambda r=request: check_timestamp(r, NOW)  # type: ignore[misc]
                      ) is AuthReason.AUTH_EXPIRED_TIMESTAMP


def test_unknown_and_revoked_nodes_are_refused() -> None:
    request = signed()
    unknown = NodeCredentials(NODE, None)
    assert reason(lambda: check_signature(request, "POST", PATH, unknown, NOW)
                  ) is AuthReason.NODE_UNKNOWN
    revoked = credentials(status=NodeStatus.REVOKED)
    assert reason(lambda: check_signature(request, "POST", PATH, revoked, NOW)
                  ) is AuthReason.NODE_REVOKED


def test_rotated_secrets_overlap_until_their_end() -> None:
    old, new = b"o" * 32, b"n" * 32
    ends = NOW + dt.timedelta(hours=1)
    creds = credentials(SigningKey(old, ends), SigningKey(new, None))
    for secret in (old, new):
        check_signature(signed(secret=secret), "POST", PATH, creds, NOW)
    late = NOW + dt.timedelta(hours=1)
    old_late = signed(secret=old, at=late)
    assert reason(lambda: check_signature(old_late, "POST", PATH, creds, late)
                  ) is AuthReason.AUTH_BAD_SIGNATURE
    check_signature(signed(secret=new, at=late), "POST", PATH, creds, late)


@pytest.mark.parametrize(("header", "value", "expected"), [
    (SIGNATURE_HEADER, "", AuthReason.AUTH_MISSING),
    (TIMESTAMP_HEADER, "yesterday", AuthReason.AUTH_MALFORMED),
    (TIMESTAMP_HEADER, "-5", AuthReason.AUTH_MALFORMED),
    (REQUEST_ID_HEADER, "short", AuthReason.AUTH_MALFORMED),
    (REQUEST_ID_HEADER, "has spaces in it", AuthReason.AUTH_MALFORMED),
    (SIGNATURE_HEADER, "ABCDEF" * 10 + "ABCD", AuthReason.AUTH_MALFORMED),
    (CONTENT_SHA256_HEADER, "00", AuthReason.AUTH_MALFORMED),
])
def test_unusable_headers(header: str, value: str, expected: AuthReason) -> None:
    headers = sign_request(NODE, SECRET, "GET", PATH, b"", NOW, "req-00000001")
    headers[header] = value
    assert reason(lambda: signed_request(headers)) is expected


def test_sign_request_refuses_an_unusable_request_id() -> None:
    with pytest.raises(ValueError):
        sign_request(NODE, SECRET, "GET", PATH, b"", NOW, "no")


class MemoryNonces:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], dt.datetime] = {}

    def remember(self, node_id: str, request_id: str, expires_at: dt.datetime,
                 now: dt.datetime) -> bool:
        key = (node_id, request_id)
        if key in self.seen and self.seen[key] > now:
            return False
        self.seen[key] = expires_at
        return True


def test_a_request_id_is_used_once() -> None:
    nonces = MemoryNonces()
    request = signed()
    check_not_replayed(request, nonces, NOW)
    assert reason(lambda: check_not_replayed(request, nonces, NOW)) is AuthReason.AUTH_REPLAYED
    # Remembered for as long as the request could pass the timestamp check.
    assert nonces.seen[(NODE, request.request_id)] == NOW + dt.timedelta(minutes=5)


# ----------------------------------------------------------------------------- identity


def test_common_names() -> None:
    assert common_name("CN=ship-0042,O=Fleet,C=NO") == "ship-0042"
    assert common_name("O=Fleet, CN = ship-7") == "ship-7"
    assert common_name("/C=NO/O=Fleet/CN=ship-9") == "ship-9"
    assert common_name("ship-3") == "ship-3"


def scope(headers: list[tuple[bytes, bytes]], client: str = "127.0.0.1",
          tls: dict[str, object] | None = None) -> dict[str, object]:
    out: dict[str, object] = {"type": "http", "headers": headers, "client": (client, 5000)}
    if tls is not None:
        out["extensions"] = {"tls": tls}
    return out


def test_identity_from_the_asgi_tls_extension() -> None:
    source = IdentitySource()
    assert source.identity(scope([], tls={"client_cert_name": "CN=ship-0042,O=F",
                                          "client_cert_error": None})) == "ship-0042"
    assert source.identity(scope([], tls={"client_cert_name": "CN=ship-0042",
                                          "client_cert_error": "expired"})) is None
    assert source.identity(scope([])) is None


def test_identity_header_is_believed_only_from_trusted_proxies() -> None:
    source = IdentitySource.of("X-Client-Cert", ["10.0.0.5", "127.0.0.1"])
    headers = [(b"x-client-cert", b"CN=ship-0042")]
    assert source.identity(scope(headers, client="127.0.0.1")) == "ship-0042"
    assert source.identity(scope(headers, client="192.0.2.7")) is None
    assert IdentitySource().identity(scope(headers)) is None


def test_a_certificate_must_name_the_signing_node() -> None:
    request = signed()
    check_identity(request, None)
    check_identity(request, NODE)
    assert reason(lambda: check_identity(request, "ship-0043")
                  ) is AuthReason.AUTH_IDENTITY_MISMATCH


def test_request_ids_may_be_uuids() -> None:
    signed(request_id=str(uuid.uuid4()))


@pytest.mark.parametrize("timestamp", ["999999999999", "0", "1"])
def test_a_timestamp_far_outside_any_date_is_expired_not_a_crash(timestamp: str) -> None:
    request = dataclasses.replace(signed(), timestamp=timestamp)
    with pytest.raises(AuthError) as raised:
        check_timestamp(request, NOW)
    assert raised.value.reason is AuthReason.AUTH_EXPIRED_TIMESTAMP


# ----------------------------------------------------------------------------- answers


def request_headers(request_id: str = "8d0c7f7e-1c1b-4f61-9b8e-6f3f0f9f7a10",
                    at: dt.datetime = NOW) -> dict[str, str]:
    return sign_request(NODE, SECRET, "GET", PATH, b"", at, request_id)


def test_an_answer_signature_covers_its_request_status_and_body() -> None:
    headers = request_headers()
    claimed = sign_response(SECRET, headers, "GET", PATH, 200, b"page")
    assert response_signature_matches(SECRET, headers, "GET", PATH, 200, b"page", claimed)
    changed: list[tuple[bytes, dict[str, str], str, str, int, bytes]] = [
        (bytes(32), headers, "GET", PATH, 200, b"page"),          # another node's secret
        (SECRET, request_headers("another-request-id"), "GET", PATH, 200, b"page"),
        (SECRET, request_headers(at=NOW + dt.timedelta(seconds=1)), "GET", PATH, 200,
         b"page"),
        (SECRET, {**headers, NODE_HEADER: "ship-0043"}, "GET", PATH, 200, b"page"),
        (SECRET, headers, "POST", PATH, 200, b"page"),
        (SECRET, headers, "GET", "/sync/v1/commands?limit=100", 200, b"page"),
        (SECRET, headers, "GET", PATH, 503, b"page"),
        (SECRET, headers, "GET", PATH, 200, b"forged page"),
    ]
    for secret, other, method, path, status, body in changed:
        assert not response_signature_matches(secret, other, method, path, status, body,
                                              claimed)


def test_a_request_signature_never_passes_as_an_answer() -> None:
    # The ship's own signature, echoed back by a man in the middle, proves nothing.
    headers = sign_request(NODE, SECRET, "GET", PATH, b"", NOW, "8d0c7f7e-1c1b-4f61")
    assert not response_signature_matches(SECRET, headers, "GET", PATH, 200, b"",
                                          headers[SIGNATURE_HEADER])


def test_the_shore_signs_answers_with_the_secret_the_ship_signed_with() -> None:
    # During a rotation both secrets are valid; the ship holds only the one it used.
    old, new = bytes(range(32)), bytes(range(1, 33))
    creds = credentials(SigningKey(old, NOW + dt.timedelta(hours=1)), SigningKey(new, None))
    assert check_signature(signed(secret=old), "POST", PATH, creds, NOW) == old
    assert check_signature(signed(secret=new), "POST", PATH, creds, NOW) == new
