-- Durable receive (§10.2) on the embedded SQLite store: the twin of postgres/0001_inbox.sql.
-- SQLite has no uuid, bytea or timestamptz: ids are canonical UUID text, bodies are BLOBs and
-- times are fixed-width UTC text ('2026-11-30T12:00:00.000000Z'), which sorts like the time.
CREATE TABLE inbox_batch (
    batch_ref       TEXT    PRIMARY KEY,
    origin_node_id  TEXT    NOT NULL,
    client_batch_id BLOB    NOT NULL,
    body            BLOB    NOT NULL,  -- serialized UploadBatch (decompressed, verified)
    event_count     INTEGER NOT NULL,
    received_at     TEXT    NOT NULL
);

CREATE TABLE inbox_event (
    origin_node_id   TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    batch_ref        TEXT    NOT NULL,
    batch_index      INTEGER NOT NULL,  -- position of the event inside the batch body
    source_topic     TEXT    NOT NULL,
    source_partition INTEGER NOT NULL,
    source_position  INTEGER NOT NULL,
    source_sequence  INTEGER,
    replay_epoch     INTEGER NOT NULL,
    received_at      TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'PENDING',  -- PENDING | TERMINAL | DEAD
    job_id           TEXT,
    result           TEXT,  -- APPLIED | CONFLICT_RECORDED | REJECTED | EXPIRED_APPROVED
    reason_code      TEXT,
    PRIMARY KEY (origin_node_id, event_id)
) WITHOUT ROWID;

-- The apply processor claims work per source partition, in position order.
CREATE INDEX inbox_event_open ON inbox_event
    (origin_node_id, source_topic, source_partition, replay_epoch, source_position)
    WHERE state <> 'TERMINAL';

-- Requests refused at the door (forged origin, integrity alarm, malformed event): kept for
-- operators; digests only, never values.
CREATE TABLE receive_rejection (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    origin_node_id TEXT NOT NULL,
    event_id       TEXT,
    reason_code    TEXT NOT NULL,
    detail         TEXT NOT NULL,
    content_digest BLOB,
    recorded_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
