-- Views that stopped on an error that retrying cannot cure (a value PostgreSQL refuses, a bug):
-- the worker skips them (the others go on) until a rebuild switches a new copy in.
CREATE TABLE IF NOT EXISTS projection_failure (
    view_name  text PRIMARY KEY,
    reason     text        NOT NULL,
    error_type text        NOT NULL,
    failed_at  timestamptz NOT NULL
);
