"""The `[ship]` settings of the link's TLS: the shore's CA pinned and the client certificate.

`tidesync.config.ShipConfig` is made of these and the client's other settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShipTlsSettings:
    """TLS to an https `shore_url` (the default)."""

    # The CA (PEM) the shore's certificate must chain to, and no other; empty: the system's CAs.
    tls_ca_file: str = ""
    # The client certificate the ship presents (PEM) and its key (empty: in the same file).
    tls_client_cert_file: str = ""
    tls_client_key_file: str = ""

    def tls_problems(self) -> list[str]:
        if self.tls_client_key_file and not self.tls_client_cert_file:
            return ["ship.tls_client_key_file: needs ship.tls_client_cert_file"]
        return []
