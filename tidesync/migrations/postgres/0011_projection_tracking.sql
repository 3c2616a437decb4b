-- Where each projection has read up to in its application's notification log; written in the
-- same transaction as the projection's view rows.
CREATE TABLE projection_tracking (
    name       text PRIMARY KEY,
    position   bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);
