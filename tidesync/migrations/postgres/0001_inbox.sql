-- Durable receive (§10.2): one row per received event, plus the decompressed batch body the
-- rows point into. Rows of different nodes never contend: no table lock, only the primary key.
CREATE TABLE inbox_batch (
    batch_ref      uuid PRIMARY KEY,
    origin_node_id text        NOT NULL,
    client_batch_id bytea      NOT NULL,
    body           bytea       NOT NULL,  -- serialized UploadBatch (decompressed, verified)
    event_count    integer     NOT NULL,
    received_at    timestamptz NOT NULL
);

CREATE TABLE inbox_event (
    origin_node_id  text        NOT NULL,
    event_id        uuid        NOT NULL,
    batch_ref       uuid        NOT NULL,
    batch_index     integer     NOT NULL,  -- position of the event inside the batch body
    source_topic    text        NOT NULL,
    source_partition integer    NOT NULL,
    source_position bigint      NOT NULL,
    source_sequence bigint,
    replay_epoch    bigint      NOT NULL,
    received_at     timestamptz NOT NULL,
    state           text        NOT NULL DEFAULT 'PENDING',  -- PENDING | TERMINAL | DEAD
    job_id          uuid,
    result          text,       -- APPLIED | CONFLICT_RECORDED | REJECTED | EXPIRED_APPROVED
    reason_code     text,
    PRIMARY KEY (origin_node_id, event_id)
);

-- The apply processor claims work per source partition, in position order.
CREATE INDEX inbox_event_open ON inbox_event
    (origin_node_id, source_topic, source_partition, replay_epoch, source_position)
    WHERE state <> 'TERMINAL';

-- Requests refused at the door (forged origin, integrity alarm, malformed event): kept for
-- operators; digests only, never values.
CREATE TABLE receive_rejection (
    id             bigserial PRIMARY KEY,
    origin_node_id text        NOT NULL,
    event_id       uuid,
    reason_code    text        NOT NULL,
    detail         text        NOT NULL,
    content_digest bytea,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
