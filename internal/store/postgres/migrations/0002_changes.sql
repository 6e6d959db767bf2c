-- The change feed (store.Feed): one row per committed transaction, its
-- seq the store_commits count after it, its data the transaction's batches
-- as change records (internal/store/encode, change.go). Followers read the
-- rows after the last they applied; the committer notifies the channel
-- gpufleet_changes at each commit and prunes rows older than a few minutes.
-- Only stores opened shared (server replicas) write it.
CREATE TABLE changes (
	seq  bigint PRIMARY KEY,
	data bytea NOT NULL
);
