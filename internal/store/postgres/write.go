package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// stmtSQL is the SQL of each encode.Stmt. The object upserts are
// version-guarded, as in SQLite: a row is replaced only by the same or a
// higher version. Tokens, idempotency records and meta carry no version;
// the last write wins.
var stmtSQL = [encode.NumStmts]string{
	encode.UpsertJob: `INSERT INTO jobs (id, seq, state, project, version, data) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, state = excluded.state, project = excluded.project,
			version = excluded.version, data = excluded.data
		WHERE excluded.version >= jobs.version`,
	encode.UpsertAttempt: `INSERT INTO attempts (id, job_id, version, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, version = excluded.version, data = excluded.data
		WHERE excluded.version >= attempts.version`,
	encode.UpsertNode: `INSERT INTO nodes (id, version, data) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= nodes.version`,
	// A revoked token's row is kept as it is (see the SQLite store): a
	// revocation is never undone by a later write of the same token.
	encode.UpsertToken: `INSERT INTO tokens (id, hash, data) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, data = excluded.data
		WHERE (tokens.data->>'revoked') IS DISTINCT FROM 'true'`,
	encode.UpsertIdempotency: `INSERT INTO idempotency (subject, key, job_id, body_hash, expires) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (subject, key) DO UPDATE SET job_id = excluded.job_id, body_hash = excluded.body_hash,
			expires = excluded.expires`,
	encode.UpsertMeta: `INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
	encode.UpsertQueue: `INSERT INTO queues (name, version, data) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET version = excluded.version, data = excluded.data
		WHERE excluded.version >= queues.version`,
	encode.DeleteQueue:    `DELETE FROM queues WHERE name = $1`,
	encode.InsertRevision: `INSERT INTO revisions (number, digest, data) VALUES ($1, $2, $3) ON CONFLICT (number) DO NOTHING`,
	encode.InsertEvent:    `INSERT INTO events (seq, time, kind, object, data) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (seq) DO NOTHING`,
	encode.UpsertGrant: `INSERT INTO grants ("user", project, data) VALUES ($1, $2, $3)
		ON CONFLICT ("user", project) DO UPDATE SET data = excluded.data`,
	encode.DeleteGrant: `DELETE FROM grants WHERE "user" = $1 AND project = $2`,
	encode.InsertAudit: `INSERT INTO audit (seq, time, data) VALUES ($1, $2, $3) ON CONFLICT (seq) DO NOTHING`,
	encode.UpsertSecret: `INSERT INTO secrets (project, name, data) VALUES ($1, $2, $3)
		ON CONFLICT (project, name) DO UPDATE SET data = excluded.data`,
	encode.DeleteSecret: `DELETE FROM secrets WHERE project = $1 AND name = $2`,
	encode.InsertLedger: `INSERT INTO ledger_entries (from_unix, to_unix, kind, job_id, project, cost, data) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
	encode.InsertFired:  `INSERT INTO budget_fired (budget, threshold, period_start) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
	encode.InsertMetric: `INSERT INTO metric_reports (job_id, seq, data) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
	encode.UpsertNotification: `INSERT INTO notifications (id, delivered, data) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET delivered = excluded.delivered, data = excluded.data WHERE notifications.delivered = 0`,
	encode.UpsertService: `INSERT INTO services (name, generation, data) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET generation = excluded.generation, data = excluded.data
		WHERE excluded.generation >= services.generation`,
	encode.DeleteService: `DELETE FROM services WHERE name = $1`,
}

const (
	markCommit = `UPDATE store_commits SET seq = seq + 1, at = $1 WHERE id = 1`
	// checkFence reads a lease's term and share-locks its row until the
	// transaction ends, so a takeover waits for this commit.
	checkFence = `SELECT holder, epoch FROM leases WHERE name = $1 FOR SHARE`
	// fenceOrFail does the same inside a pipeline, failing it when the term
	// is over (0001_init.sql).
	fenceOrFail = `SELECT gpufleet_fence($1, $2, $3)`
)

// errIsolate says a statement failed in a group's shared pipeline: the
// group is written again with each batch in its own savepoint.
var errIsolate = errors.New("a row failed; isolating batches")

// commit writes group in one transaction and returns each batch's error;
// see groupcommit.WriteFunc. The common case is one pipeline for the whole
// group, one round trip; when a statement in it fails (a row, a stale
// fence), the group is written again with each batch in its own savepoint,
// so the failing batch fails alone.
func (s *Store) commit(group []batch) ([]error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	if s.conn.IsClosed() {
		// A lost connection fails the commit in flight (its outcome is
		// unknown to its callers); later ones reconnect.
		if err := s.connect(ctx); err != nil {
			return nil, err
		}
		s.log.Warn("reconnected the committer to PostgreSQL", "store", s.desc)
	}
	err := s.writeFast(ctx, group)
	if err == nil {
		return make([]error, len(group)), nil
	}
	if !errors.Is(err, errIsolate) {
		return nil, err
	}
	return s.writeIsolated(ctx, group)
}

