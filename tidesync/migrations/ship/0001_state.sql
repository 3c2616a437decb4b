-- The ship's state store (§7.5): indexes over the CDC queue, watermarks, rules and commands.
-- Full event payloads are never stored here: they are re-read from the queue.

-- One row per queue partition and processing direction (§7.6). Offsets are inclusive "last"
-- offsets; -1 means none yet. base_offset is the offset just before the first record this
-- state tracked in the partition, so every offset above it up to read_offset was read and,
-- if it was an event, recorded in event_state. The queue commit is terminal_offset + 1.
CREATE TABLE partition_watermark (
    direction            TEXT    NOT NULL CHECK (direction IN ('UPLINK', 'DOWNLINK')),
    consumer_group       TEXT    NOT NULL,
    topic                TEXT    NOT NULL,
    kafka_partition      INTEGER NOT NULL,
    replay_epoch         INTEGER NOT NULL,
    base_offset          INTEGER NOT NULL,
    read_offset          INTEGER NOT NULL,
    received_offset      INTEGER NOT NULL,
    terminal_offset      INTEGER NOT NULL,
    committed_offset     INTEGER,
    end_offset           INTEGER,
    next_source_sequence INTEGER NOT NULL DEFAULT 1,
    updated_at           TEXT    NOT NULL,
    PRIMARY KEY (direction, consumer_group, topic, kafka_partition),
    CHECK (base_offset <= terminal_offset AND terminal_offset <= received_offset
           AND received_offset <= read_offset)
);

-- One row per queue record that needs a decision beyond "skip": events (READY … TERMINAL),
-- blocked records and recognised duplicates. Skipped records (tombstones, heartbeats,
-- transaction markers, schema changes) leave no row: they are terminal as soon as read.
CREATE TABLE event_state (
    event_id         BLOB    NOT NULL PRIMARY KEY,
    direction        TEXT    NOT NULL CHECK (direction IN ('UPLINK', 'DOWNLINK')),
    topic            TEXT    NOT NULL,
    kafka_partition  INTEGER NOT NULL,
    kafka_offset     INTEGER NOT NULL,
    replay_epoch     INTEGER NOT NULL,
    rule_id          TEXT,
    state            TEXT    NOT NULL CHECK (state IN ('CONSUMED', 'READY', 'IN_FLIGHT',
                         'RECEIVED', 'RETRY_WAIT', 'TERMINAL', 'EXPIRED_APPROVED', 'BLOCKED')),
    result           TEXT,
    reason           TEXT,
    detail           TEXT,
    source_sequence  INTEGER,
    bytes            INTEGER NOT NULL,
    key_digest       BLOB,
    capture_id       BLOB,
    duplicate_of     BLOB,
    attempts         INTEGER NOT NULL DEFAULT 0,
    captured_at      INTEGER,
    business_at      INTEGER,
    updated_at       TEXT    NOT NULL
);
CREATE UNIQUE INDEX event_state_position
    ON event_state (topic, kafka_partition, kafka_offset, replay_epoch, direction);
CREATE INDEX event_state_state_rule ON event_state (state, rule_id);
-- A record the capture emitted again (same binlog coordinates) is recognised by this.
CREATE UNIQUE INDEX event_state_capture ON event_state (capture_id)
    WHERE capture_id IS NOT NULL;
-- The first non-terminal and the first unreceived offset of a partition, in O(log n).
CREATE INDEX event_state_open
    ON event_state (direction, topic, kafka_partition, replay_epoch, kafka_offset)
    WHERE state NOT IN ('TERMINAL', 'EXPIRED_APPROVED');
CREATE INDEX event_state_unreceived
    ON event_state (direction, topic, kafka_partition, replay_epoch, kafka_offset)
    WHERE state NOT IN ('RECEIVED', 'TERMINAL', 'EXPIRED_APPROVED');

CREATE TABLE rule_snapshot (
    rule_id     TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    status      TEXT    NOT NULL,
    content     BLOB    NOT NULL,
    checksum    BLOB    NOT NULL,
    validation  TEXT,
    active      INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),
    received_at TEXT    NOT NULL,
    PRIMARY KEY (rule_id, version)
);
CREATE UNIQUE INDEX rule_snapshot_active ON rule_snapshot (rule_id) WHERE active = 1;

CREATE TABLE inbound_command (
    command_id        BLOB    NOT NULL PRIMARY KEY,
    sequence          INTEGER NOT NULL UNIQUE,
    kind              TEXT    NOT NULL,
    expected_revision BLOB,
    state             TEXT    NOT NULL,
    result            TEXT,
    reason            TEXT,
    received_at       TEXT    NOT NULL,
    updated_at        TEXT    NOT NULL
);

CREATE TABLE applied_command (
    command_id     BLOB NOT NULL PRIMARY KEY,
    result         TEXT NOT NULL,
    local_revision BLOB,
    applied_at     TEXT NOT NULL
);

-- Offline statistics and ETA input (§15): open events per rule and state at a moment.
CREATE TABLE queue_metric (
    sampled_at         TEXT    NOT NULL,
    rule_id            TEXT    NOT NULL,
    state              TEXT    NOT NULL,
    events             INTEGER NOT NULL,
    bytes              INTEGER NOT NULL,
    oldest_captured_at INTEGER,
    newest_captured_at INTEGER,
    PRIMARY KEY (sampled_at, rule_id, state)
);

-- Pull cursors (receipts, later commands) and the client's subsystem health.
CREATE TABLE sync_cursor (
    name       TEXT NOT NULL PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE subsystem_health (
    subsystem   TEXT NOT NULL PRIMARY KEY,
    state       TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    detail      TEXT NOT NULL,
    since       TEXT NOT NULL
);
