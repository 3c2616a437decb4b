-- One partial index finds both the first open and the first unreceived offset of a partition:
-- ordered by state, then offset, it answers the first offset of each open state in O(log n),
-- and the smallest of those is either. It replaces the two partial indexes over the same open
-- rows, so each event's intake and terminal answer maintain one index less.
DROP INDEX event_state_unreceived;
DROP INDEX event_state_open;
CREATE INDEX event_state_open
    ON event_state (direction, topic, kafka_partition, replay_epoch, state, kafka_offset)
    WHERE state NOT IN ('TERMINAL', 'EXPIRED_APPROVED');

-- An event on its way to the shore is IN_FLIGHT in the client's memory only; on disk it stays
-- READY, which a restart sends again just like IN_FLIGHT (the shore deduplicates by event id).
UPDATE event_state SET state = 'READY' WHERE state = 'IN_FLIGHT';
