"""The `[shore]` and `[ship]` TLS settings: https by default, checked, turned into uvicorn's
ssl options and the ship's verifying (pinned) TLS context."""

from __future__ import annotations

import ssl
from pathlib import Path

from tests.tls_certs import ThrowawayCA
from tidesync.bootstrap.ship import ship_tls_context
from tidesync.config import ShipConfig, ShoreConfig
from tidesync.entrypoints.http import ServerTls


def test_a_ship_talks_https_by_default() -> None:
    assert ShipConfig().shore_url.startswith("https://")
    assert ShipConfig().validate() == []


def test_tls_files_without_a_certificate_are_refused() -> None:
    assert any("tls_cert_file" in p for p in ShoreConfig(tls_key_file="k.pem").validate())
    assert any("tls_cert_file" in p for p in ShoreConfig(tls_client_ca_file="ca.pem").validate())
    assert any("tls_client_cert_file" in p
               for p in ShipConfig(tls_client_key_file="k.pem").validate())
    # A certificate file may hold its key too.
    assert ShoreConfig(tls_cert_file="c.pem").validate() == []
    assert ShoreConfig(tls_cert_file="c.pem", tls_key_file="k.pem").validate() == []


def test_the_shore_asks_for_client_certificates_as_configured() -> None:
    assert ServerTls.of(ShoreConfig()) is None
    required = ServerTls.of(ShoreConfig(tls_cert_file="c", tls_key_file="k",
                                        tls_client_ca_file="ca"))
    optional = ServerTls.of(ShoreConfig(tls_cert_file="c", tls_key_file="k",
                                        tls_client_ca_file="ca",
                                        tls_client_cert_required=False))
    assert required is not None and optional is not None
    assert required.uvicorn_options() == {"ssl_certfile": "c", "ssl_keyfile": "k",
                                          "ssl_ca_certs": "ca",
                                          "ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert optional.uvicorn_options()["ssl_cert_reqs"] == ssl.CERT_OPTIONAL


def test_the_ship_pins_the_configured_ca(tmp_path: Path) -> None:
    ca = ThrowawayCA(tmp_path, "fleet")
    client = ca.client("ship-7")
    assert ship_tls_context(ShipConfig(shore_url="http://127.0.0.1:8470")) is None
    context = ship_tls_context(ShipConfig(tls_ca_file=ca.cert_file,
                                          tls_client_cert_file=client.cert_file,
                                          tls_client_key_file=client.key_file))
    assert context is not None and context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "fleet"),),)]
