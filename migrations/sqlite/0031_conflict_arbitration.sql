-- See the PostgreSQL twin: when the arbiter should next look at an active conflict. (SQLite
-- cannot add a column with a computed default; the epoch means "due at once".)
ALTER TABLE active_conflict ADD COLUMN due_at text DEFAULT '1970-01-01T00:00:00+00:00';
CREATE INDEX active_conflict_due ON active_conflict (due_at) WHERE due_at IS NOT NULL;
