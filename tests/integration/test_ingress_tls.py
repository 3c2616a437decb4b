"""Transport a ship can trust: the shore serving TLS itself (client certificates required),
the ship pinning the shore's CA, and every answer after authentication signed for its request.

Real uvicorn with TLS, real PostgreSQL, the ship's own HttpShoreLink; throw-away certificates.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_ingress import (
    ACTOR,
    PREFIX,
    FakeClock,
    database,
    make_config,
    node_service,
)
from tests.tls_certs import ThrowawayCA
from tidesync.bootstrap.ingress import build_ingress
from tidesync.entrypoints.http import BackgroundServer, ServerTls, create_app
from tidesync.localservices import PostgresDatabase
from tidesync.ship.transport import HttpShoreLink, LinkDown, ShoreRefused, tls_context
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

__all__ = ["database"]


@dataclasses.dataclass
class Shore:
    url: str
    node_id: str
    secret: bytes
    clock: FakeClock
    ca: ThrowawayCA
    other_ca: ThrowawayCA
    links: list[HttpShoreLink] = dataclasses.field(default_factory=list)

    def link(self, context_files: tuple[str, str, str] | None, *,
             secret: bytes | None = None, url: str | None = None) -> HttpShoreLink:
        context = tls_context(*context_files) if context_files is not None else None
        link = HttpShoreLink(url or self.url, self.node_id, secret or self.secret,
                             clock=self.clock, timeout=10.0, ssl_context=context)
        self.links.append(link)
        return link


@pytest.fixture
def shore(database: PostgresDatabase, tmp_path: Path) -> Iterator[Shore]:
    ca, other_ca = ThrowawayCA(tmp_path, "fleet"), ThrowawayCA(tmp_path, "other")
    server = ca.server()
    config = make_config(database, tls_cert_file=server.cert_file,
                         tls_key_file=server.key_file, tls_client_ca_file=ca.cert_file)
    assert config.shore.validate() == []
    clock = FakeClock()
    node_id = f"{PREFIX}{secrets.token_hex(4)}"
    with node_service(config) as service:
        issued = service.register(node_id, ACTOR, clock())
    ingress = build_ingress(config, clock=clock, monotonic=clock.monotonic)
    app = create_app(config, ingress=ingress)
    with BackgroundServer(app, tls=ServerTls.of(config.shore)) as running:
        shore = Shore(running.url, node_id, issued.secret, clock, ca, other_ca)
        yield shore
        for link in shore.links:  # an open kept-alive connection holds the server's stop
            link.close()


def heartbeat(node_id: str) -> pb.Heartbeat:
    return pb.Heartbeat(node_id=node_id, protocol_version=codec.PROTOCOL_VERSION)


def test_a_ship_with_its_certificate_and_the_pinned_ca_is_answered(shore: Shore) -> None:
    client = shore.ca.client(shore.node_id)
    link = shore.link((shore.ca.cert_file, client.cert_file, client.key_file))
    assert shore.url.startswith("https://")
    # The answer passed the link's signature check: a verified, signed answer over TLS.
    assert link.heartbeat(heartbeat(shore.node_id)).next_interval_seconds > 0
    assert link.receipts("", 10).has_more is False
    link.close()


def test_a_ship_without_a_client_certificate_is_refused(shore: Shore) -> None:
    link = shore.link((shore.ca.cert_file, "", ""))
    with pytest.raises(LinkDown):
        link.heartbeat(heartbeat(shore.node_id))


def test_a_ship_pinning_another_ca_does_not_talk_to_the_shore(shore: Shore) -> None:
    # As a man in the middle presenting a certificate of some other CA would be treated.
    client = shore.other_ca.client(shore.node_id)
    link = shore.link((shore.other_ca.cert_file, client.cert_file, client.key_file))
    with pytest.raises(LinkDown):
        link.heartbeat(heartbeat(shore.node_id))


def test_refusals_after_authentication_come_signed(shore: Shore) -> None:
    client = shore.ca.client(shore.node_id)
    link = shore.link((shore.ca.cert_file, client.cert_file, client.key_file))
    # A heartbeat naming another node: 403, signed (unsigned, the link would refuse it).
    with pytest.raises(ShoreRefused) as refused:
        link.heartbeat(heartbeat(shore.node_id + "-other"))
    assert (refused.value.status, refused.value.reason) == (403, "NODE_MISMATCH")


def test_a_request_with_the_wrong_secret_gets_an_unsigned_401(shore: Shore) -> None:
    client = shore.ca.client(shore.node_id)
    files = (shore.ca.cert_file, client.cert_file, client.key_file)
    link = shore.link(files, secret=secrets.token_bytes(32))
    with pytest.raises(ShoreRefused) as refused:
        link.heartbeat(heartbeat(shore.node_id))
    assert (refused.value.status, refused.value.reason) == (401, "AUTH_BAD_SIGNATURE")


def test_a_certificate_of_another_node_is_refused(shore: Shore) -> None:
    # The signing secret is this node's, but the certificate was issued to another ship.
    client = shore.ca.client("ship-somewhere-else")
    link = shore.link((shore.ca.cert_file, client.cert_file, client.key_file))
    with pytest.raises(ShoreRefused) as refused:
        link.heartbeat(heartbeat(shore.node_id))
    assert (refused.value.status, refused.value.reason) == (401, "AUTH_IDENTITY_MISMATCH")
