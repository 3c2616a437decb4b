-- Replays by range (§7.4): an operator's request to read a closed range of one queue partition
-- again under a new replay epoch, and how far the running client got with it. Who asked and
-- why are kept with it (the audit); offsets and counts only, never business values.
CREATE TABLE replay_run (
    replay_epoch    INTEGER NOT NULL PRIMARY KEY,
    original_epoch  INTEGER NOT NULL,
    topic           TEXT    NOT NULL,
    kafka_partition INTEGER NOT NULL,
    first_offset    INTEGER NOT NULL,
    last_offset     INTEGER NOT NULL,
    since_ms        INTEGER,
    until_ms        INTEGER,
    actor           TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('QUEUED', 'READING', 'READ', 'FAILED')),
    detail          TEXT,
    read_offset     INTEGER NOT NULL DEFAULT -1,
    records_read    INTEGER NOT NULL DEFAULT 0,
    requested_at    TEXT    NOT NULL,
    started_at      TEXT,
    read_at         TEXT,
    updated_at      TEXT    NOT NULL,
    CHECK (first_offset <= last_offset)
);
CREATE INDEX replay_run_open ON replay_run (state) WHERE state IN ('QUEUED', 'READING');
