-- Fenced apply leases: every claim of a partition takes the next lease_token, and every
-- statement that touches the partition's leased state names its owner and token, so a worker
-- that was paused past its lease cannot clear a new owner's lease, finalize or rewind
-- next_sequence. Lease expiry is database time on both sides (clock_timestamp()).
ALTER TABLE apply_partition ADD COLUMN lease_token bigint NOT NULL DEFAULT 0;

-- Run first in the transaction that saves a job's outcome: locks the partition row and fails
-- the whole transaction (job events, inbox updates) unless owner and token still hold it.
CREATE FUNCTION apply_lease_held(p_origin text, p_topic text, p_partition integer,
                                 p_epoch bigint, p_owner text, p_token bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM apply_partition
     WHERE origin_node_id = p_origin AND source_topic = p_topic
       AND source_partition = p_partition AND replay_epoch = p_epoch
       AND lease_owner = p_owner AND lease_token = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'APPLY_LEASE_LOST' USING ERRCODE = 'TSL01';
    END IF;
END
$$;
