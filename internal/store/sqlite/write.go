package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
)

// stmt names one of the statements the committer prepares once and reuses
// in every transaction.
type stmt int

const (
	upsertJob stmt = iota
	upsertAttempt
	upsertNode
	upsertToken
	upsertIdempotency
	upsertMeta
	upsertQueue
	deleteQueue
	insertRevision
	insertEvent
	upsertGrant
	deleteGrant
	insertAudit
	upsertSecret
	deleteSecret
	insertLedger
	insertFired
	insertMetric
	upsertNotification
	markCommit
	savepoint
	releaseSavepoint
	rollbackToSavepoint
	numStmts
)

// The object upserts are version-guarded: a row is replaced only by the same
// or a higher version, so a late or retried write never rolls an object
// back. Tokens, idempotency records and meta carry no version; the last
// write wins.
var stmtSQL = [numStmts]string{
	upsertJob: `INSERT INTO jobs (id, seq, state, project, version, data) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, state = excluded.state, project = excluded.project,
			version = excluded.version, data = excluded.data
		WHERE excluded.version >= jobs.version`,
	upsertAttempt: `INSERT INTO attempts (id, job_id, version, data) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, version = excluded.version, data = excluded.data
		WHERE excluded.version >= attempts.version`,
	upsertNode: `INSERT INTO nodes (id, version, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= nodes.version`,
	upsertToken: `INSERT INTO tokens (id, hash, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, data = excluded.data`,
	upsertIdempotency: `INSERT INTO idempotency (subject, key, job_id, body_hash, expires) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (subject, key) DO UPDATE SET job_id = excluded.job_id, body_hash = excluded.body_hash,
			expires = excluded.expires`,
	upsertMeta: `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
	upsertQueue: `INSERT INTO queues (name, version, data) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= queues.version`,
	deleteQueue:    `DELETE FROM queues WHERE name = ?`,
	insertRevision: `INSERT INTO revisions (number, digest, data) VALUES (?, ?, ?) ON CONFLICT (number) DO NOTHING`,
	insertEvent:    `INSERT INTO events (seq, time, kind, object, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (seq) DO NOTHING`,
	upsertGrant: `INSERT INTO grants (user, project, data) VALUES (?, ?, ?)
		ON CONFLICT (user, project) DO UPDATE SET data = excluded.data`,
	deleteGrant: `DELETE FROM grants WHERE user = ? AND project = ?`,
	insertAudit: `INSERT INTO audit (seq, time, data) VALUES (?, ?, ?) ON CONFLICT (seq) DO NOTHING`,
	upsertSecret: `INSERT INTO secrets (project, name, data) VALUES (?, ?, ?)
		ON CONFLICT (project, name) DO UPDATE SET data = excluded.data`,
	deleteSecret: `DELETE FROM secrets WHERE project = ? AND name = ?`,
	insertLedger: `INSERT INTO ledger_entries (from_unix, to_unix, kind, job_id, project, cost, data) VALUES (?, ?, ?, ?, ?, ?, ?)`,
	insertFired:  `INSERT INTO budget_fired (budget, threshold, period_start) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
	insertMetric: `INSERT INTO metric_reports (job_id, seq, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
	upsertNotification: `INSERT INTO notifications (id, delivered, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET delivered = excluded.delivered, data = excluded.data WHERE notifications.delivered = 0`,
	markCommit:          `UPDATE store_commits SET seq = ?, at = ? WHERE id = 1`,
	savepoint:           `SAVEPOINT batch`,
	releaseSavepoint:    `RELEASE batch`,
	rollbackToSavepoint: `ROLLBACK TO batch`,
}

// statements are the prepared stmtSQL, indexed by stmt.
type statements [numStmts]*sql.Stmt

func prepare(ctx context.Context, db *sql.DB) (*statements, error) {
	var st statements
	for i, q := range stmtSQL {
		var err error
		if st[i], err = db.PrepareContext(ctx, q); err != nil {
			return nil, fmt.Errorf("preparing %q: %w", q, err)
		}
	}
	return &st, nil
}

// in returns st bound to tx. On the store's single connection database/sql
// finds each statement already prepared and reuses it.
func (st *statements) in(tx *sql.Tx) *statements {
	var t statements
	for i, s := range st {
		t[i] = tx.Stmt(s)
	}
	return &t
}

// row is one upsert, ready to run: its statement and arguments, and the
// object it writes, for errors.
type row struct {
	stmt     stmt
	args     []any
	kind, id string
}

// encode turns b into rows, jobs before the attempts and idempotency records
// that refer to them. Submit calls it on the caller's goroutine, so JSON
// encoding runs in parallel and the committer's serial work is only SQL.
func encode(b *store.Batch) ([]row, error) {
	if b != nil && b.Fence != nil {
		return nil, fmt.Errorf("lease %s: %w", b.Fence.Lease, store.ErrNoLeases)
	}
	if b.Empty() {
		return nil, nil
	}
	rows := make([]row, 0, len(b.Jobs)+len(b.Attempts)+len(b.Nodes)+len(b.Tokens)+len(b.Idempotency)+len(b.Meta)+
		len(b.Queues)+len(b.DeleteQueues)+len(b.Revisions)+len(b.Events)+len(b.Grants)+len(b.DeleteGrants)+len(b.Audit)+
		len(b.Secrets)+len(b.DeleteSecrets))
	// add appends a row whose arguments are args and v as JSON, the data
	// column.
	add := func(st stmt, kind, id string, v any, args ...any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", kind, id, err)
		}
		all := make([]any, len(args)+1)
		all[copy(all, args)] = string(data)
		rows = append(rows, row{stmt: st, args: all, kind: kind, id: id})
		return nil
	}
	for _, j := range b.Jobs {
		if err := add(upsertJob, "job", j.ID, j, j.ID, j.Seq, string(j.State), j.Project, j.Version); err != nil {
			return nil, err
		}
	}
	for _, a := range b.Attempts {
		if err := add(upsertAttempt, "attempt", a.ID, a, a.ID, a.JobID, a.Version); err != nil {
			return nil, err
		}
	}
	for _, n := range b.Nodes {
		if err := add(upsertNode, "node", n.ID, n, n.ID, n.Version); err != nil {
			return nil, err
		}
	}
	for _, t := range b.Tokens {
		if err := add(upsertToken, "token", t.ID, t, t.ID, t.Hash); err != nil {
			return nil, err
		}
	}
	for _, r := range b.Idempotency {
		rows = append(rows, row{
			stmt: upsertIdempotency,
			args: []any{r.Subject, r.Key, r.JobID, r.BodyHash, formatExpires(r.Expires)},
			kind: "idempotency key", id: r.Subject + "/" + r.Key,
		})
	}
	for _, q := range b.Queues {
		if err := add(upsertQueue, "queue", q.Name, q, q.Name, q.Version); err != nil {
			return nil, err
		}
	}
	for _, name := range b.DeleteQueues {
		rows = append(rows, row{stmt: deleteQueue, args: []any{name}, kind: "queue deletion", id: name})
	}
	for _, r := range b.Revisions {
		if err := add(insertRevision, "revision", fmt.Sprint(r.Number), r, r.Number, r.Digest); err != nil {
			return nil, err
		}
	}
	for _, e := range b.Events {
		if err := add(insertEvent, "event", fmt.Sprint(e.Seq), e, e.Seq, formatExpires(e.Time), string(e.Kind), e.Object); err != nil {
			return nil, err
		}
	}
	for _, g := range b.Grants {
		if err := add(upsertGrant, "grant", g.User+"/"+g.Project, g, g.User, g.Project); err != nil {
			return nil, err
		}
	}
	for _, k := range b.DeleteGrants {
		rows = append(rows, row{stmt: deleteGrant, args: []any{k.User, k.Project}, kind: "grant deletion", id: k.User + "/" + k.Project})
	}
	for _, e := range b.Audit {
		if err := add(insertAudit, "audit entry", strconv.FormatUint(e.Seq, 10), e, e.Seq, formatExpires(e.Time)); err != nil {
			return nil, err
		}
	}
	for _, sec := range b.Secrets {
		if err := add(upsertSecret, "secret", sec.Project+"/"+sec.Name, sec, sec.Project, sec.Name); err != nil {
			return nil, err
		}
	}
	for _, k := range b.DeleteSecrets {
		rows = append(rows, row{stmt: deleteSecret, args: []any{k.Project, k.Name}, kind: "secret deletion", id: k.Project + "/" + k.Name})
	}
	costRows, err := encodeCost(&b.Cost)
	if err != nil {
		return nil, err
	}
	rows = append(rows, costRows...)
	for k, v := range b.Meta {
		rows = append(rows, row{stmt: upsertMeta, args: []any{k, v}, kind: "meta", id: k})
	}
	return rows, nil
}

// write runs group in one transaction and returns each batch's error. Each
// batch runs inside its own savepoint, so one that fails (a foreign key, a
// duplicate token hash) is rolled back alone and reported to its own caller
// while the rest of the group commits. err is set when the transaction as a
// whole failed; then no batch in group is durable.
func (s *Store) write(group [][]row, m mark) (errs []error, err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback() // a no-op once committed
	st := s.stmts.in(tx)
	errs = make([]error, len(group))
	for i, p := range group {
		if _, err := st[savepoint].Exec(); err != nil {
			return nil, fmt.Errorf("opening savepoint: %w", err)
		}
		if errs[i] = st.run(p); errs[i] != nil {
			// This fails when SQLite has already rolled back the whole
			// transaction (a full disk, an I/O error); then the group fails.
			if _, err := st[rollbackToSavepoint].Exec(); err != nil {
				return nil, fmt.Errorf("rolling back a failed batch (%w): %w", errs[i], err)
			}
		}
		if _, err := st[releaseSavepoint].Exec(); err != nil {
			return nil, fmt.Errorf("releasing savepoint: %w", err)
		}
	}
	// The commit count rises in the same transaction as the batches, so
	// the database holds commit m exactly when it holds its writes.
	if _, err := st[markCommit].Exec(m.seq, m.at.Format(time.RFC3339Nano)); err != nil {
		return nil, fmt.Errorf("counting the commit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return errs, nil
}

// run executes rows, stopping at the first that fails.
func (st *statements) run(rows []row) error {
	for _, r := range rows {
		if _, err := st[r.stmt].Exec(r.args...); err != nil {
			return fmt.Errorf("writing %s %s: %w", r.kind, r.id, err)
		}
	}
	return nil
}

// expiresLayout writes idempotency expiry times as fixed-width UTC text, so
// that SQL compares them as strings in time order (see 0001_init.sql).
const expiresLayout = "2006-01-02T15:04:05.000000000Z"

func formatExpires(t time.Time) string { return t.UTC().Format(expiresLayout) }
