-- When the arbiter should next look at an active conflict: a new case is due at once; a
-- case with an auto-decide lease when the lease runs out; a decided case at once (to be
-- dispatched); a case waiting for a person or for ships' answers is not due (NULL).
ALTER TABLE active_conflict ADD COLUMN due_at timestamptz DEFAULT now();
CREATE INDEX active_conflict_due ON active_conflict (due_at) WHERE due_at IS NOT NULL;
