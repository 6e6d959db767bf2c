package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/gpufleet/gpufleet/internal/store/schema"
)

//go:embed migrations/*.sql
var embedded embed.FS

// ErrSchemaTooNew is returned by Open for a database that a newer gpufleet
// has migrated (schema.ErrTooNew).
var ErrSchemaTooNew = schema.ErrTooNew

// migration is one numbered SQL script from migrations/.
type migration = schema.Migration

// embeddedMigrations returns the migrations compiled into this binary.
func embeddedMigrations() ([]migration, error) {
	sub, err := fs.Sub(embedded, "migrations")
	if err != nil {
		return nil, fmt.Errorf("opening embedded migrations: %w", err)
	}
	return schema.Read(sub)
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
	pending, err := schema.Pending(migs, current)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		log.Info("applied schema migration", "version", m.Version, "name", m.Name)
	}
	return nil
}

func apply(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, m.Version, m.Name); err != nil {
		return err
	}
	return tx.Commit()
}
