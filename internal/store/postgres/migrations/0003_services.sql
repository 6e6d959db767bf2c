-- Services (issue 20): inference endpoints, kept in the store so a new
-- leader finds them. The generation (the spec's revision) guards upserts as
-- a version.
CREATE TABLE services (
	name       text PRIMARY KEY,
	generation bigint NOT NULL,
	data       json NOT NULL
);
