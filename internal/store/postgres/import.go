package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// Source is a consistent view of another store's tables (sqlite.Export).
type Source interface {
	// Rows calls fn with each row of t's columns, in t's order.
	Rows(ctx context.Context, t encode.Table, fn func([]any) error) error
}

// ErrNotEmpty says Import's target already holds state.
var ErrNotEmpty = errors.New("the target database already holds gpufleet state")

// TableCount is how many rows of a table were read and how many the target
// holds after an Import.
type TableCount struct {
	Table  string `json:"table"`
	Source int64  `json:"source"`
	Target int64  `json:"target"`
}

// ImportReport is what Import copied and verified.
type ImportReport struct {
	Tables []TableCount `json:"tables"`
	// AuditEntries and AuditHead are the copied audit log's length and
	// newest hash, its chain verified in the target.
	AuditEntries int    `json:"auditEntries"`
	AuditHead    string `json:"auditHead,omitempty"`
}

// Import copies every table of src into this store's database, which must
// hold no state yet, in one transaction: all of it or nothing. It then
// verifies the copy: each table's row count equals what was read, and the
// audit log's hash chain, read back from this database, is intact up to
// the source's head. The Store must have been opened for it alone (no
// server is using it: Open took the writer lock).
func (s *Store) Import(ctx context.Context, src Source) (ImportReport, error) {
	var rep ImportReport
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return rep, fmt.Errorf("importing: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	for _, t := range encode.Tables {
		var have int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, pgx.Identifier{t.Name}.Sanitize())).Scan(&have); err != nil {
			return rep, fmt.Errorf("importing: counting %s: %w", t.Name, err)
		}
		if have > 0 && t.Name != "meta" {
			return rep, fmt.Errorf("importing into %s: %w (%s has %d rows): import into a new, empty database", s.desc, ErrNotEmpty, t.Name, have)
		}
	}
	// A server that opened the database once may have written meta
	// (counters, the cluster id); the source's are the truth.
	if _, err := tx.Exec(ctx, `DELETE FROM meta`); err != nil {
		return rep, fmt.Errorf("importing: clearing meta: %w", err)
	}
	var sourceHead string
	for _, t := range encode.Tables {
		read, last, err := copyTable(ctx, tx, src, t)
		if err != nil {
			return rep, err
		}
		var have int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, pgx.Identifier{t.Name}.Sanitize())).Scan(&have); err != nil {
			return rep, fmt.Errorf("importing: counting %s: %w", t.Name, err)
		}
		rep.Tables = append(rep.Tables, TableCount{Table: t.Name, Source: read, Target: have})
		if have != read {
			return rep, fmt.Errorf("importing %s: read %d rows, the table holds %d", t.Name, read, have)
		}
		if t.Name == "audit" && last != nil {
			var (
				head model.AuditEntry
				raw  []byte
			)
			switch v := last[len(last)-1].(type) {
			case string:
				raw = []byte(v)
			case []byte:
				raw = v
			}
			if err := json.Unmarshal(raw, &head); err != nil {
				return rep, fmt.Errorf("importing: decoding the source's audit head: %w", err)
			}
			sourceHead = head.Hash
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("importing: committing: %w", err)
	}
	entries, err := s.Audit(ctx, 0, 0)
	if err != nil {
		return rep, fmt.Errorf("verifying the imported audit log: %w", err)
	}
	if err := audit.Verify(entries); err != nil {
		return rep, fmt.Errorf("verifying the imported audit log: %w", err)
	}
	rep.AuditEntries = len(entries)
	if len(entries) > 0 {
		rep.AuditHead = entries[len(entries)-1].Hash
	}
	if rep.AuditHead != sourceHead {
		return rep, fmt.Errorf("verifying the imported audit log: its head hash is %q, the source's %q", rep.AuditHead, sourceHead)
	}
	return rep, nil
}

// copyTable streams t's rows from src into tx with COPY and returns how
// many it read and the last of them.
func copyTable(ctx context.Context, tx pgx.Tx, src Source, t encode.Table) (read int64, last []any, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make(chan []any, 256)
	readErr := make(chan error, 1)
	go func() {
		defer close(rows)
		readErr <- src.Rows(ctx, t, func(vals []any) error {
			select {
			case rows <- append([]any(nil), vals...):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	_, err = tx.CopyFrom(ctx, pgx.Identifier{t.Name}, t.Columns, pgx.CopyFromFunc(func() ([]any, error) {
		v, ok := <-rows
		if !ok {
			return nil, nil
		}
		read++
		last = v
		return v, nil
	}))
	cancel()
	for range rows { // let the reader finish
	}
	if rerr := <-readErr; rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return 0, nil, fmt.Errorf("importing %s: %w", t.Name, err)
	}
	return read, last, nil
}
