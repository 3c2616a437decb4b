-- The record_head view on the embedded store (twin of record_head in postgres/0020_views.sql,
-- a SQLite-only migration: PostgreSQL has the table since 0020). Kept by `tidesync shore work`
-- with its position in projection_tracking. Ids and revisions are canonical UUID text, times
-- fixed-width UTC text, tombstone 0/1. record_key holds key values; never log it.
CREATE TABLE record_head (
    rule_id        TEXT    NOT NULL,
    key_digest     TEXT    NOT NULL,
    record_key     TEXT    NOT NULL,
    database       TEXT    NOT NULL,
    table_name     TEXT    NOT NULL,
    revision       TEXT,
    origin_node_id TEXT    NOT NULL,
    last_event_id  TEXT    NOT NULL,
    tombstone      INTEGER NOT NULL,
    updated_at     TEXT    NOT NULL,  -- when the result was finalized
    log_position   INTEGER NOT NULL,
    PRIMARY KEY (rule_id, key_digest)
) WITHOUT ROWID;
CREATE INDEX record_head_table ON record_head (database, table_name);
