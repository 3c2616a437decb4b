-- A reconciliation exchange whose ship stays silent ends TIMED_OUT (docs/onboarding.md):
-- turn_at is when the shore issued the turn it waits for (the injected clock), contact_at the
-- first heartbeat the shore received from the ship at or after it. The silence is measured
-- from contact_at, so time a ship spends offline before it is heard from again never counts.

ALTER TABLE reconcile_exchange ADD COLUMN turn_at timestamptz;
ALTER TABLE reconcile_exchange ADD COLUMN contact_at timestamptz;
UPDATE reconcile_exchange SET turn_at = started_at WHERE state = 'RUNNING';

ALTER TABLE reconcile_exchange DROP CONSTRAINT reconcile_exchange_state_check;
ALTER TABLE reconcile_exchange ADD CONSTRAINT reconcile_exchange_state_check
    CHECK (state IN ('RUNNING', 'EQUAL', 'DIFFERENT', 'FAILED', 'TIMED_OUT'));

-- The backlog view counts snapshot events under priority BULK and every other event under
-- NORMAL (docs/onboarding.md), so the open events' times are looked up per priority too.

DROP INDEX backlog_event_captured;
DROP INDEX backlog_event_business;
CREATE INDEX backlog_event_captured
    ON backlog_event (origin_node_id, rule_id, priority, state, captured_at);
CREATE INDEX backlog_event_business
    ON backlog_event (origin_node_id, rule_id, priority, state, business_at);
