-- Reconciliation over the link (docs/onboarding.md): one row per exchange between the shore and
-- one ship about one table or rule, and the consistency sentinel, the last exchange of each
-- (node, subject). Only counts, sizes and keys are kept, never a business value.

CREATE TABLE reconcile_exchange (
    exchange_id      uuid        PRIMARY KEY,
    started_order    bigint      GENERATED ALWAYS AS IDENTITY,  -- start order, for "the last"
    node_id          text        NOT NULL,
    subject          text        NOT NULL,           -- rule:NAME or table:DB.TABLE
    shore_table      text        NOT NULL,           -- DB.TABLE on the shore
    ship_table       text        NOT NULL,           -- DB.TABLE on the ship
    row_filter       text        NOT NULL DEFAULT '',
    state            text        NOT NULL CHECK (state IN ('RUNNING', 'EQUAL', 'DIFFERENT',
                                                           'FAILED')),
    round            integer     NOT NULL,           -- the round of the last message
    waiting_round    integer,                        -- the ship's answer awaited (RUNNING)
    command_id       uuid,                           -- the last RECONCILE command issued
    answer           bytea,                          -- that answer, not yet taken up (zstd JSON)
    messages         integer     NOT NULL DEFAULT 0,
    link_bytes       bigint      NOT NULL DEFAULT 0, -- compressed, both directions
    rows_compared    bigint      NOT NULL DEFAULT 0,
    differing_count  integer,
    differing_keys   jsonb,                          -- type-tagged key values
    shore_only_keys  jsonb,                          -- of those, the keys the ship lacks
    actor            text        NOT NULL,
    reason           text        NOT NULL,
    error            text        NOT NULL DEFAULT '',
    started_at       timestamptz NOT NULL,           -- the injected clock, as ended_at
    ended_at         timestamptz,
    repaired_at      timestamptz,
    repair_actor     text,
    repair_reason    text
);

-- Never two exchanges at once for the same node and subject.
CREATE UNIQUE INDEX reconcile_exchange_running ON reconcile_exchange (node_id, subject)
    WHERE state = 'RUNNING';
CREATE INDEX reconcile_exchange_latest ON reconcile_exchange (node_id, subject,
                                                              started_order DESC);
CREATE INDEX reconcile_exchange_answered ON reconcile_exchange (exchange_id)
    WHERE answer IS NOT NULL;

-- The consistency sentinel: the last exchange of every node and subject.
CREATE VIEW reconcile_sentinel AS
SELECT DISTINCT ON (node_id, subject)
       exchange_id, node_id, subject, state, differing_count, rows_compared, messages,
       link_bytes, started_at, ended_at,
       EXTRACT(EPOCH FROM (ended_at - started_at))::double precision AS seconds, error,
       repaired_at
FROM reconcile_exchange
ORDER BY node_id, subject, started_order DESC;
