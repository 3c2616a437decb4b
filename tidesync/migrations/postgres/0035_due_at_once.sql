-- A case that is due "at once" carries the earliest time instead of the database's now():
-- the arbiter compares due_at with its injected clock, so database time is never written here.
-- Every other due_at is the arbiter's clock plus a delay.
ALTER TABLE active_conflict ALTER COLUMN due_at SET DEFAULT '1970-01-01 00:00:00+00';
-- The other columns that default to now() (inbox.recorded_at, active_conflict.opened_at,
-- downlink_command.recorded_at, shore_cdc_block.blocked_at, shore_cdc_release.released_at) are
-- database time, used to show and to order rows, and never compared with the injected clock.
