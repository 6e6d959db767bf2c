-- Access control and audit (issue 9).
--
-- grants: a user's role per project ("*" for the global admin role).
CREATE TABLE grants (
	user    TEXT NOT NULL,
	project TEXT NOT NULL,
	data    TEXT NOT NULL,
	PRIMARY KEY (user, project)
) STRICT;

-- audit: the append-only, hash-chained log. Rows are inserted once, by
-- sequence number, and the triggers refuse any change, so only someone who
-- edits the file outside gpufleet can alter it, and `gpufleet audit verify`
-- detects that by the hash chain.
CREATE TABLE audit (
	seq   INTEGER PRIMARY KEY,
	time  TEXT NOT NULL,
	data  TEXT NOT NULL
) STRICT;

CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;

CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
