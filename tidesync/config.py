"""One typed configuration for every tidesync process: a TOML file plus `TIDESYNC_*` overrides.

`TIDESYNC_<SECTION>__<FIELD>` overrides one field (e.g. `TIDESYNC_SHORE__LISTEN_PORT=8443`);
`TIDESYNC_CONFIG` names the file. Every problem is reported at once, with where it came from.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidesync.apps.settings import RulesSettings
from tidesync.capture.settings import (
    SHIP_TOPIC_PATTERN,
    SHORE_TOPIC_PATTERN,
    CaptureConfig,
    ShoreCaptureConfig,
)
from tidesync.domain.change_event import table_rule
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.setting_values import coerce
from tidesync.domain.table_names import bad_table_names, table_set
from tidesync.graphql.settings import ConsoleSettings
from tidesync.ingress.settings import ShoreHttpSettings, ShoreTlsSettings, ShoreWireSettings
from tidesync.projections.settings import ProjectionsConfig
from tidesync.ship.settings import (
    ShipLinkSettings,
    ShipQueueSettings,
    ShipReplaySettings,
    ShipRulesSettings,
    ShipScheduleSettings,
    ShipTlsSettings,
    ShipWireSettings,
)
from tidesync.shore.settings import ApplyConfig, ConflictsConfig, ReconcileConfig
from tidesync.target.settings import TargetConfig as TargetConfig

FIXED_CONSUMER_SETTINGS = frozenset({
    "bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store",
    "enable.partition.eof", "auto.offset.reset"})
"""Queue consumer settings `kafka_consumer_options` may not change: correctness rests on them."""

ENV_PREFIX = "TIDESYNC_"
CONFIG_ENV = "TIDESYNC_CONFIG"


class ConfigError(TidesyncError):
    """The configuration is invalid; `problems` lists every field at fault."""

    code = ErrorCode.CONFIG_INVALID

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


class EventStoreKind(enum.StrEnum):
    EMBEDDED = "embedded"  # a private PostgreSQL server in `embedded_dir`, started on demand
    POSTGRES = "postgres"  # a PostgreSQL server of the operator's


def _bad_options(section: str, options: Mapping[str, str]) -> list[str]:
    return ([f"{section}: {key!r} is not a client setting name" for key in options
             if not re.fullmatch(r"[a-z0-9._-]{1,100}", key)]
            + [f"{section}: {key!r} is set by tidesync (offsets are committed only after the"
               " shore answered)" for key in options if key in FIXED_CONSUMER_SETTINGS])

@dataclass(frozen=True)
class EventStoreConfig:
    """Where the shore keeps its event streams and read models."""

    kind: EventStoreKind = EventStoreKind.EMBEDDED
    embedded_dir: str = "tidesync-data/postgres"
    postgres_host: str = "127.0.0.1"
    postgres_port: int = 5432
    postgres_dbname: str = "tidesync"
    postgres_user: str = "tidesync"
    postgres_password: str = field(default="", metadata={"secret": True})
    postgres_pool_size: int = 5

    def validate(self) -> list[str]:
        problems = []
        if self.kind is EventStoreKind.EMBEDDED and not self.embedded_dir:
            problems.append("event_store.embedded_dir: required when kind = embedded")
        if not 1 <= self.postgres_port <= 65535:
            problems.append("event_store.postgres_port: must be 1..65535")
        if self.postgres_pool_size < 1:
            problems.append("event_store.postgres_pool_size: must be >= 1")
        return problems


_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ShoreConfig(ShoreTlsSettings, ShoreHttpSettings, ShoreWireSettings):
    """The shore server: where it listens, its request limits and its TLS."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 8470
    # Caps of one upload: sized to the ship's batches (4 MiB uncompressed by default), so
    # one request can never make the shore hold more than a few MiB.
    max_compressed_bytes: int = 4 * 1024 * 1024
    max_decompressed_bytes: int = 8 * 1024 * 1024
    max_events_per_batch: int = 10_000
    apply_lease_seconds: int = 60
    apply_max_events_per_job: int = 2000
    apply_chunk_size: int = 500
    # Node signing secrets are sealed with this AES-256 key: `master_key` (base64 of 32 bytes,
    # normally from TIDESYNC_SHORE__MASTER_KEY) wins over the file, which
    # `tidesync nodes register` creates (mode 0600) when neither exists.
    master_key_file: str = "tidesync-data/master.key"
    master_key: str = field(default="", metadata={"secret": True})
    # Per-node and global request limits of the sync API (429 + Retry-After beyond them).
    # A ship keeps 3 uploads in flight plus one other request; the fifth slot covers a
    # request the shore still finishes after the ship gave up on it (a reset link).
    node_requests_per_second: int = 10
    node_request_burst: int = 20
    node_max_concurrent_requests: int = 5
    max_in_flight_requests: int = 64
    # Per-node quotas of request body bytes (429 + Retry-After, BYTE_QUOTA_MINUTE / _DAY).
    node_bytes_per_minute: int = 64 * 1024 * 1024
    node_bytes_per_day: int = 8 * 1024 * 1024 * 1024
    request_window_seconds: int = 300
    heartbeat_interval_seconds: int = 60
    # Heartbeats' backlog and throughput samples (metric_sample) older than this are deleted
    # as the node sends more; the backlog ETA reads the last 24 hours of them.
    metric_retention_days: int = 14
    # Sync API tables: connection pool size and how long a request waits for PostgreSQL.
    database_pool_size: int = 8
    database_timeout_seconds: int = 5
    # Client-certificate identity set by a TLS-terminating proxy (e.g. the certificate's CN),
    # believed only from the listed proxy addresses (an array of IPs).
    client_identity_header: str = ""
    trusted_proxies: tuple[str, ...] = ()

    def validate(self) -> list[str]:
        problems = self.tls_problems() + self.http_problems()
        if not 0 <= self.listen_port <= 65535:
            problems.append("shore.listen_port: must be 0..65535 (0 picks a free port)")
        for name in ("max_compressed_bytes", "max_decompressed_bytes", "max_events_per_batch",
                     "node_requests_per_second", "node_request_burst",
                     "node_max_concurrent_requests", "max_in_flight_requests",
                     "node_bytes_per_minute", "node_bytes_per_day", "request_window_seconds",
                     "heartbeat_interval_seconds",
                     "database_pool_size", "database_timeout_seconds",
                     "apply_lease_seconds", "apply_max_events_per_job", "apply_chunk_size"):
            if getattr(self, name) < 1:
                problems.append(f"shore.{name}: must be >= 1")
        if self.metric_retention_days < 2:
            problems.append("shore.metric_retention_days: must be >= 2 (the ETA reads a day)")
        if self.client_identity_header and not self.trusted_proxies:
            problems.append("shore.client_identity_header: needs shore.trusted_proxies")
        if self.master_key and not _is_aes256_key(self.master_key):
            problems.append("shore.master_key: must be the base64 text of 32 bytes")
        if self.max_decompressed_bytes < self.max_compressed_bytes:
            problems.append("shore.max_decompressed_bytes: must be >= max_compressed_bytes")
        if self.max_decompressed_bytes > _MAX_DECOMPRESSED_BYTES:
            problems.append("shore.max_decompressed_bytes: must be <= 64 MiB")
        if self.node_bytes_per_day < self.node_bytes_per_minute or (
            self.node_bytes_per_minute < self.max_compressed_bytes
        ):
            problems.append("shore.node_bytes_per_minute: must be >= max_compressed_bytes and"
                            " <= node_bytes_per_day")
        return problems


