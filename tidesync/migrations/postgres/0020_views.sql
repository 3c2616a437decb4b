-- Read models (§4, §10.1, §15, §17.3, §18.2, §21) written by the projections in
-- tidesync/projections/, each with its position in projection_tracking in the same transaction.
-- A rebuild fills `<table>__rebuild` copies of a view's tables and renames them into place in
-- one transaction, so no other object may depend on these tables (no SQL views or foreign
-- keys onto them): query them directly.

-- Where each projection stands, beyond its position: how many notifications it has consumed
-- and how fast its last batch went (shown by `tidesync projections status`).
ALTER TABLE projection_tracking
    ADD COLUMN processed     bigint           NOT NULL DEFAULT 0,
    ADD COLUMN rate          double precision NOT NULL DEFAULT 0,
    ADD COLUMN last_batch_at timestamptz;

-- The shore's current version of each record (§10.1), from APPLIED results. key_digest is
-- sha256(rule_id || 0x1f || record_key), the same digest conflict cases carry. The newest
-- result in notification order wins (log_position, the Finalized event's notification id).
CREATE TABLE record_head (
    rule_id        text        NOT NULL,
    key_digest     text        NOT NULL,
    record_key     text        NOT NULL,  -- canonical RecordKey text (holds key values)
    database       text        NOT NULL,
    table_name     text        NOT NULL,
    revision       uuid,
    origin_node_id text        NOT NULL,
    last_event_id  uuid        NOT NULL,
    tombstone      boolean     NOT NULL,
    updated_at     timestamptz NOT NULL,  -- when the result was finalized
    log_position   bigint      NOT NULL,
    PRIMARY KEY (rule_id, key_digest)
);
CREATE INDEX record_head_table ON record_head (database, table_name);

-- The conflict center (§11, §21.2): one row per ConflictCase, as of its newest event.
-- summary holds no values: event ids, operations, revisions and column names only.
CREATE TABLE conflict_center (
    conflict_id    uuid PRIMARY KEY,
    rule_id        text        NOT NULL,
    key_digest     text        NOT NULL,
    database       text        NOT NULL,
    table_name     text        NOT NULL,
    state          text        NOT NULL,
    opened_at      timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    evidence_count integer     NOT NULL,
    node_ids       text[]      NOT NULL,
    sla_due_at     timestamptz NOT NULL,
    summary        jsonb       NOT NULL,
    version        bigint      NOT NULL,  -- the case version this row shows
    rule_version   bigint
);
CREATE INDEX conflict_center_state ON conflict_center (state, sla_due_at);
CREATE INDEX conflict_center_key ON conflict_center (rule_id, key_digest);

-- Node overview (§17.1, §18.2, §21.2). status and registration come from the Node streams;
-- client_version, last_heartbeat_at, health, backlog_* and throughput are copied from the
-- node's latest heartbeat (node_heartbeat, metric_sample): they are what the node reported,
-- not measured by the shore.
CREATE TABLE node_overview (
    node_id               text PRIMARY KEY,
    status                text        NOT NULL,
    registered_at         timestamptz,
    revoked_at            timestamptz,
    client_version        text,
    last_heartbeat_at     timestamptz,  -- when the shore received it
    health                jsonb,        -- [{subsystem, state, reason_code, detail, since}]
    backlog_events        bigint,       -- uplink events not yet terminal, as reported
    backlog_bytes         bigint,
    throughput            jsonb,        -- {direction: latest window}
    heartbeat_sent_at     timestamptz,  -- the node's own clock
    protocol_version      text,
    active_config_version text,
    health_state          text,         -- the most severe reported subsystem state
    version               bigint NOT NULL  -- the Node aggregate version this row shows
);

-- Backlog by node, direction, rule, priority and state (§15.1).
--   direction UPLINK: events the shore received, by apply state: RECEIVED (in the inbox, not
--     yet claimed; its rule is not known before that, so rule_id = ''), CLAIMED, RETRY_WAIT,
--     DEAD, PENDING (handed back behind a gap or by a replay), and the terminal results
--     APPLIED / CONFLICT_RECORDED / REJECTED / EXPIRED_APPROVED (current counts: a replay
--     takes an event out of its result again).
--   direction UPLINK_SHIP / DOWNLINK_SHIP: the node's own queue as its latest heartbeat
--     reported it (state QUEUED: captured, not yet terminal).
-- Priority is NORMAL until rules carry one.
CREATE TABLE backlog (
    node_id                    text   NOT NULL,
    direction                  text   NOT NULL,
    rule_id                    text   NOT NULL,
    priority                   text   NOT NULL,
    state                      text   NOT NULL,
    events                     bigint NOT NULL,
    bytes                      bigint NOT NULL,
    oldest_business_at         timestamptz,
    newest_business_at         timestamptz,
    oldest_captured_at         timestamptz,
    newest_captured_at         timestamptz,
    estimated_compressed_bytes bigint,
    reported_at                timestamptz,  -- UPLINK_SHIP / DOWNLINK_SHIP: heartbeat sent_at
    PRIMARY KEY (node_id, direction, rule_id, priority, state)
);

-- The backlog projection's own bookkeeping: each received event not yet terminal (its rule,
-- size and times read once from its batch), and the node of each apply job.
CREATE TABLE backlog_event (
    origin_node_id text   NOT NULL,
    event_id       uuid   NOT NULL,
    rule_id        text   NOT NULL,
    priority       text   NOT NULL,
    state          text   NOT NULL,
    bytes          bigint NOT NULL,
    captured_at    timestamptz,
    business_at    timestamptz,
    PRIMARY KEY (origin_node_id, event_id)
);
CREATE INDEX backlog_event_captured ON backlog_event (origin_node_id, rule_id, state, captured_at);
CREATE INDEX backlog_event_business ON backlog_event (origin_node_id, rule_id, state, business_at);

CREATE TABLE backlog_job (
    job_id         uuid PRIMARY KEY,
    origin_node_id text NOT NULL
);

-- Operator actions from every application (§17.3): events whose actor is not a `system:`
-- actor. before/after digests are sha256 of the aggregate's state around the event (no
-- values). seq is the order rows were appended (a cursor for readers); after a rebuild it
-- keeps each application's order but may interleave applications differently.
CREATE TABLE audit_event (
    seq            bigint PRIMARY KEY,
    application    text        NOT NULL,
    aggregate_kind text        NOT NULL,
    aggregate_id   uuid        NOT NULL,
    version        bigint      NOT NULL,
    event_type     text        NOT NULL,
    actor          text        NOT NULL,
    reason         text,
    occurred_at    timestamptz NOT NULL,
    before_digest  text,
    after_digest   text        NOT NULL,
    trace_id       text,
    log_position   bigint      NOT NULL,  -- notification id in the application's log
    UNIQUE (application, aggregate_id, version)
);
CREATE INDEX audit_event_time ON audit_event (occurred_at);
CREATE INDEX audit_event_actor ON audit_event (actor, occurred_at);
CREATE INDEX audit_event_aggregate ON audit_event (aggregate_kind, aggregate_id, version);
