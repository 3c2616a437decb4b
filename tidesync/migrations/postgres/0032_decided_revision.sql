-- Revisions a conflict decision has weighed, per rule + record key. A change that arrives
-- after the decision carrying one of them was part of that conflict: it is recorded against
-- the decided case instead of opening a new one.
CREATE TABLE decided_revision (
    rule_id     text NOT NULL,
    key_digest  text NOT NULL,
    revision    uuid NOT NULL,
    conflict_id uuid NOT NULL,
    PRIMARY KEY (rule_id, key_digest, revision)
);
