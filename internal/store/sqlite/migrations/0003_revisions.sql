-- Fleet revisions (issue 4): every applied set of NodePool, Queue and
-- Project documents, numbered from 1. Rows are written once and never
-- changed; the current fleet is the highest number.
CREATE TABLE revisions (
	number  INTEGER PRIMARY KEY,
	digest  TEXT NOT NULL,
	data    TEXT NOT NULL
) STRICT;
