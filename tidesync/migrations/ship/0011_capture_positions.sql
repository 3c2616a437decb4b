-- The capture index took every new row at a random place (its key is a digest), so each poll's
-- commit wrote pages all over it. New rows also carry where the capture read them, in binlog
-- order (the file's number × 2^40 + the position), and are indexed by that first: they are
-- appended. Rows recorded before keep the capture-id index they had, which shrinks as they are
-- pruned; the intake looks a record up in both.
ALTER TABLE event_state ADD COLUMN capture_pos INTEGER;
DROP INDEX event_state_capture;
CREATE UNIQUE INDEX event_state_capture ON event_state (capture_id)
    WHERE capture_id IS NOT NULL AND capture_pos IS NULL;
CREATE UNIQUE INDEX event_state_capture_at ON event_state (capture_pos, capture_id)
    WHERE capture_pos IS NOT NULL;
