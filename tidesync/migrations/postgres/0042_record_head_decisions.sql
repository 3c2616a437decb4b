-- record_head follows conflict decisions applied on the shore too: when the last one was (a
-- result finalized before it does not overwrite it).
ALTER TABLE record_head ADD COLUMN IF NOT EXISTS decided_at timestamptz;

-- The newest dispatched decision of each record, kept whether or not the record has a head
-- yet: the two feeds of the view (results, decisions) run independently, and a rebuild may
-- read every decision before the results they decide. Part of the record_head view.
CREATE TABLE IF NOT EXISTS record_head_decision (
    rule_id     text        NOT NULL,
    key_digest  text        NOT NULL,
    revision    uuid,
    tombstone   boolean     NOT NULL,
    decided_at  timestamptz NOT NULL,
    PRIMARY KEY (rule_id, key_digest)
);
