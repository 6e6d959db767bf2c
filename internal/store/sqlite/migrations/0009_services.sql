-- Services (issue 20): inference endpoints, kept in the store so a restarted
-- server and a new leader find them. Stored whole as JSON like the other
-- objects; the generation (the spec's revision) guards upserts as a version.
CREATE TABLE services (
	name       TEXT PRIMARY KEY,
	generation INTEGER NOT NULL,
	data       TEXT NOT NULL
) STRICT;
