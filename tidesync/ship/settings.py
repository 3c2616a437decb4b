"""The `[ship]` settings of the link's TLS (the shore's CA pinned and the client certificate),
of its connection and recovery (keep-alive, probing while down) and of sync rules (the mask key
file).

`tidesync.config.ShipConfig` is made of these and the client's other settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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


@dataclass(frozen=True)
class ShipLinkSettings:
    """How the link keeps its connection and finds out that it works again."""

    # A kept-alive connection idle longer than this is closed and a new one opened before the
    # next request. Keep it below the shore's `[shore] keep_alive_seconds` (75 s by default)
    # minus a round trip, so the ship never sends on a connection the shore is closing.
    keep_alive_seconds: int = 60
    # While requests get no answer, the shore is probed (GET /livez) after this many seconds,
    # then ever less often up to `probe_max_interval_seconds`; the first answer makes every
    # waiting request due at once.
    probe_interval_seconds: int = 1
    probe_max_interval_seconds: int = 30

    def link_problems(self) -> list[str]:
        problems = [f"ship.{name}: must be >= 1" for name in (
            "keep_alive_seconds", "probe_interval_seconds", "probe_max_interval_seconds")
            if getattr(self, name) < 1]
        if self.probe_max_interval_seconds < self.probe_interval_seconds:
            problems.append("ship.probe_max_interval_seconds: must be >= probe_interval_seconds")
        return problems


@dataclass(frozen=True)
class ShipRulesSettings:
    """Sync rules on the ship."""

    # The installation's secret for the hmac_mask transform, created (mode 0600) when a rule
    # first needs it; empty: `ship-rules-mask.key` beside the state file. Ships that must
    # give equal masks for equal values share one copy of this file.
    rules_mask_key_file: str = ""

    def rules_mask_key_path(self, state_path: str) -> Path:
        """The key file's absolute path (a relative one is taken from the working directory)."""
        if self.rules_mask_key_file:
            return Path(self.rules_mask_key_file).absolute()
        return (Path(state_path).parent / "ship-rules-mask.key").absolute()
