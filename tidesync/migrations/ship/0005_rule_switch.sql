-- Sync rule switches: each time the ship's set of active rules changes it records a new
-- generation (the rules as canonical JSON) and, per partition, the first offset read under
-- it (the read offset + 1 of that moment). Records read again after a restart are shaped by
-- the generation in force at their offset. Older generations are pruned once every
-- partition's checkpoint has passed their end.
CREATE TABLE rule_switch (
    generation     INTEGER NOT NULL PRIMARY KEY,
    config_version TEXT    NOT NULL,
    rules          TEXT    NOT NULL,
    switched_at    TEXT    NOT NULL
);

CREATE TABLE rule_switch_offset (
    generation      INTEGER NOT NULL REFERENCES rule_switch (generation) ON DELETE CASCADE,
    topic           TEXT    NOT NULL,
    kafka_partition INTEGER NOT NULL,
    from_offset     INTEGER NOT NULL,
    PRIMARY KEY (generation, topic, kafka_partition)
);

-- What a rule snapshot's validation found (JSON list of problems, names only) and the
-- config version that offered it.
ALTER TABLE rule_snapshot ADD COLUMN problems TEXT NOT NULL DEFAULT '[]';
ALTER TABLE rule_snapshot ADD COLUMN config_version TEXT NOT NULL DEFAULT '';
