-- The PostgreSQL schema: the SQLite store's tables (internal/store/sqlite/
-- migrations, 0001 to 0008) in one script, with the same columns and the
-- same encoding (internal/store/encode), so a database copies from one
-- backend to the other row by row. Each object is stored whole as JSON in
-- data; the other columns copy the fields SQL needs.
--
-- Times are fixed-width UTC text (2006-01-02T15:04:05.000000000Z) as in
-- SQLite; the C collation makes them compare in time order whatever the
-- database's locale.

CREATE TABLE jobs (
	id      text PRIMARY KEY,
	seq     bigint NOT NULL,
	state   text NOT NULL,
	project text NOT NULL,
	version bigint NOT NULL,
	data    json NOT NULL
);
CREATE INDEX jobs_seq ON jobs (seq);

CREATE TABLE attempts (
	id      text PRIMARY KEY,
	job_id  text NOT NULL REFERENCES jobs (id),
	version bigint NOT NULL,
	data    json NOT NULL
);
CREATE INDEX attempts_job_id ON attempts (job_id);

CREATE TABLE nodes (
	id      text PRIMARY KEY,
	version bigint NOT NULL,
	data    json NOT NULL
);

-- model.Token keeps its hash out of JSON; unique so a secret maps to one
-- token.
CREATE TABLE tokens (
	id   text PRIMARY KEY,
	hash bytea NOT NULL UNIQUE,
	data json NOT NULL
);

CREATE TABLE idempotency (
	subject   text NOT NULL,
	key       text NOT NULL,
	job_id    text NOT NULL REFERENCES jobs (id),
	body_hash bytea NOT NULL,
	expires   text COLLATE "C" NOT NULL,
	PRIMARY KEY (subject, key)
);
CREATE INDEX idempotency_expires ON idempotency (expires);

CREATE TABLE meta (
	key   text PRIMARY KEY,
	value text NOT NULL
);

CREATE TABLE queues (
	name    text PRIMARY KEY,
	version bigint NOT NULL,
	data    json NOT NULL
);

-- Fleet revisions: written once, never changed.
CREATE TABLE revisions (
	number  bigint PRIMARY KEY,
	digest  text NOT NULL,
	data    json NOT NULL
);

-- Events: written once, never changed.
CREATE TABLE events (
	seq     bigint PRIMARY KEY,
	time    text COLLATE "C" NOT NULL,
	kind    text NOT NULL,
	object  text NOT NULL,
	data    json NOT NULL
);
CREATE INDEX events_object ON events (object, seq);

-- The ledger: append-only (see the triggers below); id is metering order.
CREATE TABLE ledger_entries (
	id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	from_unix bigint NOT NULL,
	to_unix   bigint NOT NULL,
	kind      text NOT NULL,
	job_id    text NOT NULL,
	project   text NOT NULL,
	cost      bigint NOT NULL, -- micro-dollars
	data      json NOT NULL
);
CREATE INDEX ledger_entries_from ON ledger_entries (from_unix);
CREATE INDEX ledger_entries_job ON ledger_entries (job_id) WHERE job_id != '';

CREATE TABLE budget_fired (
	budget       text NOT NULL,
	threshold    integer NOT NULL,
	period_start text NOT NULL,
	PRIMARY KEY (budget, threshold, period_start)
);

CREATE TABLE metric_reports (
	job_id text NOT NULL,
	seq    bigint NOT NULL,
	data   json NOT NULL,
	PRIMARY KEY (job_id, seq)
);

-- The webhook outbox; delivered ones (1) stay as tombstones.
CREATE TABLE notifications (
	id        text PRIMARY KEY,
	delivered integer NOT NULL,
	data      json NOT NULL
);

-- A user's role per project ("*" for the global admin role).
CREATE TABLE grants (
	"user"  text NOT NULL,
	project text NOT NULL,
	data    json NOT NULL,
	PRIMARY KEY ("user", project)
);

-- The append-only, hash-chained audit log.
CREATE TABLE audit (
	seq   bigint PRIMARY KEY,
	time  text COLLATE "C" NOT NULL,
	data  json NOT NULL
);

-- Sealed job secrets: values sealed under a key outside this database.
CREATE TABLE secrets (
	project text NOT NULL,
	name    text NOT NULL,
	data    json NOT NULL,
	PRIMARY KEY (project, name)
);

-- The count of committed transactions and the time of the latest.
CREATE TABLE store_commits (
	id  integer PRIMARY KEY CHECK (id = 1),
	seq bigint NOT NULL,
	at  text NOT NULL
);
INSERT INTO store_commits (id, seq, at) VALUES (1, 0, '');

-- Leases (store.Leaser): one row per lease, its current term. epoch only
-- grows; expires_at is the database's clock.
CREATE TABLE leases (
	name        text PRIMARY KEY,
	holder      text NOT NULL,
	epoch       bigint NOT NULL,
	acquired_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL
);

-- gpufleet_fence is a fenced batch's first statement in a commit's
-- pipeline: it share-locks the lease row until the transaction ends (so a
-- takeover waits for this commit) and raises when the lease is no longer at
-- the batch's holder and epoch, aborting the pipeline before any of the
-- batch's rows commit.
CREATE FUNCTION gpufleet_fence(p_lease text, p_holder text, p_epoch bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM leases WHERE name = p_lease AND holder = p_holder AND epoch = p_epoch FOR SHARE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'lease % is no longer at epoch % of %', p_lease, p_epoch, p_holder USING ERRCODE = 'GF001';
	END IF;
END
$$;

-- Audit and ledger rows are inserted once and never changed: these
-- triggers refuse UPDATE, DELETE and TRUNCATE from any role, gpufleet's
-- own included, so only someone who drops the triggers (the tables' owner
-- or a superuser, outside gpufleet) can alter them, and `gpufleet audit
-- verify` detects that by the hash chain.
CREATE FUNCTION gpufleet_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'the % table is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
	FOR EACH ROW EXECUTE FUNCTION gpufleet_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
	FOR EACH STATEMENT EXECUTE FUNCTION gpufleet_append_only();
CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger_entries
	FOR EACH ROW EXECUTE FUNCTION gpufleet_append_only();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger_entries
	FOR EACH STATEMENT EXECUTE FUNCTION gpufleet_append_only();
