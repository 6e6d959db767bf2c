-- The first schema. Each object is stored whole as JSON in data; the other
-- columns copy the fields that SQL itself needs: keys, the version guard,
-- load order, and what an operator filters on with the sqlite3 shell.

CREATE TABLE jobs (
	id      TEXT PRIMARY KEY,
	seq     INTEGER NOT NULL,
	state   TEXT NOT NULL,
	project TEXT NOT NULL,
	version INTEGER NOT NULL,
	data    TEXT NOT NULL
) STRICT;

-- Load returns jobs in acceptance order.
CREATE INDEX jobs_seq ON jobs (seq);

CREATE TABLE attempts (
	id      TEXT PRIMARY KEY,
	job_id  TEXT NOT NULL REFERENCES jobs (id),
	version INTEGER NOT NULL,
	data    TEXT NOT NULL
) STRICT;

CREATE INDEX attempts_job_id ON attempts (job_id);

CREATE TABLE nodes (
	id      TEXT PRIMARY KEY,
	version INTEGER NOT NULL,
	data    TEXT NOT NULL
) STRICT;

-- model.Token keeps its hash out of JSON so that it never reaches an API
-- response; it lives here in its own column, unique so a secret maps to one
-- token.
CREATE TABLE tokens (
	id   TEXT PRIMARY KEY,
	hash BLOB NOT NULL UNIQUE,
	data TEXT NOT NULL
) STRICT;

-- expires is UTC text of fixed width (2006-01-02T15:04:05.000000000Z), so it
-- sorts and compares as a string, keeps nanoseconds, and reads plainly in the
-- sqlite3 shell.
CREATE TABLE idempotency (
	subject   TEXT NOT NULL,
	key       TEXT NOT NULL,
	job_id    TEXT NOT NULL REFERENCES jobs (id),
	body_hash BLOB NOT NULL,
	expires   TEXT NOT NULL,
	PRIMARY KEY (subject, key)
) STRICT;

CREATE INDEX idempotency_expires ON idempotency (expires);

CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
