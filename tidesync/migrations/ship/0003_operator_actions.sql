-- What an operator did to the ship's records, kept beside them (§7.6: BLOCKED needs a
-- disposition; EXPIRED_APPROVED means approved never to be delivered). Operator names and
-- reasons only, never business values.
CREATE TABLE operator_action (
    action_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    action          TEXT    NOT NULL CHECK (action IN ('EXPIRE_BLOCKED', 'CONFIRM_ORIGIN')),
    event_id        BLOB    NOT NULL,
    direction       TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    kafka_partition INTEGER NOT NULL,
    kafka_offset    INTEGER NOT NULL,
    replay_epoch    INTEGER NOT NULL,
    blocked_reason  TEXT,
    released        INTEGER NOT NULL,
    actor           TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    acted_at        TEXT    NOT NULL
);
