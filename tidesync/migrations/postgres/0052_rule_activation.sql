-- How each node stands on each sync rule it was offered (§8.2, §18.2), as its latest heartbeat
-- reported it: the version it applies, the version it was offered last, whether that one fits
-- its schema and, when not, why (column and table names only, never values). A node's rows are
-- replaced by every newer heartbeat: a rule it no longer reports loses its row.
CREATE TABLE rule_activation (
    node_id           text        NOT NULL,
    rule_id           text        NOT NULL,
    active_version    bigint      NOT NULL,  -- 0: none active
    candidate_version bigint      NOT NULL,
    validation        text        NOT NULL,  -- RULE_VALID | RULE_FAILED | RULE_VALIDATION_UNSPECIFIED
    problems          jsonb       NOT NULL,  -- [text]
    activated_at      timestamptz,
    sent_at           timestamptz NOT NULL,  -- the heartbeat's time on the node's clock
    reported_at       timestamptz NOT NULL,  -- when the shore received it (the shore's clock)
    PRIMARY KEY (node_id, rule_id)
);
CREATE INDEX rule_activation_rule ON rule_activation (rule_id, node_id);
