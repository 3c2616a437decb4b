"""The `[capture]` settings of built-in capture."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from tidesync.domain.table_names import bad_table_names


class CaptureSource(enum.StrEnum):
    """Where built-in capture reads row changes: a MySQL/MariaDB binlog or a SQLite changelog."""

    MYSQL = "mysql"
    SQLITE = "sqlite"


class TopicRouting(enum.StrEnum):
    """Which topic a captured table's records go to.

    TABLE: one topic per table, `<prefix>.<logical_name>.<database>.<table>` (Debezium's
    default). DATABASE: one topic per database, `<prefix>.<logical_name>.<database>`, always
    its partition 0, so the records of every table of a database keep their commit order and
    the rows of one transaction stay together: what tables related by foreign keys need.
    """

    TABLE = "table"
    DATABASE = "database"


class CaptureStart(enum.StrEnum):
    """Where binlog capture starts when it has no saved position yet."""

    CURRENT = "current"
    EARLIEST = "earliest"


_TOPIC_NAME_PART = re.compile(r"^[A-Za-z0-9._-]{1,100}$")

CDC_TOPIC_PREFIX = "sync.cdc"
SHORE_LOGICAL_NAME = "shore"
"""The shore capture's default logical name: its topics are `sync.cdc.shore.<db>.<table>`."""
SHIP_TOPIC_PATTERN = r"^sync\.cdc\.(?!shore\.)"
"""The ship client's default topics: every capture's under `sync.cdc.` except the shore's."""
SHORE_TOPIC_PATTERN = r"^sync\.cdc\.shore\."
"""The shore CDC consumer's default topics: the shore capture's."""


@dataclass(frozen=True)
class CaptureConfig:
    """Built-in capture (`tidesync ship capture`): its source, its topics and its position file.

    Topics are `<topic_prefix>.<logical_name>.<database>.<table>`, or with
    `topic_routing = "database"` one topic per database, `<topic_prefix>.<logical_name>.
    <database>`; the logical name defaults to ship.node_id. The broker defaults to
    ship.kafka_bootstrap_servers.
    """

    source: CaptureSource = CaptureSource.SQLITE
    logical_name: str = ""
    topic_prefix: str = "sync.cdc"
    # "table" (one topic per table) or "database" (one per database, in commit order; for
    # schemas with foreign keys). Changing it on a running installation starts new topics.
    topic_routing: TopicRouting = TopicRouting.TABLE
    kafka_bootstrap_servers: str = ""
    # Topics are created when missing (tansu and Redpanda may not auto-create them).
    topic_partitions: int = 1
    topic_replication_factor: int = 1
    # A delete is followed by a tombstone (same key, null value), as Debezium does by default.
    tombstones_on_delete: bool = True
    # The resume position (SQLite, WAL, synchronous=FULL), saved after each flushed batch.
    position_path: str = "tidesync-data/capture-position.sqlite"
    batch_max_records: int = 2000
    flush_interval_ms: int = 500
    # MySQL / MariaDB binlog source: a replication account, a replica server id unique among the
    # server's replicas, the databases (an array) and optionally only some of their tables
    # (an array of db.table).
    mysql_host: str = "127.0.0.1"
    mysql_port: int = 3306
    mysql_user: str = "tidesync_capture"
    mysql_password: str = field(default="", metadata={"secret": True})
    server_id: int = 0
    databases: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    start_from: CaptureStart = CaptureStart.CURRENT
    heartbeat_seconds: int = 1
    # Incremental snapshots (`tidesync snapshot start`): rows read per second, so the binlog's
    # changes keep flowing between chunks.
    snapshot_rows_per_sec: int = 2000
    # SQLite source: the business database file, how often the changelog is polled, and how many
    # published changelog rows to keep for diagnosis.
    sqlite_path: str = "tidesync-data/ship-business.sqlite"
    sqlite_poll_interval_ms: int = 200
    changelog_keep_rows: int = 0

    def validate(self) -> list[str]:
        return self.problems("capture")

    def problems(self, section: str) -> list[str]:
        """Every invalid setting, named as `section.field`."""
        problems = []
        for name in ("topic_partitions", "topic_replication_factor", "batch_max_records",
                     "flush_interval_ms", "heartbeat_seconds", "sqlite_poll_interval_ms",
                     "snapshot_rows_per_sec"):
            if getattr(self, name) < 1:
                problems.append(f"{section}.{name}: must be >= 1")
        if self.changelog_keep_rows < 0:
            problems.append(f"{section}.changelog_keep_rows: must be >= 0")
        if not 1 <= self.mysql_port <= 65535:
            problems.append(f"{section}.mysql_port: must be 1..65535")
        if not 0 <= self.server_id <= 4_294_967_295:
            problems.append(f"{section}.server_id: must be 0..4294967295")
        for name in ("logical_name", "topic_prefix"):
            value = getattr(self, name)
            if value and not _TOPIC_NAME_PART.fullmatch(value):
                problems.append(f"{section}.{name}: only letters, digits, '.', '_' and '-'")
        problems += bad_table_names(f"{section}.tables", self.tables)
        return problems


@dataclass(frozen=True)
class ShoreCaptureConfig(CaptureConfig):
    """The shore's own capture (`tidesync shore capture`, `[shore_capture]`): the shore MySQL's
    binlog into the topics `tidesync shore work` turns into commands for the ships.

    The same settings as `[capture]` with the shore's defaults: the binlog source, the logical
    name `shore` (topics `sync.cdc.shore.<db>.<table>`, which the ships' default pattern
    leaves alone), its own position file. The broker defaults to
    `downlink.kafka_bootstrap_servers` and the databases to those of
    `downlink.bidirectional_tables`.
    """

    source: CaptureSource = CaptureSource.MYSQL
    logical_name: str = SHORE_LOGICAL_NAME
    position_path: str = "tidesync-data/shore-capture-position.sqlite"

    def validate(self) -> list[str]:
        return self.problems("shore_capture")


def sample_topic(logical_name: str, prefix: str = CDC_TOPIC_PREFIX) -> str:
    """A topic name a capture with this logical name writes (for checking patterns)."""
    return f"{prefix}.{logical_name}.db.table"


def other_side_topics(pattern: str, topics: list[str], other_pattern: str) -> list[str]:
    """The topics `pattern` matches that belong to the other side (match `other_pattern`):
    consuming them would send one side's changes back as the other's."""
    own, other = re.compile(pattern), re.compile(other_pattern)
    return sorted(topic for topic in topics if own.search(topic) and other.search(topic))