// writeFast writes group as one pipeline in one round trip: each fence's
// check (once per group, before any row), every row (the repeated
// statements as one multi-row statement each: queueRows), the commit
// count. Without an explicit
// BEGIN the statements up to the pipeline's Sync are one implicit
// transaction, committed (and flushed, per synchronous_commit) before the
// server answers the Sync. A statement that fails, a stale fence included,
// aborts all of it and returns errIsolate.
func (s *Store) writeFast(ctx context.Context, group []batch) error {
	pb := &pgx.Batch{}
	// A fence is checked once per group, before any row: the check's share
	// lock on the lease row holds until the transaction ends, so it covers
	// every batch of the same term (a leader's group is all one term).
	var checked []store.Fence
	for _, b := range group {
		if b.fence != nil && !slices.Contains(checked, *b.fence) {
			checked = append(checked, *b.fence)
			pb.Queue(fenceOrFail, b.fence.Lease, b.fence.Holder, int64(b.fence.Epoch))
		}
	}
	if err := queueRows(pb, group); err != nil {
		// An argument of an unexpected type: the one-row statements
		// take it as they always did.
		s.log.Warn("writing a group one row a statement", "err", err)
		return errIsolate
	}
	pb.Queue(markCommit, encode.Time(time.Now()))
	feed := s.queueChange(pb, group, nil)
	br := s.conn.SendBatch(ctx, pb)
	var seq int64
	for i := range pb.Len() {
		var err error
		if feed >= 0 && i == feed {
			err = br.QueryRow().Scan(&seq)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				return errIsolate
			}
			return fmt.Errorf("writing: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return errIsolate // the commit itself failed (a deferred constraint)
		}
		return fmt.Errorf("committing: %w", err)
	}
	s.prune.committed(uint64(seq), time.Now())
	return nil
}

// writeIsolated runs group in one transaction, the slow path after writeFast
// failed: first the fences, then the rows of every batch whose fence holds,
// each batch in its own savepoint, so each gets its own error.
func (s *Store) writeIsolated(ctx context.Context, group []batch) (errs []error, err error) {
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	if errs, err = fences(ctx, tx, group); err != nil {
		return nil, err
	}
	for i, b := range group {
		if errs[i] != nil || len(b.rows) == 0 {
			continue
		}
		if errs[i], err = savepoint(ctx, tx, b.rows); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, markCommit, encode.Time(time.Now())); err != nil {
		return nil, fmt.Errorf("counting the commit: %w", err)
	}
	pb := &pgx.Batch{}
	var seq int64
	if feed := s.queueChange(pb, group, errs); feed >= 0 {
		br := tx.SendBatch(ctx, pb)
		for i := range pb.Len() {
			var err error
			if i == feed {
				err = br.QueryRow().Scan(&seq)
			} else {
				_, err = br.Exec()
			}
			if err != nil {
				br.Close()
				return nil, fmt.Errorf("recording the change: %w", err)
			}
		}
		if err := br.Close(); err != nil {
			return nil, fmt.Errorf("recording the change: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	s.prune.committed(uint64(seq), time.Now())
	return errs, nil
}

// fences checks every distinct fence in group, share-locking its lease
// row, and returns a *store.FencedError for each batch whose term is over.
func fences(ctx context.Context, tx pgx.Tx, group []batch) ([]error, error) {
	errs := make([]error, len(group))
	terms := map[store.Fence]*store.FencedError{} // nil: the term holds
	var order []store.Fence
	for _, b := range group {
		if b.fence != nil {
			if _, seen := terms[*b.fence]; !seen {
				terms[*b.fence] = nil
				order = append(order, *b.fence)
			}
		}
	}
	if len(order) == 0 {
		return errs, nil
	}
	type term struct {
		holder string
		epoch  uint64
	}
	current := map[string]term{} // by lease name; zero: never acquired
	for _, f := range order {
		if _, ok := current[f.Lease]; ok {
			continue
		}
		var (
			holder string
			epoch  int64
		)
		err := tx.QueryRow(ctx, checkFence, f.Lease).Scan(&holder, &epoch)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("checking lease %s: %w", f.Lease, err)
		}
		current[f.Lease] = term{holder, uint64(epoch)}
	}
	for _, f := range order {
		if cur := current[f.Lease]; cur.holder != f.Holder || cur.epoch != f.Epoch {
			terms[f] = &store.FencedError{Fence: f, Holder: cur.holder, Epoch: cur.epoch}
		}
	}
	for i, b := range group {
		if b.fence != nil {
			if fe := terms[*b.fence]; fe != nil {
				errs[i] = fe
			}
		}
	}
	return errs, nil
}

// savepoint writes rows in a savepoint and returns the batch's own error
// (its first failing row, rolled back to the savepoint), or err when the
// transaction itself failed.
func savepoint(ctx context.Context, tx pgx.Tx, rows []encode.Row) (batchErr, err error) {
	pb := &pgx.Batch{}
	pb.Queue(`SAVEPOINT batch`)
	for _, r := range rows {
		pb.Queue(stmtSQL[r.Stmt], r.Args...)
	}
	pb.Queue(`RELEASE batch`)
	br := tx.SendBatch(ctx, pb)
	for i := range pb.Len() {
		if _, err := br.Exec(); err != nil {
			br.Close()
			var pgErr *pgconn.PgError
			if i == 0 || i == pb.Len()-1 || !errors.As(err, &pgErr) {
				return nil, fmt.Errorf("writing a batch alone: %w", err)
			}
			batchErr = rows[i-1].Err(err)
			if _, err := tx.Exec(ctx, `ROLLBACK TO batch`); err != nil {
				return nil, fmt.Errorf("rolling back a failed batch (%w): %w", batchErr, err)
			}
			if _, err := tx.Exec(ctx, `RELEASE batch`); err != nil {
				return nil, fmt.Errorf("releasing savepoint: %w", err)
			}
			return batchErr, nil
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("writing a batch alone: %w", err)
	}
	return nil, nil
}
