-- When each node's subject reached IN_SYNC: the sent time of the first heartbeat that reported
-- it IN_SYNC (the node's clock), kept while later heartbeats report the same snapshot IN_SYNC,
-- and null in every other phase. Rows stored before this column read null until then.
ALTER TABLE rule_sync_state ADD COLUMN in_sync_since timestamptz;
