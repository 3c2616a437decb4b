-- Where each projection has read up to in its application's notification log; written in the
-- same transaction as the projection's view rows (twin of postgres/0011, with the counters
-- postgres/0020 adds: notifications consumed and the rate of the last batch).
CREATE TABLE projection_tracking (
    name          TEXT    PRIMARY KEY,
    position      INTEGER NOT NULL,
    updated_at    TEXT    NOT NULL,
    processed     INTEGER NOT NULL DEFAULT 0,
    rate          REAL    NOT NULL DEFAULT 0,
    last_batch_at TEXT
) WITHOUT ROWID;