@dataclass(frozen=True)
class ShipConfig(ShipTlsSettings, ShipRulesSettings, ShipLinkSettings, ShipQueueSettings,
                 ShipReplaySettings, ShipWireSettings, ShipScheduleSettings):
    """The ship client: its node identity, state file, queue, batching and link settings."""

    node_id: str = ""
    shore_url: str = "https://127.0.0.1:8470"
    # The node's signing secret as `tidesync nodes register` printed it (base64url).
    secret: str = field(default="", metadata={"secret": True})
    state_path: str = "tidesync-data/ship-state.sqlite"
    kafka_bootstrap_servers: str = ""
    # Topics to consume (a regular expression; by default every capture's topic under
    # sync.cdc. except the shore capture's, sync.cdc.shore.) and the node's one consumer group
    # (default: tidesync-ship-<node_id>).
    topic_pattern: str = SHIP_TOPIC_PATTERN
    consumer_group: str = ""
    # What the normalizer stamps on events: the capture's connector id, the replay epoch
    # (raise it after a topic rebuild or connector reset), tables synced both ways
    # (an array of db.table, their rows carry _sync_revision) and, for payload-only
    # records, a JSON file of column types {"db.table": {"column": "mysql type"}}.
    source_connector_id: str = "debezium-mysql"
    replay_epoch: int = 0
    bidirectional_tables: tuple[str, ...] = ()
    column_types_file: str = ""
    # Caps of one upload batch; within them its size follows the link (upload_request_ms).
    batch_max_events: int = 10_000
    batch_max_bytes: int = 4 * 1024 * 1024
    zstd_level: int = 3
    # The uplink token bucket (§13.1) over compressed bytes on the wire, applied as upload
    # bodies are written (tidesync/ship/pacing.py); 0 = no limit.
    uplink_rate_bytes_per_sec: int = 0
    uplink_burst_bytes: int = 1024 * 1024
    # Without a limit (this one or the shore's), pace bodies at the rate the uploads measure
    # (tidesync/ship/measured_rate.py) instead of writing them at once.
    uplink_measured_pace: bool = True
    # Bounded memory: events held for sending per partition and in all, and records read
    # but not yet terminal per partition (the consumer pauses a partition beyond it).
    send_window_events: int = 10_000
    send_window_total_events: int = 20_000
    max_open_per_partition: int = 100_000
    # Applied events are pruned from the state file once the queue commit is this many
    # offsets past them (the newest stay, to recognise records the capture emits again);
    # 0 keeps every event's row.
    state_retain_offsets: int = 200_000
    request_timeout_seconds: int = 60
    # Results per receipts page: plain APPLIED ones come as offset ranges, a few bytes each
    # range, so a page may hold many (the shore caps the ranged form at 10,000, older
    # shores at 1,000).
    receipts_page_size: int = 5000
    receipts_interval_seconds: int = 5
    heartbeat_interval_seconds: int = 60
    # Extra librdkafka consumer settings, "key=value" separated by commas.
    kafka_consumer_options: Mapping[str, str] = field(default_factory=dict)
    # Shore → ship commands (§12): the shore's node id (the origin stamped on rows a conflict
    # decision writes), how often and how many commands are pulled. Applying them needs the
    # [ship_target] section; without it the downlink is off.
    shore_node_id: str = "shore"
    commands_interval_seconds: int = 5
    commands_page_size: int = 200

    def validate(self) -> list[str]:
        problems = (self.tls_problems() + self.link_problems() + self.queue_problems()
                    + self.replay_problems() + self.wire_problems() + self.schedule_problems())
        if not self.shore_node_id:
            problems.append("ship.shore_node_id: must not be empty")
        if not 1 <= self.commands_page_size <= 1000:
            problems.append("ship.commands_page_size: must be 1..1000")
        if self.commands_interval_seconds < 1:
            problems.append("ship.commands_interval_seconds: must be >= 1")
        if not 1 <= self.batch_max_events <= 10_000:
            problems.append("ship.batch_max_events: must be 1..10000")
        if self.batch_max_bytes < 1024:
            problems.append("ship.batch_max_bytes: must be >= 1024")
        if not self.shore_url.startswith(("http://", "https://")):
            problems.append("ship.shore_url: must start with http:// or https://")
        if self.replay_epoch < 0:
            problems.append("ship.replay_epoch: must be >= 0")
        if not 1 <= self.zstd_level <= 22:
            problems.append("ship.zstd_level: must be 1..22")
        for name in ("send_window_events", "send_window_total_events", "max_open_per_partition",
                     "request_timeout_seconds", "receipts_page_size",
                     "receipts_interval_seconds", "heartbeat_interval_seconds"):
            if getattr(self, name) < 1:
                problems.append(f"ship.{name}: must be >= 1")
        if self.uplink_rate_bytes_per_sec < 0 or self.uplink_burst_bytes < 1:
            problems.append("ship.uplink_rate_bytes_per_sec: must be >= 0 (with a burst >= 1)")
        if self.state_retain_offsets < 0:
            problems.append("ship.state_retain_offsets: must be >= 0 (0 keeps every row)")
        if self.receipts_page_size > 10_000:
            problems.append("ship.receipts_page_size: must be <= 10000")
        try:
            re.compile(self.topic_pattern)
        except re.error as error:
            problems.append(f"ship.topic_pattern: not a regular expression ({error})")
        problems += bad_table_names("ship.bidirectional_tables", self.bidirectional_tables)
        problems += _bad_options("ship.kafka_consumer_options", self.kafka_consumer_options)
        return problems

    def table_set(self) -> frozenset[tuple[str, str]]:
        """`bidirectional_tables` as (database, table) pairs."""
        return table_set(self.bidirectional_tables)

    def two_way_rules(self) -> frozenset[str]:
        """The rule ids of the two-way tables (each table is its own rule)."""
        return frozenset(table_rule(database, table) for database, table in self.table_set())

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"tidesync-ship-{self.node_id}"


