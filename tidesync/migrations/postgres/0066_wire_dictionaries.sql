-- zstd dictionaries ships trained on their own upload batches, kept per node by id (the
-- SHA-256 of the content, computed by the shore). Only a few of the latest per node are kept:
-- a batch naming an older one is refused as UNKNOWN_DICTIONARY and the ship sends it again.
CREATE TABLE IF NOT EXISTS wire_dictionary (
    origin_node_id text NOT NULL,
    dictionary_id bytea NOT NULL CHECK (length(dictionary_id) = 32),
    content bytea NOT NULL CHECK (length(content) <= 65536),
    received_at timestamptz NOT NULL,
    PRIMARY KEY (origin_node_id, dictionary_id)
);
