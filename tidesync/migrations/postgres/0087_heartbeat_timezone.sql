-- The IANA time zone a node reads its rules' schedules in (§13.3), as its latest heartbeat
-- said: the backlog ETA maps the transfer time still needed onto the schedules' windows in it.
-- NULL: a ship that predates it, or a name that is not a zone name.
ALTER TABLE node_heartbeat ADD COLUMN timezone text;
