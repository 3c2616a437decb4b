-- The sync API's own tables on SQLite (twin of postgres/0002_ingress.sql): the request-id
-- cache that stops replays, the receipts ships pull, and what heartbeats report.

-- Request ids already used per node (§9.1). A row lives until its request could no longer
-- pass the timestamp check; expired rows are purged.
CREATE TABLE request_nonce (
    node_id    TEXT NOT NULL,
    request_id TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (node_id, request_id)
) WITHOUT ROWID;
CREATE INDEX request_nonce_expiry ON request_nonce (expires_at);

-- Terminal results of uplink events in the order ships pull them (GET /sync/v1/receipts);
-- written by the receipts projection, `seq` increasing.
CREATE TABLE IF NOT EXISTS receipt (
    seq              INTEGER PRIMARY KEY,
    origin_node_id   TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    result           TEXT    NOT NULL,
    reason_code      TEXT,
    conflict_id      TEXT,
    result_revision  BLOB,
    decided_at       TEXT    NOT NULL,
    source_topic     TEXT    NOT NULL,
    source_partition INTEGER NOT NULL,
    source_position  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS receipt_node_seq ON receipt (origin_node_id, seq);
-- A re-sent event that already has its result answers with it (POST /sync/v1/batches).
CREATE INDEX IF NOT EXISTS receipt_node_event ON receipt (origin_node_id, event_id);

-- The latest heartbeat of each node: versions and subsystem health (§18.2).
CREATE TABLE node_heartbeat (
    node_id               TEXT PRIMARY KEY,
    received_at           TEXT NOT NULL,
    sent_at               TEXT NOT NULL,
    protocol_version      TEXT NOT NULL,
    client_version        TEXT NOT NULL,
    active_config_version TEXT NOT NULL,
    health                TEXT NOT NULL CHECK (json_valid(health))
        -- [{subsystem, state, reason_code, detail, since}]
) WITHOUT ROWID;

-- Backlog and throughput samples (§10.1, §15): input of backlog and ETA views. A sample sent
-- again in a later heartbeat (same node, time and dimension) is stored once.
--   BACKLOG:    one row per direction + topic + partition at the heartbeat's sent_at
--   THROUGHPUT: one row per direction and window, sampled_at = window start
CREATE TABLE metric_sample (
    node_id                    TEXT    NOT NULL,
    sampled_at                 TEXT    NOT NULL,
    dimension                  TEXT    NOT NULL,  -- e.g. ["BACKLOG","UPLINK","topic",3]
    kind                       TEXT    NOT NULL,  -- BACKLOG | THROUGHPUT
    direction                  TEXT    NOT NULL,  -- UPLINK | DOWNLINK
    received_at                TEXT    NOT NULL,
    topic                      TEXT,
    source_partition           INTEGER,
    rule_id                    TEXT,
    end_offset                 INTEGER,
    received_offset            INTEGER,
    terminal_offset            INTEGER,
    backlog_bytes              INTEGER,
    estimated_compressed_bytes INTEGER,
    oldest_captured_at         TEXT,
    oldest_business_at         TEXT,
    window_seconds             INTEGER,
    payload_bytes_confirmed    INTEGER,
    physical_bytes             INTEGER,
    active_transfer_seconds    REAL,
    PRIMARY KEY (node_id, sampled_at, dimension)
) WITHOUT ROWID;
