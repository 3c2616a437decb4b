-- Ship and shore name command kinds and results with the domain's enums
-- (tidesync.domain.downlink_command): the ship's old "DECISION" kind is CONFLICT_DECISION.
-- Results need no rewrite: the ship always stored sync.proto's CommandResult names
-- (COMMAND_APPLIED, COMMAND_ALREADY_APPLIED, COMMAND_CONFLICT_REPORTED, COMMAND_REJECTED),
-- which are the domain's values. The wire is unchanged.

-- SQLite cannot change a CHECK constraint in place: the table is rebuilt with the new kinds.
CREATE TABLE applied_command_0004 (
    applied_id     BLOB    NOT NULL PRIMARY KEY,
    command_id     BLOB    NOT NULL,
    sequence       INTEGER NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('ROW_CHANGE', 'CONFLICT_DECISION')),
    state          TEXT    NOT NULL CHECK (state IN ('APPLYING', 'DONE')),
    result         TEXT,
    reason         TEXT,
    local_revision BLOB,
    recorded_at    TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL
);

INSERT INTO applied_command_0004 (applied_id, command_id, sequence, kind, state, result, reason,
                                  local_revision, recorded_at, updated_at)
SELECT applied_id, command_id, sequence,
       CASE kind WHEN 'DECISION' THEN 'CONFLICT_DECISION' ELSE kind END,
       state, result, reason, local_revision, recorded_at, updated_at
FROM applied_command;

DROP TABLE applied_command;

ALTER TABLE applied_command_0004 RENAME TO applied_command;

CREATE INDEX applied_command_command ON applied_command (command_id);

-- 0001's inbound_command was never written; should a row exist, it reads the same way.
UPDATE inbound_command SET kind = 'CONFLICT_DECISION' WHERE kind = 'DECISION';
