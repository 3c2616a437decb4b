-- An operator's release of the record the shore CDC consumer holds a partition at: when the
-- consumer reads that position again it records it SKIPPED (OPERATOR_RELEASED) and goes on.
-- Who released it and why is the OperatorAction `action_id` in the operations application.
CREATE TABLE shore_cdc_release (
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    hold_reason     text        NOT NULL,
    action_id       uuid        NOT NULL,
    released_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition, kafka_offset)
);
