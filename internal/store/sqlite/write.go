package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// stmt names a statement the committer prepares once and reuses in every
// transaction: the encode package's, then the store's own.
type stmt = encode.Stmt

const (
	markCommit stmt = encode.NumStmts + iota
	savepoint
	releaseSavepoint
	rollbackToSavepoint
	numStmts
)

// The object upserts are version-guarded: a row is replaced only by the same
// or a higher version, so a late or retried write never rolls an object
// back. Idempotency records and meta carry no version; the last write wins.
// Tokens carry none either, but change only by being revoked, which is never
// undone: a revoked token's row is kept as it is, so two batches that write
// one token (its mint and a revocation, committed by different components)
// agree whatever their order.
var stmtSQL = [numStmts]string{
	encode.UpsertJob: `INSERT INTO jobs (id, seq, state, project, version, data) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, state = excluded.state, project = excluded.project,
			version = excluded.version, data = excluded.data
		WHERE excluded.version >= jobs.version`,
	encode.UpsertAttempt: `INSERT INTO attempts (id, job_id, version, data) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, version = excluded.version, data = excluded.data
		WHERE excluded.version >= attempts.version`,
	encode.UpsertNode: `INSERT INTO nodes (id, version, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= nodes.version`,
	encode.UpsertToken: `INSERT INTO tokens (id, hash, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, data = excluded.data
		WHERE json_extract(tokens.data, '$.revoked') IS NOT 1`,
	encode.UpsertIdempotency: `INSERT INTO idempotency (subject, key, job_id, body_hash, expires) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (subject, key) DO UPDATE SET job_id = excluded.job_id, body_hash = excluded.body_hash,
			expires = excluded.expires`,
	encode.UpsertMeta: `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
	encode.UpsertQueue: `INSERT INTO queues (name, version, data) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= queues.version`,
	encode.DeleteQueue:    `DELETE FROM queues WHERE name = ?`,
	encode.InsertRevision: `INSERT INTO revisions (number, digest, data) VALUES (?, ?, ?) ON CONFLICT (number) DO NOTHING`,
	encode.InsertEvent:    `INSERT INTO events (seq, time, kind, object, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (seq) DO NOTHING`,
	encode.UpsertGrant: `INSERT INTO grants (user, project, data) VALUES (?, ?, ?)
		ON CONFLICT (user, project) DO UPDATE SET data = excluded.data`,
	encode.DeleteGrant: `DELETE FROM grants WHERE user = ? AND project = ?`,
	encode.InsertAudit: `INSERT INTO audit (seq, time, data) VALUES (?, ?, ?) ON CONFLICT (seq) DO NOTHING`,
	encode.UpsertSecret: `INSERT INTO secrets (project, name, data) VALUES (?, ?, ?)
		ON CONFLICT (project, name) DO UPDATE SET data = excluded.data`,
	encode.DeleteSecret: `DELETE FROM secrets WHERE project = ? AND name = ?`,
	encode.InsertLedger: `INSERT INTO ledger_entries (from_unix, to_unix, kind, job_id, project, cost, data) VALUES (?, ?, ?, ?, ?, ?, ?)`,
	encode.InsertFired:  `INSERT INTO budget_fired (budget, threshold, period_start) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
	encode.InsertMetric: `INSERT INTO metric_reports (job_id, seq, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
	encode.UpsertNotification: `INSERT INTO notifications (id, delivered, data) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET delivered = excluded.delivered, data = excluded.data WHERE notifications.delivered = 0`,
	encode.UpsertService: `INSERT INTO services (name, generation, data) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET generation = excluded.generation, data = excluded.data
		WHERE excluded.generation >= services.generation`,
	encode.DeleteService: `DELETE FROM services WHERE name = ?`,
	markCommit:           `UPDATE store_commits SET seq = ?, at = ? WHERE id = 1`,
	savepoint:            `SAVEPOINT batch`,
	releaseSavepoint:     `RELEASE batch`,
	rollbackToSavepoint:  `ROLLBACK TO batch`,
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

// row is one statement, ready to run.
type row = encode.Row

// encodeBatch is encode.Batch for a store without leases: a fenced batch
// is refused.
func encodeBatch(b *store.Batch) ([]row, error) {
	if b != nil && b.Fence != nil {
		return nil, fmt.Errorf("lease %s: %w", b.Fence.Lease, store.ErrNoLeases)
	}
	return encode.Batch(b)
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
		if _, err := st[r.Stmt].Exec(r.Args...); err != nil {
			return r.Err(err)
		}
	}
	return nil
}

func formatExpires(t time.Time) string { return encode.Time(t) }
