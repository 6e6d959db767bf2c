package postgres

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/gpufleet/gpufleet/internal/store/schema"
)

// embeddedMigrations returns the migrations compiled into this binary.
func embeddedMigrations() ([]schema.Migration, error) {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		return nil, fmt.Errorf("opening embedded migrations: %w", err)
	}
	return schema.Read(sub)
}

// migrate brings the database to the schema of the embedded migrations in
// one transaction (PostgreSQL's DDL is transactional, so a crash leaves it
// at its old version), under a transaction-scoped advisory lock so that
// replicas starting together apply each script once.
func (s *Store) migrate(ctx context.Context) error {
	migs, err := embeddedMigrations()
	if err != nil {
		return err
	}
	return s.migrateTo(ctx, migs)
}

func (s *Store) migrateTo(ctx context.Context, migs []schema.Migration) error {
	tx, err := s.primary().Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op once committed
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("locking for migration: %w", err)
	}
	// The bookkeeping table is created here rather than by a migration: its
	// contents say which migrations to run, so it must exist first.
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	pending, err := schema.Pending(migs, current)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, m := range pending {
		s.log.Info("applied schema migration", "version", m.Version, "name", m.Name, "store", s.desc)
	}
	return nil
}
