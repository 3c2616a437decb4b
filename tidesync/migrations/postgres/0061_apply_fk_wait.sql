-- A partition whose next chunk broke a foreign key waits for the other row (a parent applied
-- later, or from another partition) and retries; this is when the wait began (the injected
-- clock, like gap_detected_at), so the wait ends REJECTED after `[apply] fk_wait_seconds`.
-- Cleared whenever the partition moves on.
ALTER TABLE apply_partition ADD COLUMN fk_wait_since timestamptz;
