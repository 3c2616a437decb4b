-- See the PostgreSQL twin: revisions a conflict decision has weighed.
CREATE TABLE decided_revision (
    rule_id     TEXT NOT NULL,
    key_digest  TEXT NOT NULL,
    revision    TEXT NOT NULL,
    conflict_id TEXT NOT NULL,
    PRIMARY KEY (rule_id, key_digest, revision)
);
