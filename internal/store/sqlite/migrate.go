package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var embedded embed.FS

// ErrSchemaTooNew is returned by Open for a database that a newer gpufleet
// has migrated: this binary cannot know what the newer schema means, so it
// refuses to touch it rather than corrupt it.
var ErrSchemaTooNew = errors.New("database schema is newer than this gpufleet")

// migration is one numbered SQL script from migrations/.
type migration struct {
	version int
	name    string
	sql     string
}

// readMigrations reads NNNN_name.sql files from the root of fsys, ordered by
// number. The numbers must run 1, 2, 3… without gaps or repeats: the schema
// version of a database is the number of the last script applied, and a gap
// would make that ambiguous.
func readMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	migs := make([]migration, 0, len(names))
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		migs = append(migs, migration{version: v, name: name, sql: string(b)})
	}
	slices.SortFunc(migs, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	for i, m := range migs {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want number %d (numbers run from 1 without gaps or repeats)", m.name, i+1)
		}
	}
	return migs, nil
}

// embeddedMigrations returns the migrations compiled into this binary.
func embeddedMigrations() ([]migration, error) {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		return nil, fmt.Errorf("opening embedded migrations: %w", err)
	}
	return readMigrations(sub)
}

// migrate brings db to the schema of the last of migs, applying each missing
// script in its own transaction together with its schema_migrations row, so
// a crash leaves the database at a whole version.
func migrate(ctx context.Context, db *sql.DB, migs []migration, log *slog.Logger) error {
	// The bookkeeping table is created here rather than by a migration: its
	// contents say which migrations to run, so it must exist first.
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
	) STRICT`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if current > len(migs) {
		return fmt.Errorf("%w: the database is at schema version %d and this binary knows versions up to %d; upgrade gpufleet to open it",
			ErrSchemaTooNew, current, len(migs))
	}
	for _, m := range migs[current:] {
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("applying migration %s: %w", m.name, err)
		}
		log.Info("applied schema migration", "version", m.version, "name", m.name)
	}
	return nil
}

func apply(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, m.version, m.name); err != nil {
		return err
	}
	return tx.Commit()
}
