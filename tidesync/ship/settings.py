"""The `[ship]` settings of the link's TLS (the shore's CA pinned and the client certificate),
of its connection and recovery (keep-alive, probing while down), of sync rules (the mask key
file) and of their schedules (the node's time zone).

`tidesync.config.ShipConfig` is made of these and the client's other settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidesync.domain.rules.schedule import zone_of


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
    # While requests get no answer, the shore is probed (GET /livez) after this many seconds
    # (fractions allowed), then ever less often up to `probe_max_interval_seconds`; the first
    # answer makes every waiting request due at once.
    probe_interval_seconds: float = 0.5
    probe_max_interval_seconds: float = 30
    # Uploads side by side, each on its own connection. Keep it below the shore's
    # `[shore] node_max_concurrent_requests` (5 by default): the ship's other requests
    # (receipts, heartbeats, commands) need a slot too.
    uploads_in_flight: int = 3
    # The link time one upload request aims at; its size follows the goodput the ship
    # measures, so an interrupted request costs about this much link time.
    upload_request_ms: int = 1000

    def link_problems(self) -> list[str]:
        problems = [f"ship.{name}: must be >= 1" for name in (
            "keep_alive_seconds", "probe_max_interval_seconds") if getattr(self, name) < 1]
        if not 0.1 <= self.probe_interval_seconds <= 60:
            problems.append("ship.probe_interval_seconds: must be 0.1..60")
        if self.probe_max_interval_seconds < self.probe_interval_seconds:
            problems.append("ship.probe_max_interval_seconds: must be >= probe_interval_seconds")
        if not 1 <= self.uploads_in_flight <= 8:
            problems.append("ship.uploads_in_flight: must be 1..8")
        if not 100 <= self.upload_request_ms <= 60_000:
            problems.append("ship.upload_request_ms: must be 100..60000")
        return problems


@dataclass(frozen=True)
class ShipQueueSettings:
    """How the client finds the queue's topics."""

    # How often the broker is asked for new topics (a table enabled and captured for the first
    # time gets its topic then): the longest a new table waits before it is read.
    topic_refresh_seconds: int = 5

    def queue_problems(self) -> list[str]:
        if not 1 <= self.topic_refresh_seconds <= 3600:
            return ["ship.topic_refresh_seconds: must be 1..3600"]
        return []


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


@dataclass(frozen=True)
class ShipScheduleSettings:
    """When rules with a `schedule` may send (§13.3): the node's zone and its trusted time."""

    # The IANA time zone the rules' schedules are read in (e.g. "Europe/Oslo"): the node's
    # local hours, daylight saving included.
    timezone: str = "UTC"
    # When the system clock departs further than this from the last trusted time (the shore's,
    # carried forward by the monotonic clock), BULK rules with a schedule hold and the others
    # follow the trusted time until the shore's time is heard again.
    clock_jump_seconds: int = 300

    def schedule_problems(self) -> list[str]:
        problems = []
        try:
            zone_of(self.timezone)
        except ValueError as error:
            problems.append(f"ship.timezone: {error}")
        if not 10 <= self.clock_jump_seconds <= 86_400:
            problems.append("ship.clock_jump_seconds: must be 10..86400")
        return problems


@dataclass(frozen=True)
class ShipReplaySettings:
    """Replays by range (`tidesync replay`): how fast the client reads a range again."""

    # Records read per second while a range is replayed (a token bucket); ordinary changes
    # keep flowing beside it. The events still pass the uplink limit like any others.
    replay_rate_records_per_sec: int = 200

    def replay_problems(self) -> list[str]:
        if not 1 <= self.replay_rate_records_per_sec <= 1_000_000:
            return ["ship.replay_rate_records_per_sec: must be 1..1000000"]
        return []


@dataclass(frozen=True)
class ShipWireSettings:
    """The upload format (see "Wire format" in docs/ship.md)."""

    # 2: column-wise batches (UploadBatchV2), falling back to 1 by itself when the shore
    # answers that it takes major 1 only; 1: pin the older UploadBatch.
    wire_version: int = 2
    # Largest zstd dictionary the client trains on its own recent batches and uses while it
    # measurably makes batches smaller (wire version 2 only); 0: no dictionaries.
    zstd_dictionary_bytes: int = 16 * 1024

    def wire_problems(self) -> list[str]:
        problems = []
        if self.wire_version not in (1, 2):
            problems.append("ship.wire_version: must be 1 or 2")
        if self.zstd_dictionary_bytes and not 1024 <= self.zstd_dictionary_bytes <= 65536:
            problems.append("ship.zstd_dictionary_bytes: must be 0 or 1024..65536")
        return problems
