-- The apply processor's indexes beside the ApplyJob streams (which stay the record of truth):
-- per-event outcome columns on the inbox, per-partition leases and order, active conflicts.
ALTER TABLE inbox_event
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,
    ADD COLUMN error_class     text,
    ADD COLUMN conflict_id     uuid,
    ADD COLUMN result_revision bytea,
    ADD COLUMN terminal_at     timestamptz;
-- state now also takes DEAD: retries exhausted, waiting for an operator's replay.

-- One row per source partition of a node: who holds it, which job number comes next, the
-- next expected source_sequence, and a retry wait that holds the whole partition in order.
CREATE TABLE apply_partition (
    origin_node_id     text    NOT NULL,
    source_topic       text    NOT NULL,
    source_partition   integer NOT NULL,
    replay_epoch       bigint  NOT NULL,
    next_job_no        bigint  NOT NULL DEFAULT 1,
    current_job_id     uuid,
    lease_owner        text,
    lease_expires_at   timestamptz,
    not_before         timestamptz,
    attempts           integer NOT NULL DEFAULT 0,
    next_sequence      bigint  NOT NULL DEFAULT 1,
    gap_at_sequence    bigint,          -- first missing source_sequence, when a gap holds
    gap_detected_at    timestamptz,
    last_claimed_at    timestamptz,
    PRIMARY KEY (origin_node_id, source_topic, source_partition, replay_epoch)
);

-- At most one active conflict per rule + record key (§11.2); key_digest hides key values.
CREATE TABLE active_conflict (
    rule_id     text NOT NULL,
    key_digest  text NOT NULL,
    conflict_id uuid NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, key_digest)
);
