-- Events (issue 4, item 7): every launch, failure, failover, preemption
-- notice, drain, requeue and termination, numbered by the controller from
-- 1. Rows are written once and never changed.
CREATE TABLE events (
	seq     INTEGER PRIMARY KEY,
	time    TEXT NOT NULL,
	kind    TEXT NOT NULL,
	object  TEXT NOT NULL,
	data    TEXT NOT NULL
) STRICT;
CREATE INDEX events_object ON events (object, seq);
