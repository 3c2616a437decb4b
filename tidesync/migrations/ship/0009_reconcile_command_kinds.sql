-- Ships answer RECONCILE commands (a digest exchange round) and SNAPSHOT_KEYS (send these rows),
-- so applied_command accepts those kinds. SQLite cannot change a CHECK constraint in place: the
-- table is rebuilt with the same rows.
CREATE TABLE applied_command_0009 (
    applied_id     BLOB    NOT NULL PRIMARY KEY,
    command_id     BLOB    NOT NULL,
    sequence       INTEGER NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('ROW_CHANGE', 'CONFLICT_DECISION', 'RESEND',
                                                  'RECONCILE', 'SNAPSHOT_KEYS')),
    state          TEXT    NOT NULL CHECK (state IN ('APPLYING', 'DONE')),
    result         TEXT,
    reason         TEXT,
    local_revision BLOB,
    recorded_at    TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL
);

INSERT INTO applied_command_0009 (applied_id, command_id, sequence, kind, state, result, reason,
                                  local_revision, recorded_at, updated_at)
SELECT applied_id, command_id, sequence, kind, state, result, reason, local_revision,
       recorded_at, updated_at
FROM applied_command;

DROP TABLE applied_command;

ALTER TABLE applied_command_0009 RENAME TO applied_command;

CREATE INDEX applied_command_command ON applied_command (command_id);
