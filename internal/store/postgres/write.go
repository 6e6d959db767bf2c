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
	// commitTicket is a commit's first statement: the advisory lock of its
	// commit number, held until the transaction ends, so the commit after
	// it can wait for it (0004_ordered_commits.sql). commitAfter waits for
	// the commit before to end; markCommit does that too, then counts this
	// commit, or raises GF002 when the commit before did not land.
	commitTicket = `SELECT gpufleet_commit_ticket($1)`
	commitAfter  = `SELECT gpufleet_commit_after($1)`
	markCommit   = `SELECT gpufleet_commit($1, $2)`
	readCommits  = `SELECT seq FROM store_commits WHERE id = 1`
	// checkFence reads a lease's term and share-locks its row until the
	// transaction ends, so a takeover waits for this commit.
	checkFence = `SELECT holder, epoch FROM leases WHERE name = $1 FOR SHARE`
	// fenceOrFail does the same inside a pipeline, failing it when the term
	// is over (0001_init.sql).
	fenceOrFail = `SELECT gpufleet_fence($1, $2, $3)`
)

var (
	// errIsolate says a statement failed in a group's shared pipeline: the
	// group is written again with each batch in its own savepoint.
	errIsolate = errors.New("a row failed; isolating batches")
	// errOutOfOrder says a commit was refused because the commit before
	// it did not land (GF002): the group is written again, numbered after
	// the last commit that did.
	errOutOfOrder = errors.New("the commit before this one did not land")
)

// classify turns a statement's error into errOutOfOrder (GF002), errIsolate
// (any other error PostgreSQL reported: a row, a stale fence, a deadlock)
// or a connection's failure, whose outcome is unknown.
func classify(err error, what string) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "GF002":
		return errOutOfOrder
	case errors.As(err, &pgErr):
		return fmt.Errorf("%w: %w", errIsolate, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// sendFast writes group numbered seq as one pipeline (sendWire): BEGIN and
// the commit's ticket, whose answers it waits for, so the ticket is held
// before the next group is sent; then, already sent with them, with early
// the wait for the commit before (when the two groups write a row in
// common, so neither waits on the other's row while the other waits for
// it), each fence's check (once per group, before any row), every row (the
// repeated statements as one multi-row statement each: queueRows), the
// commit's change record and count, and COMMIT, which is flushed (per
// synchronous_commit) before the server answers the pipeline's Sync. The
// rest is read by the wire's finish. After an error the connection may be
// left in a failed transaction: see rollback.
func (s *Store) sendFast(ctx context.Context, conn *pgx.Conn, group []batch, seq int64, early bool) (*wire, error) {
	pb := &pgx.Batch{}
	pb.Queue(`BEGIN`)
	pb.Queue(commitTicket, seq)
	if early {
		pb.Queue(commitAfter, seq)
	}
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
		return nil, errIsolate
	}
	// The change record, numbered seq, runs before markCommit: the
	// statements after markCommit's wait for the commit before are the
	// part of a commit the next one waits for in turn.
	feed := s.queueChange(pb, group, nil, seq)
	pb.Queue(markCommit, seq, encode.Time(time.Now()))
	s.queuePrune(pb)
	pb.Queue(`COMMIT`)
	return sendWire(ctx, conn, pb, 2, feed)
}

// readFast reads the rest of a group sendFast sent and notes the change it
// recorded.
func (s *Store) readFast(w *wire) error {
	if err := w.finish(); err != nil {
		return err
	}
	s.committed(w.changeSeq)
	return nil
}

// rollback ends the transaction a failed sendFast may have left open on
// conn; it returns the connection's failure, if any.
func rollback(ctx context.Context, conn *pgx.Conn) error {
	if conn.IsClosed() {
		return errors.New("connection closed")
	}
	_, err := conn.Exec(ctx, `ROLLBACK`)
	return err
}

// writeFast writes group numbered seq and waits for it; after an error its
// transaction is rolled back.
func (s *Store) writeFast(ctx context.Context, conn *pgx.Conn, group []batch, seq int64) error {
	w, err := s.sendFast(ctx, conn, group, seq, false)
	if err == nil {
		err = s.readFast(w)
	}
	if err != nil {
		if rerr := rollback(ctx, conn); rerr != nil && (errors.Is(err, errIsolate) || errors.Is(err, errOutOfOrder)) {
			return fmt.Errorf("rolling back (%w): %w", err, rerr)
		}
	}
	return err
}

// writeIsolated runs group numbered seq in one transaction, the slow path
// after writeFast failed: first the fences, then the rows of every batch
// whose fence holds, each batch in its own savepoint, so each gets its own
// error.
func (s *Store) writeIsolated(ctx context.Context, conn *pgx.Conn, group []batch, seq int64) (errs []error, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	if _, err := tx.Exec(ctx, commitTicket, seq); err != nil {
		return nil, classify(err, "taking the commit's ticket")
	}
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
	if _, err := tx.Exec(ctx, markCommit, seq, encode.Time(time.Now())); err != nil {
		return nil, classify(err, "counting the commit")
	}
	pb := &pgx.Batch{}
	var changeSeq int64
	if feed := s.queueChange(pb, group, errs, 0); feed >= 0 {
		br := tx.SendBatch(ctx, pb)
		for i := range pb.Len() {
			var err error
			if i == feed {
				err = br.QueryRow().Scan(&changeSeq)
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
	s.committed(changeSeq)
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
