-- Cost (issue 6): the ledger, budget firings, job metric reports and the
-- webhook outbox.
--
-- ledger_entries is append-only: one row per cost.Entry (an allocation's or
-- a node's idle share of one node over one metering pass), in the order the
-- controller metered them; id is that order. The controller rebuilds its
-- in-memory rollups from it at start.
CREATE TABLE ledger_entries (
	id        INTEGER PRIMARY KEY,
	from_unix INTEGER NOT NULL,
	to_unix   INTEGER NOT NULL,
	kind      TEXT NOT NULL,
	job_id    TEXT NOT NULL,
	project   TEXT NOT NULL,
	cost      INTEGER NOT NULL, -- micro-dollars
	data      TEXT NOT NULL
) STRICT;
CREATE INDEX ledger_entries_from ON ledger_entries (from_unix);
CREATE INDEX ledger_entries_job ON ledger_entries (job_id) WHERE job_id != '';

-- One row per budget threshold fired in a period: each fires once per
-- period, and a new period (a new period_start) re-arms it.
CREATE TABLE budget_fired (
	budget       TEXT NOT NULL,
	threshold    INTEGER NOT NULL,
	period_start TEXT NOT NULL,
	PRIMARY KEY (budget, threshold, period_start)
) STRICT;

-- Metric reports from jobs (early stop), numbered per job in arrival order.
CREATE TABLE metric_reports (
	job_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	data   TEXT NOT NULL,
	PRIMARY KEY (job_id, seq)
) STRICT;

-- The webhook outbox: undelivered notifications are retried with backoff;
-- delivered ones stay as tombstones.
CREATE TABLE notifications (
	id        TEXT PRIMARY KEY,
	delivered INTEGER NOT NULL,
	data      TEXT NOT NULL
) STRICT;
