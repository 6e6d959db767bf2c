-- The count of committed transactions and the time of the latest (issue 14).
-- The committer bumps it inside every transaction; the same count, written
-- and synced after each commit and before its batches are acknowledged, is
-- kept outside this file (gpufleet.db.hwm). At start a database whose count
-- is below that mark has lost acknowledged writes — a damaged or removed
-- WAL, a file restored from an older copy — and Open refuses it.
CREATE TABLE store_commits (
	id  INTEGER PRIMARY KEY CHECK (id = 1),
	seq INTEGER NOT NULL,
	at  TEXT NOT NULL
) STRICT;
INSERT INTO store_commits (id, seq, at) VALUES (1, 0, '');
