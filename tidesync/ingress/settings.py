"""The `[shore]` settings of the TLS `tidesync shore serve` serves itself (uvicorn's ssl options).

`tidesync.config.ShoreConfig` is made of these and the server's other settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShoreTlsSettings:
    """Certificate and key (PEM; none: plain http), and the CA of the client certificates."""

    tls_cert_file: str = ""
    tls_key_file: str = ""  # empty: the key is in tls_cert_file
    # With a client CA the handshake asks for a certificate it signed: required, or optional.
    tls_client_ca_file: str = ""
    tls_client_cert_required: bool = True

    def tls_problems(self) -> list[str]:
        if (self.tls_key_file or self.tls_client_ca_file) and not self.tls_cert_file:
            return ["shore.tls_cert_file: needed by tls_key_file and tls_client_ca_file"]
        return []
