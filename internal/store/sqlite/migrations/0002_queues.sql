-- Queues (issue 3): quota, cohort and weight for the scheduler. Stored whole
-- as JSON like the other objects, with the version guard in its own column.
CREATE TABLE queues (
	name    TEXT PRIMARY KEY,
	version INTEGER NOT NULL,
	data    TEXT NOT NULL
) STRICT;
