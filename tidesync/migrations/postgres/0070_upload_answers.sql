-- What the shore answered each upload, compact (UploadBatchResponse with offset ranges), by the
-- ship's batch id: a ship whose answer was lost asks for it (GET /sync/v1/batches/{id})
-- instead of sending the batch again. Written in the receiving transaction; kept a few days.
CREATE TABLE upload_answer (
    origin_node_id  text        NOT NULL,
    client_batch_id bytea       NOT NULL,
    answer          bytea       NOT NULL,
    answered_at     timestamptz NOT NULL,
    PRIMARY KEY (origin_node_id, client_batch_id)
);
CREATE INDEX upload_answer_age ON upload_answer (origin_node_id, answered_at);