class ShipTargetKind(enum.StrEnum):
    NONE = ""
    MYSQL = "mysql"
    SQLITE = "sqlite"


@dataclass(frozen=True)
class ShipTargetConfig:
    """The ship's own business database that shore commands are applied to (§12).

    `kind` empty (the default) leaves the downlink apply off: `ship run` then pulls no
    commands and `ship status` says so. The rows written carry origin = the shore and the
    ship's `ship.node_id` is the applier's node id.
    """

    kind: ShipTargetKind = ShipTargetKind.NONE
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "tidesync"
    password: str = field(default="", metadata={"secret": True})
    database: str = ""
    sqlite_path: str = ""

    @property
    def enabled(self) -> bool:
        return self.kind is not ShipTargetKind.NONE

    def as_target(self, node_id: str) -> TargetConfig:
        """The same database as a TargetConfig, so the shore's appliers can be reused."""
        return TargetConfig(host=self.host, port=self.port, user=self.user,
                            password=self.password, database=self.database, node_id=node_id,
                            sqlite_path=self.sqlite_path)

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.port <= 65535:
            problems.append("ship_target.port: must be 1..65535")
        if self.kind is ShipTargetKind.SQLITE and not self.sqlite_path:
            problems.append("ship_target.sqlite_path: required when kind = sqlite")
        return problems


