-- The apply processor's indexes beside the ApplyJob streams (twin of
-- postgres/0010_apply_processor.sql): per-event outcome columns on the inbox, per-partition
-- leases and order, active conflicts.
ALTER TABLE inbox_event ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inbox_event ADD COLUMN error_class TEXT;
ALTER TABLE inbox_event ADD COLUMN conflict_id TEXT;
ALTER TABLE inbox_event ADD COLUMN result_revision BLOB;
ALTER TABLE inbox_event ADD COLUMN terminal_at TEXT;
-- state now also takes DEAD: retries exhausted, waiting for an operator's replay.

-- One row per source partition of a node: who holds it, which job number comes next, the
-- next expected source_sequence, and a retry wait that holds the whole partition in order.
CREATE TABLE apply_partition (
    origin_node_id   TEXT    NOT NULL,
    source_topic     TEXT    NOT NULL,
    source_partition INTEGER NOT NULL,
    replay_epoch     INTEGER NOT NULL,
    next_job_no      INTEGER NOT NULL DEFAULT 1,
    current_job_id   TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    not_before       TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_sequence    INTEGER NOT NULL DEFAULT 1,
    gap_at_sequence  INTEGER,  -- first missing source_sequence, when a gap holds
    gap_detected_at  TEXT,
    last_claimed_at  TEXT,
    PRIMARY KEY (origin_node_id, source_topic, source_partition, replay_epoch)
) WITHOUT ROWID;

-- At most one active conflict per rule + record key (§11.2); key_digest hides key values.
CREATE TABLE active_conflict (
    rule_id     TEXT NOT NULL,
    key_digest  TEXT NOT NULL,
    conflict_id TEXT NOT NULL,
    opened_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (rule_id, key_digest)
) WITHOUT ROWID;
