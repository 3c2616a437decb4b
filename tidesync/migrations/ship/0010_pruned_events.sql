-- Applied events are pruned from event_state once their partition's queue commit is far enough
-- past them (`[ship] state_retain_offsets`): the file then stops growing with every event ever
-- sent. Reports still count them: how many were pruned, per direction and result.
CREATE TABLE pruned_event_count (
    direction TEXT    NOT NULL CHECK (direction IN ('UPLINK', 'DOWNLINK')),
    result    TEXT    NOT NULL,
    events    INTEGER NOT NULL,
    PRIMARY KEY (direction, result)
);
