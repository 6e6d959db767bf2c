package encode

// Table is one table of the schema both SQL backends share, as a copy
// between them reads and writes it: its columns in order, and the order
// its rows are read in (parents before the rows that refer to them, the
// ledger in append order).
type Table struct {
	Name    string
	Columns []string
	OrderBy string
}

// Tables are the tables holding control-plane state, in an order that
// satisfies their foreign keys. Left out: the bookkeeping each backend
// keeps for itself (schema_migrations, store_commits, leases), and the
// ledger's id, which the target assigns again in the same order.
var Tables = []Table{
	{Name: "jobs", Columns: []string{"id", "seq", "state", "project", "version", "data"}, OrderBy: "seq, id"},
	{Name: "attempts", Columns: []string{"id", "job_id", "version", "data"}, OrderBy: "id"},
	{Name: "nodes", Columns: []string{"id", "version", "data"}, OrderBy: "id"},
	{Name: "tokens", Columns: []string{"id", "hash", "data"}, OrderBy: "id"},
	{Name: "idempotency", Columns: []string{"subject", "key", "job_id", "body_hash", "expires"}, OrderBy: "subject, key"},
	{Name: "meta", Columns: []string{"key", "value"}, OrderBy: "key"},
	{Name: "queues", Columns: []string{"name", "version", "data"}, OrderBy: "name"},
	{Name: "revisions", Columns: []string{"number", "digest", "data"}, OrderBy: "number"},
	{Name: "events", Columns: []string{"seq", "time", "kind", "object", "data"}, OrderBy: "seq"},
	{Name: "ledger_entries", Columns: []string{"from_unix", "to_unix", "kind", "job_id", "project", "cost", "data"}, OrderBy: "id"},
	{Name: "budget_fired", Columns: []string{"budget", "threshold", "period_start"}, OrderBy: "budget, threshold, period_start"},
	{Name: "metric_reports", Columns: []string{"job_id", "seq", "data"}, OrderBy: "job_id, seq"},
	{Name: "notifications", Columns: []string{"id", "delivered", "data"}, OrderBy: "id"},
	{Name: "grants", Columns: []string{"user", "project", "data"}, OrderBy: `"user", project`},
	{Name: "audit", Columns: []string{"seq", "time", "data"}, OrderBy: "seq"},
	{Name: "secrets", Columns: []string{"project", "name", "data"}, OrderBy: "project, name"},
	{Name: "services", Columns: []string{"name", "generation", "data"}, OrderBy: "name"},
}
