"""The `[shore]` settings of the TLS `tidesync shore serve` serves itself (uvicorn's ssl options)
and of how long it keeps an idle connection.

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


@dataclass(frozen=True)
class ShoreHttpSettings:
    """The HTTP server's connections."""

    # An idle kept-alive connection is closed after this many seconds. Longer than a ship's
    # `[ship] keep_alive_seconds` (60 s by default) plus a round trip, so a ship's request never
    # meets a connection the shore is closing (uvicorn's own default is 5 s).
    keep_alive_seconds: int = 75

    def http_problems(self) -> list[str]:
        if self.keep_alive_seconds < 1:
            return ["shore.keep_alive_seconds: must be >= 1"]
        return []


@dataclass(frozen=True)
class ShoreWireSettings:
    """Which upload formats the server takes."""

    # Column-wise upload batches (protocol major 2) and the zstd dictionaries ships train.
    # false: refuse both as a server of major 1 does (426 UNSUPPORTED_PROTOCOL, naming "1.0");
    # ships then send major 1 without dictionaries. For a staged rollout, or to rule the
    # newer format out while investigating a problem.
    accept_wire_v2: bool = True
