package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// Load reads every stored object in one transaction, so it sees a single
// committed state; see store.Store. Jobs come in Seq order, the other
// objects by id. Idempotency records that have expired by Options.Clock are
// deleted rather than returned. A row that cannot be decoded fails Load
// with an error naming it.
func (s *Store) Load(ctx context.Context) (*store.Dump, error) {
	d, err := s.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading store: %w", err)
	}
	return d, nil
}

func (s *Store) load(ctx context.Context) (*store.Dump, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback() // a no-op once committed
	// Expired records would be skipped at every later Load anyway; deleting
	// them keeps the table as small as the set of live keys.
	if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency WHERE expires <= ?`, formatExpires(s.clock.Now())); err != nil {
		return nil, fmt.Errorf("deleting expired idempotency records: %w", err)
	}
	d := &store.Dump{Meta: map[string]string{}}
	if d.Jobs, err = loadObjects[model.Job](ctx, tx, "job", `SELECT id, data FROM jobs ORDER BY seq`); err != nil {
		return nil, err
	}
	if d.Attempts, err = loadObjects[model.Attempt](ctx, tx, "attempt", `SELECT id, data FROM attempts ORDER BY id`); err != nil {
		return nil, err
	}
	if d.Nodes, err = loadObjects[model.Node](ctx, tx, "node", `SELECT id, data FROM nodes ORDER BY id`); err != nil {
		return nil, err
	}
	if d.Queues, err = loadObjects[model.Queue](ctx, tx, "queue", `SELECT name, data FROM queues ORDER BY name`); err != nil {
		return nil, err
	}
	if d.Revisions, err = loadObjects[model.Revision](ctx, tx, "revision", `SELECT number, data FROM revisions ORDER BY number`); err != nil {
		return nil, err
	}
	if d.Services, err = loadObjects[model.Service](ctx, tx, "service", `SELECT name, data FROM services ORDER BY name`); err != nil {
		return nil, err
	}
	if d.Events, err = loadObjects[model.Event](ctx, tx, "event", fmt.Sprintf(`SELECT seq, data FROM (SELECT seq, data FROM events ORDER BY seq DESC LIMIT %d) ORDER BY seq`, store.MaxLoadedEvents)); err != nil {
		return nil, err
	}
	if d.Tokens, err = loadTokens(ctx, tx); err != nil {
		return nil, err
	}
	if d.Idempotency, err = loadIdempotency(ctx, tx); err != nil {
		return nil, err
	}
	grants, err := loadObjects[model.Grant](ctx, tx, "grant", `SELECT user || '/' || project, data FROM grants ORDER BY user, project`)
	if err != nil {
		return nil, err
	}
	for _, g := range grants {
		d.Grants = append(d.Grants, *g)
	}
	secrets, err := loadObjects[model.Secret](ctx, tx, "secret", `SELECT project || '/' || name, data FROM secrets ORDER BY project, name`)
	if err != nil {
		return nil, err
	}
	for _, sec := range secrets {
		d.Secrets = append(d.Secrets, *sec)
	}
	head, err := loadObjects[model.AuditEntry](ctx, tx, "audit entry", `SELECT seq, data FROM audit ORDER BY seq DESC LIMIT 1`)
	if err != nil {
		return nil, err
	}
	if len(head) > 0 {
		d.AuditHead = head[0]
	}
	if err := loadCost(ctx, tx, d); err != nil {
		return nil, err
	}
	err = each(ctx, tx, `SELECT key, value FROM meta`, func(r *sql.Rows) error {
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
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return d, nil
}

// each runs query in tx and calls scan on every row.
func each(ctx context.Context, tx *sql.Tx, query string, scan func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, query)
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

// decodeChunk is how many rows loadObjects reads before decoding them.
// JSON decoding, not SQLite, is most of a large Load, so it runs on every
// CPU; chunks bound the raw rows held for it.
const decodeChunk = 1024

// loadObjects decodes the data column of query's (id, data) rows as Ts,
// in query order.
func loadObjects[T any](ctx context.Context, tx *sql.Tx, kind, query string) ([]*T, error) {
	var (
		out   []*T
		chunk = make([]encode.Raw, 0, decodeChunk)
		raw   sql.RawBytes // the driver's memory, valid until the next row
	)
	decode := func() error {
		objs, err := encode.Decode[T](kind, chunk)
		out = append(out, objs...)
		chunk = chunk[:0]
		return err
	}
	err := each(ctx, tx, query, func(r *sql.Rows) error {
		// Reslicing rather than appending reuses the buffer of the row
		// in this slot from the previous chunk.
		chunk = chunk[:len(chunk)+1]
		next := &chunk[len(chunk)-1]
		if err := r.Scan(&next.ID, &raw); err != nil {
			return fmt.Errorf("reading %s: %w", kind, err)
		}
		next.Data = append(next.Data[:0], raw...)
		if len(chunk) == cap(chunk) {
			return decode()
		}
		return nil
	})
	if err == nil {
		err = decode()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loadTokens is loadObjects for tokens, whose hash is kept out of JSON.
func loadTokens(ctx context.Context, tx *sql.Tx) ([]*model.Token, error) {
	var out []*model.Token
	err := each(ctx, tx, `SELECT id, hash, data FROM tokens ORDER BY id`, func(r *sql.Rows) error {
		var (
			id   string
			hash []byte
			data sql.RawBytes
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

func loadIdempotency(ctx context.Context, tx *sql.Tx) ([]store.Idempotency, error) {
	var out []store.Idempotency
	err := each(ctx, tx, `SELECT subject, key, job_id, body_hash, expires FROM idempotency ORDER BY subject, key`, func(r *sql.Rows) error {
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

// Audit reads up to limit audit entries with a sequence number above after,
// oldest first (limit ≤ 0: all). It reads committed rows only and may run
// while the server writes.
func (s *Store) Audit(ctx context.Context, after uint64, limit int) ([]*model.AuditEntry, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	defer tx.Rollback() // read-only
	out, err := loadObjects[model.AuditEntry](ctx, tx, "audit entry", fmt.Sprintf(`SELECT seq, data FROM audit WHERE seq > %d ORDER BY seq LIMIT %d`, after, limit))
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	return out, nil
}
