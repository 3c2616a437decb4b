-- An operator's skip (`tidesync jobs skip`): the event goes back to PENDING with this flag, so
-- the next job of its partition finalizes it as REJECTED (SKIPPED_BY_OPERATOR) in source order,
-- without touching the target, and the partition's sequence moves on past it.
ALTER TABLE inbox_event ADD COLUMN skip_requested boolean NOT NULL DEFAULT false;
