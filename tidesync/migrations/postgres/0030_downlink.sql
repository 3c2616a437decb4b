-- Shore to ship (§9.4, §12): the index of DownlinkCommand streams, written in the same
-- transaction as their events, and what the shore CDC consumer did with each shore change.

-- One row per command. sequence is per node, contiguous from 1, assigned under a lock when
-- the command is recorded; ships page by it. The ack_* columns mirror the Acknowledged event.
CREATE TABLE downlink_command (
    node_id            text        NOT NULL,
    sequence           bigint      NOT NULL,
    command_id         uuid        NOT NULL UNIQUE,
    kind               text        NOT NULL,     -- ROW_CHANGE | CONFLICT_DECISION
    source_id          uuid        NOT NULL,     -- shore event id or decision id
    conflict_id        uuid,
    payload            jsonb       NOT NULL,     -- type-tagged canonical payload
    trace_id           text        NOT NULL DEFAULT '',
    issued_at          timestamptz NOT NULL,
    ack_result         text,                     -- CommandResult name
    ack_reason_code    text,
    ack_local_revision bytea,
    ack_row_exists     boolean,
    ack_current_row    jsonb,
    processed_at       timestamptz,              -- when the ship processed it (its clock)
    acked_at           timestamptz,
    needs_follow_up    boolean     NOT NULL DEFAULT false,
    followed_up_at     timestamptz,
    PRIMARY KEY (node_id, sequence)
);

CREATE INDEX downlink_command_source ON downlink_command (source_id);
CREATE INDEX downlink_command_follow_up ON downlink_command (acked_at, node_id, sequence)
    WHERE needs_follow_up AND followed_up_at IS NULL;

-- One row per shore change the consumer decided on (Kafka record coordinates kept so a
-- restart can be checked against the queue). FORWARDED rows commit with their commands.
CREATE TABLE shore_cdc_event (
    event_id       uuid        PRIMARY KEY,
    topic          text        NOT NULL,
    kafka_partition integer    NOT NULL,
    kafka_offset   bigint      NOT NULL,
    result         text        NOT NULL,     -- FORWARDED | SUPPRESSED | SKIPPED
    reason_code    text        NOT NULL DEFAULT '',
    command_count  integer     NOT NULL DEFAULT 0,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);

-- A partition the consumer holds at a record it cannot pass (reason code only, no values).
CREATE TABLE shore_cdc_block (
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    reason_code     text        NOT NULL,
    event_id        uuid,
    blocked_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition)
);
