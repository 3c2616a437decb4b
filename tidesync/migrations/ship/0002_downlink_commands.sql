-- Shore → ship commands (§12): what the ship applied, the acks the shore has not yet accepted.
-- The cursor of GET /sync/v1/commands lives in sync_cursor ('commands'; 'commands_page_end'
-- holds the end of a page whose acks are not all accepted yet).

-- 0001's applied_command was never written; it is replaced by one keyed by the id the rows
-- carry in _sync_event_id, which is what loop suppression looks up.
DROP TABLE IF EXISTS applied_command;

-- One row per applied id: the ShoreRowChange's origin_event_id or the ConflictDecision's
-- decision_id. Written as APPLYING before the business database is touched, so a captured
-- platform write with this id is provably ours even if the process died before DONE.
CREATE TABLE applied_command (
    applied_id     BLOB    NOT NULL PRIMARY KEY,
    command_id     BLOB    NOT NULL,
    sequence       INTEGER NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('ROW_CHANGE', 'DECISION')),
    state          TEXT    NOT NULL CHECK (state IN ('APPLYING', 'DONE')),
    result         TEXT,
    reason         TEXT,
    local_revision BLOB,
    recorded_at    TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL
);
CREATE INDEX applied_command_command ON applied_command (command_id);

-- Acks recorded but not yet accepted by the shore: resent until accepted (or rejected).
-- `ack` is a serialized CommandAcks holding this one ack and its own name table.
CREATE TABLE pending_command_ack (
    command_id  BLOB    NOT NULL PRIMARY KEY,
    sequence    INTEGER NOT NULL,
    result      TEXT    NOT NULL,
    ack         BLOB    NOT NULL,
    recorded_at TEXT    NOT NULL
);

-- Totals of results acked and accepted per result (for `ship status`).
CREATE TABLE command_result_count (
    result TEXT    NOT NULL PRIMARY KEY,
    total  INTEGER NOT NULL
);
