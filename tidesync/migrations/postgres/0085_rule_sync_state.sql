-- How far each node's snapshots got (§16.2), as its latest heartbeat reported them: per active
-- rule (subject rule:ID) the snapshot its running version asked for, or NONE, and per table
-- (subject table:DB.TABLE) the last snapshot no rule asked for. Names, counts and times only,
-- never a value. A node's rows are replaced by every newer heartbeat: a subject it no longer
-- reports loses its row.
CREATE TABLE rule_sync_state (
    node_id      text        NOT NULL,
    subject      text        NOT NULL,  -- rule:ID or table:DB.TABLE
    rule_id      text,                  -- null: a snapshot no rule asked for
    rule_version bigint      NOT NULL,  -- 0 without a rule
    table_name   text        NOT NULL,  -- DB.TABLE the rule or snapshot reads
    phase        text        NOT NULL CHECK (phase IN ('NONE', 'QUEUED', 'SNAPSHOTTING',
                                                       'CATCHING_UP', 'IN_SYNC', 'FAILED')),
    snapshot_id  bigint,                -- the ship's snapshot request; null with NONE
    rows_sent    bigint      NOT NULL,
    rows_total   bigint,                -- null: not known yet
    started_at   timestamptz,           -- the node's clock, as finished_at and sent_at
    finished_at  timestamptz,           -- every chunk on the queue, or FAILED
    lag_records  bigint      NOT NULL,  -- queue records up to the snapshot's last unanswered
    sent_at      timestamptz NOT NULL,  -- the heartbeat's time
    reported_at  timestamptz NOT NULL,  -- when the shore received it (the shore's clock)
    PRIMARY KEY (node_id, subject)
);
CREATE INDEX rule_sync_state_rule ON rule_sync_state (rule_id, node_id)
    WHERE rule_id IS NOT NULL;
