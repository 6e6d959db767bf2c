package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"

	"github.com/gpufleet/gpufleet/internal/store/encode"
)

// Export is a consistent, read-only view of a database for copying it
// elsewhere (gpufleet store migrate): one read transaction, so every table
// is read at the same commit. It never writes the database, its WAL or the
// mark.
type Export struct {
	db *sql.DB
	tx *sql.Tx
}

// OpenExport opens the database at path for export. The caller should
// make sure no server writes it meanwhile (hold the data dir's lock), or
// what is written after the export began is not in it.
func OpenExport(ctx context.Context, path string) (*Export, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("opening %s for export: %w", path, err)
	}
	db, err := sql.Open("sqlite", readOnlyDSN(path))
	if err != nil {
		return nil, fmt.Errorf("opening %s for export: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening %s for export: %w", path, err)
	}
	var version int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		tx.Rollback()
		db.Close()
		return nil, fmt.Errorf("reading %s's schema version: %w", path, err)
	}
	migs, err := embeddedMigrations()
	if err == nil && version != len(migs) {
		err = fmt.Errorf("%s is at schema version %d, this gpufleet's is %d: start this gpufleet's server on it once (it migrates), stop it, then export", path, version, len(migs))
	}
	if err != nil {
		tx.Rollback()
		db.Close()
		return nil, err
	}
	return &Export{db: db, tx: tx}, nil
}

// Rows calls fn with the values of each row of t, in t's order. The
// values are fn's only until it returns.
func (e *Export) Rows(ctx context.Context, t encode.Table, fn func([]any) error) error {
	q := fmt.Sprintf(`SELECT %s FROM %s ORDER BY %s`, quoteColumns(t.Columns), t.Name, t.OrderBy)
	rows, err := e.tx.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("reading %s: %w", t.Name, err)
	}
	defer rows.Close()
	vals := make([]any, len(t.Columns))
	ptrs := make([]any, len(t.Columns))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("reading %s: %w", t.Name, err)
		}
		if err := fn(vals); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", t.Name, err)
	}
	return nil
}

// Close ends the read transaction and closes the database.
func (e *Export) Close() error {
	e.tx.Rollback() // read-only
	return e.db.Close()
}

// quoteColumns lists columns for SQL, each quoted ("user" is a keyword).
func quoteColumns(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = `"` + c + `"`
	}
	return strings.Join(q, ", ")
}

// Backup writes a consistent copy of the database at path to dest (which
// must not exist) with SQLite's VACUUM INTO, safe while a server writes the
// database: the copy is one committed state, compacted, with no WAL to
// carry. Its commit mark (dest+MarkSuffix) is written beside it, so the
// two restore together; restoring them in place of a newer database is
// refused at start as lost writes, as it should be. It returns the number
// of the last commit the copy holds.
func Backup(ctx context.Context, path, dest string) (uint64, error) {
	if _, err := os.Stat(dest); err == nil {
		return 0, fmt.Errorf("backing up to %s: it exists; give a new path", dest)
	}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("backing up %s: %w", path, err)
	}
	// Created empty first, mode 0600 (VACUUM INTO fills an empty file):
	// the copy holds token hashes, so it is never readable by others.
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("backing up to %s: %w", dest, err)
	}
	f.Close()
	db, err := sql.Open("sqlite", readOnlyDSN(path))
	if err != nil {
		os.Remove(dest)
		return 0, fmt.Errorf("backing up %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dest); err != nil {
		os.Remove(dest)
		return 0, fmt.Errorf("backing up %s to %s: %w", path, dest, err)
	}
	cp, err := sql.Open("sqlite", readOnlyDSN(dest))
	if err != nil {
		return 0, fmt.Errorf("reading back %s: %w", dest, err)
	}
	defer cp.Close()
	m, err := committed(ctx, cp)
	if err != nil {
		return 0, fmt.Errorf("reading back %s: %w", dest, err)
	}
	mf, _, _, err := openMark(dest + MarkSuffix)
	if err != nil {
		return 0, err
	}
	if err := mf.write(m); err != nil {
		mf.close()
		return 0, err
	}
	return m.seq, mf.close()
}
