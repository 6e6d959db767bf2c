package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// Load reads every stored object in one repeatable-read transaction, so it
// sees a single committed state; see store.Store. The order of each kind is
// the SQLite store's. Idempotency records that have expired by
// Options.Clock are deleted rather than returned. A row that cannot be
// decoded fails Load with an error naming it.
func (s *Store) Load(ctx context.Context) (*store.Dump, error) {
	d, err := s.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading store: %w", err)
	}
	return d, nil
}

func (s *Store) load(ctx context.Context) (*store.Dump, error) { return s.loadWith(ctx, nil, false) }

// loadWith loads the store; also, when set, runs in the same transaction
// (Snapshot reads the commit count there), and tombstones includes the
// delivered notifications.
func (s *Store) loadWith(ctx context.Context, also func(pgx.Tx) error, tombstones bool) (*store.Dump, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	if also != nil {
		if err := also(tx); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM idempotency WHERE expires <= $1`, encode.Time(s.clock.Now())); err != nil {
		return nil, fmt.Errorf("deleting expired idempotency records: %w", err)
	}
	d := &store.Dump{Meta: map[string]string{}}
	if d.Jobs, err = loadObjects[model.Job](ctx, tx, "job", `SELECT id, data FROM jobs ORDER BY seq`); err != nil {
		return nil, err
	}
	if d.Attempts, err = loadObjects[model.Attempt](ctx, tx, "attempt", `SELECT id, data FROM attempts ORDER BY id COLLATE "C"`); err != nil {
		return nil, err
	}
	if d.Nodes, err = loadObjects[model.Node](ctx, tx, "node", `SELECT id, data FROM nodes ORDER BY id COLLATE "C"`); err != nil {
		return nil, err
	}
	if d.Queues, err = loadObjects[model.Queue](ctx, tx, "queue", `SELECT name, data FROM queues ORDER BY name COLLATE "C"`); err != nil {
		return nil, err
	}
	if d.Revisions, err = loadObjects[model.Revision](ctx, tx, "revision", `SELECT number::text AS key, data FROM revisions ORDER BY number`); err != nil {
		return nil, err
	}
	if d.Services, err = loadObjects[model.Service](ctx, tx, "service", `SELECT name, data FROM services ORDER BY name COLLATE "C"`); err != nil {
		return nil, err
	}
	if d.Events, err = loadObjects[model.Event](ctx, tx, "event", fmt.Sprintf(`SELECT seq::text AS key, data FROM (SELECT seq, data FROM events ORDER BY seq DESC LIMIT %d) e ORDER BY seq`, store.MaxLoadedEvents)); err != nil {
		return nil, err
	}
	if d.Tokens, err = loadTokens(ctx, tx); err != nil {
		return nil, err
	}
	if d.Idempotency, err = loadIdempotency(ctx, tx); err != nil {
		return nil, err
	}
	grants, err := loadObjects[model.Grant](ctx, tx, "grant", `SELECT "user" || '/' || project, data FROM grants ORDER BY "user" COLLATE "C", project COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	for _, g := range grants {
		d.Grants = append(d.Grants, *g)
	}
	secrets, err := loadObjects[model.Secret](ctx, tx, "secret", `SELECT project || '/' || name, data FROM secrets ORDER BY project COLLATE "C", name COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	for _, sec := range secrets {
		d.Secrets = append(d.Secrets, *sec)
	}
	head, err := loadObjects[model.AuditEntry](ctx, tx, "audit entry", `SELECT seq::text AS key, data FROM audit ORDER BY seq DESC LIMIT 1`)
	if err != nil {
		return nil, err
	}
	if len(head) > 0 {
		d.AuditHead = head[0]
	}
	if err := loadCost(ctx, tx, d, tombstones); err != nil {
		return nil, err
	}
	err = each(ctx, tx, `SELECT key, value FROM meta`, func(r pgx.Rows) error {
		var k, v string
		if err := r.Scan(&k, &v); err != nil {
			return fmt.Errorf("reading meta: %w", err)
		}
		d.Meta[k] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return d, nil
}

// each runs query in tx and calls scan on every row.
func each(ctx context.Context, tx pgx.Tx, query string, scan func(pgx.Rows) error, args ...any) error {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("querying %q: %w", query, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("querying %q: %w", query, err)
	}
	return nil
}

// decodeChunk is how many rows loadObjects reads before decoding them on
// every CPU; chunks bound the raw rows held for it.
const decodeChunk = 1024

// loadObjects decodes the data column of query's (id, data) rows as Ts,
// in query order.
func loadObjects[T any](ctx context.Context, tx pgx.Tx, kind, query string, args ...any) ([]*T, error) {
	var (
		out   []*T
		chunk = make([]encode.Raw, 0, decodeChunk)
	)
	decode := func() error {
		objs, err := encode.Decode[T](kind, chunk)
		out = append(out, objs...)
		chunk = chunk[:0]
		return err
	}
	err := each(ctx, tx, query, func(r pgx.Rows) error {
		// RawValues are the driver's memory, valid until the next row;
		// reslicing reuses the buffer of this slot's previous chunk.
		raw := r.RawValues()
		chunk = chunk[:len(chunk)+1]
		next := &chunk[len(chunk)-1]
		next.ID = string(raw[0])
		next.Data = append(next.Data[:0], raw[1]...)
		if len(chunk) == cap(chunk) {
			return decode()
		}
		return nil
	}, args...)
	if err == nil {
		err = decode()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loadTokens is loadObjects for tokens, whose hash is kept out of JSON.
func loadTokens(ctx context.Context, tx pgx.Tx) ([]*model.Token, error) {
	var out []*model.Token
	err := each(ctx, tx, `SELECT id, hash, data FROM tokens ORDER BY id COLLATE "C"`, func(r pgx.Rows) error {
		var (
			id   string
			hash []byte
			data []byte
		)
		if err := r.Scan(&id, &hash, &data); err != nil {
			return fmt.Errorf("reading token: %w", err)
		}
		t := new(model.Token)
		if err := json.Unmarshal(data, t); err != nil {
			return fmt.Errorf("decoding token %s: %w", id, err)
		}
		t.Hash = hash
		out = append(out, t)
		return nil
	})
	return out, err
}

func loadIdempotency(ctx context.Context, tx pgx.Tx) ([]store.Idempotency, error) {
	var out []store.Idempotency
	err := each(ctx, tx, `SELECT subject, key, job_id, body_hash, expires FROM idempotency ORDER BY subject COLLATE "C", key COLLATE "C"`, func(r pgx.Rows) error {
		var (
			rec     store.Idempotency
			expires string
		)
		if err := r.Scan(&rec.Subject, &rec.Key, &rec.JobID, &rec.BodyHash, &expires); err != nil {
			return fmt.Errorf("reading idempotency record: %w", err)
		}
		var err error
		if rec.Expires, err = encode.ParseTime(expires); err != nil {
			return fmt.Errorf("decoding idempotency key %s/%s: %w", rec.Subject, rec.Key, err)
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// loadCost reads the ledger in append order, the fired keys, every metric
// report and the undelivered notifications.
func loadCost(ctx context.Context, tx pgx.Tx, d *store.Dump, tombstones bool) error {
	ledger, err := loadObjects[model.LedgerEntry](ctx, tx, "ledger entry", `SELECT id::text AS key, data FROM ledger_entries ORDER BY id`)
	if err != nil {
		return err
	}
	for _, e := range ledger {
		d.Ledger = append(d.Ledger, *e)
	}
	err = each(ctx, tx, `SELECT budget, threshold, period_start FROM budget_fired ORDER BY budget COLLATE "C", period_start COLLATE "C", threshold`, func(r pgx.Rows) error {
		var (
			k     model.FiredKey
			start string
		)
		if err := r.Scan(&k.Budget, &k.Threshold, &start); err != nil {
			return fmt.Errorf("reading budget firing: %w", err)
		}
		t, err := time.Parse(time.RFC3339, start)
		if err != nil {
			return fmt.Errorf("decoding budget firing %s: %w", k.Budget, err)
		}
		k.PeriodStart = t
		d.BudgetFired = append(d.BudgetFired, k)
		return nil
	})
	if err != nil {
		return err
	}
	metrics, err := loadObjects[store.MetricReport](ctx, tx, "metric report", `SELECT job_id || '/' || seq, data FROM metric_reports ORDER BY job_id COLLATE "C", seq`)
	if err != nil {
		return err
	}
	for _, m := range metrics {
		d.Metrics = append(d.Metrics, *m)
	}
	d.Notifications, err = loadObjects[store.Notification](ctx, tx, "notification", notificationsSQL[tombstones])
	return err
}

// Audit reads up to limit audit entries with a sequence number above after,
// oldest first (limit ≤ 0: all). It reads committed rows only and may run
// while the server writes.
func (s *Store) Audit(ctx context.Context, after uint64, limit int) ([]*model.AuditEntry, error) {
	var lim *int64
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	defer tx.Rollback(ctx) // read-only
	out, err := loadObjects[model.AuditEntry](ctx, tx, "audit entry", `SELECT seq::text AS key, data FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2`, int64(after), lim)
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	return out, nil
}