@dataclass(frozen=True)
class DownlinkConfig:
    """Shore to ship: the shore CDC consumer and the command API (§9.4, §12).

    The shore's own capture (Debezium or `tidesync ship capture` pointed at the shore MySQL)
    writes the shore's row changes to topics matching `topic_pattern`; `tidesync shore work`
    consumes them when `kafka_bootstrap_servers` is set and issues one command per change for
    each target node (`nodes`: an array of node ids, or `["*"]` for every active node).
    """

    kafka_bootstrap_servers: str = ""
    topic_pattern: str = SHORE_TOPIC_PATTERN
    consumer_group: str = "tidesync-shore-cdc"
    source_connector_id: str = "debezium-mysql"
    bidirectional_tables: tuple[str, ...] = ()
    column_types_file: str = ""
    nodes: tuple[str, ...] = ("*",)
    kafka_consumer_options: Mapping[str, str] = field(default_factory=dict)
    # GET /sync/v1/commands: the largest page a ship may ask for.
    max_page_size: int = 500

    def table_set(self) -> frozenset[tuple[str, str]]:
        return table_set(self.bidirectional_tables)

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.max_page_size <= 5000:
            problems.append("downlink.max_page_size: must be 1..5000")
        try:
            re.compile(self.topic_pattern)
        except re.error as error:
            problems.append(f"downlink.topic_pattern: not a regular expression ({error})")
        problems += bad_table_names("downlink.bidirectional_tables", self.bidirectional_tables)
        problems += _bad_options("downlink.kafka_consumer_options", self.kafka_consumer_options)
        return problems


@dataclass(frozen=True)
class Config:
    shore: ShoreConfig = field(default_factory=ShoreConfig)
    ship: ShipConfig = field(default_factory=ShipConfig)
    event_store: EventStoreConfig = field(default_factory=EventStoreConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    shore_capture: ShoreCaptureConfig = field(default_factory=ShoreCaptureConfig)
    conflicts: ConflictsConfig = field(default_factory=ConflictsConfig)
    downlink: DownlinkConfig = field(default_factory=DownlinkConfig)
    ship_target: ShipTargetConfig = field(default_factory=ShipTargetConfig)
    projections: ProjectionsConfig = field(default_factory=ProjectionsConfig)
    apply: ApplyConfig = field(default_factory=ApplyConfig)
    rules: RulesSettings = field(default_factory=RulesSettings)
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)

    def validate(self) -> list[str]:
        return (self.shore.validate() + self.ship.validate() + self.event_store.validate()
                + self.target.validate() + self.console.validate()
                + self.capture.validate() + self.shore_capture.validate()
                + self.conflicts.validate()
                + self.downlink.validate() + self.ship_target.validate()
                + self.projections.validate() + self.apply.validate() + self.rules.validate()
                + self.reconcile.validate())

    def redacted(self) -> dict[str, dict[str, object]]:
        """The effective configuration for display, with secrets masked."""
        out: dict[str, dict[str, object]] = {}
        for section in dataclasses.fields(self):
            values = getattr(self, section.name)
            out[section.name] = {
                f.name: ("***" if f.metadata.get("secret") and getattr(values, f.name) else
                         _shown(f.name, getattr(values, f.name)))
                for f in dataclasses.fields(values)
            }
        return out


def _is_aes256_key(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except binascii.Error:
        return False


def _plain(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


def _shown(name: str, value: object) -> object:
    """A setting as `config show` prints it: client options (which may hold SASL passwords or
    key files) with their names only."""
    if name.endswith("_options") and isinstance(value, Mapping):
        return {key: "***" for key in value}
    return _plain(value)


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the TOML file (argument or `TIDESYNC_CONFIG`), then env overrides."""
    env = os.environ if env is None else env
    path = path or env.get(CONFIG_ENV) or None
    problems: list[str] = []
    raw: dict[str, dict[str, tuple[object, str]]] = {}
    if path is not None:
        _read_file(Path(path), raw, problems)
    _read_env(env, raw, problems)
    config = _build(raw, problems)
    problems += config.validate()
    if problems:
        raise ConfigError(problems)
    return _absolute_master_key(config)


def _absolute_master_key(config: Config) -> Config:
    """The master key file as an absolute path (from the working directory, as every relative
    path), so logs, errors and `config show` name the one file every process must share."""
    absolute = str(Path(config.shore.master_key_file).absolute())
    return dataclasses.replace(config, shore=dataclasses.replace(config.shore,
                                                                master_key_file=absolute))


def _read_file(path: Path, raw: dict[str, dict[str, tuple[object, str]]],
               problems: list[str]) -> None:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        problems.append(f"{path}: cannot read ({error.strerror})")
        return
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        problems.append(f"{path}: not valid TOML ({error})")
        return
    for section, values in document.items():
        if not isinstance(values, dict):
            problems.append(f"{path}: [{section}] must be a table")
            continue
        for name, value in values.items():
            raw.setdefault(section, {})[name] = (value, str(path))


def _read_env(env: Mapping[str, str], raw: dict[str, dict[str, tuple[object, str]]],
              problems: list[str]) -> None:
    for variable, value in env.items():
        if not variable.startswith(ENV_PREFIX) or variable == CONFIG_ENV:
            continue
        section, sep, name = variable[len(ENV_PREFIX):].lower().partition("__")
        if not sep:
            continue  # Not a field override (e.g. TIDESYNC_TEST_PG_DSN belongs to tests).
        raw.setdefault(section, {})[name] = (value, variable)


def _build(raw: dict[str, dict[str, tuple[object, str]]], problems: list[str]) -> Config:
    hints = typing.get_type_hints(Config)
    sections: dict[str, object] = {}
    for section, values in raw.items():
        if section not in hints:
            origins = sorted({origin for _, origin in values.values()})
            problems.append(f"unknown section {section!r} (from {', '.join(origins)})")
            continue
        sections[section] = _build_section(section, hints[section], values, problems)
    return Config(**sections)  # type: ignore[arg-type]


# Settings that existed once: what to say instead of "unknown" or "expected one of".
_RETIRED = {
    ("event_store", "kind", "sqlite"): (
        "the SQLite event store was retired; use \"embedded\" (a private PostgreSQL server in"
        " event_store.embedded_dir, the default) or \"postgres\""),
    ("event_store", "sqlite_path", None): (
        "retired with the SQLite event store; the embedded default keeps its data in"
        " event_store.embedded_dir"),
}


def _retired(section: str, name: str, value: object) -> str | None:
    found = _RETIRED.get((section, name, None))
    if found is None and isinstance(value, str):
        found = _RETIRED.get((section, name, value.lower()))
    return found


def _build_section(section: str, cls: type, values: dict[str, tuple[object, str]],
                   problems: list[str]) -> object:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, object] = {}
    for name, (value, origin) in values.items():
        retired = _retired(section, name, value)
        if retired is not None:
            problems.append(f"{section}.{name}: {retired} (from {origin})")
            continue
        if name not in hints:
            problems.append(f"{section}.{name}: unknown setting (from {origin})")
            continue
        try:
            kwargs[name] = coerce(value, hints[name])
        except ValueError as error:
            problems.append(f"{section}.{name}: {error} (from {origin})")
    return cls(**kwargs)
