package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// StoreEnv names the environment variable --store defaults to, which keeps
// a DSN's password out of the process list.
const StoreEnv = "GPUFLEET_STORE"

// backingStore is what the server needs of a store: the controller writes
// through it and the API reads the audit log from it.
type backingStore interface {
	store.Store
	api.AuditReader
}

// validateStore checks --store: empty or "sqlite" for the data dir's
// SQLite file, or a postgres:// URL. The value is never echoed, since a
// DSN holds a password.
func validateStore(fe *model.FieldErrors, c *Config) {
	switch {
	case c.Store == "" || c.Store == "sqlite":
	case postgres.IsDSN(c.Store):
		if c.AcceptLostWrites {
			fe.Add("--accept-lost-writes", "applies to the SQLite store only: PostgreSQL keeps its own durability")
		}
	default:
		fe.Add("--store", fmt.Sprintf("must be sqlite (the data dir's database, the default) or a postgres:// URL, not %s", postgres.Describe(c.Store)))
	}
}

// describeStore names the store for logs and banners, without a password.
func describeStore(c *Config) string {
	if postgres.IsDSN(c.Store) {
		return postgres.Describe(c.Store)
	}
	return "sqlite:" + filepath.Join(c.DataDir, DBFile)
}

// openLeaser opens the leases' own handle on the PostgreSQL store --store
// names: a pool of one connection that nothing else uses, so a renewal never
// waits behind the API's reads or a takeover's for a connection (a renewal
// that waited 1.2 s for one at load 20 cost a new leader its term). The
// caller closes it.
func openLeaser(ctx context.Context, c *Config, log *slog.Logger) (*postgres.Store, error) {
	st, err := postgres.Open(ctx, c.Store, postgres.Options{Logger: log, Shared: true, MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("opening the store for the controller lease: %w", err)
	}
	return st, nil
}

// openStore opens the store --store names. PostgreSQL is opened shared:
// replicas elect a leader and fence its writes (ha.go, docs/postgres.md).
func openStore(ctx context.Context, c *Config, log *slog.Logger, observe func(time.Duration, int)) (backingStore, error) {
	if postgres.IsDSN(c.Store) {
		st, err := postgres.Open(ctx, c.Store, postgres.Options{Logger: log, CommitObserver: observe, Shared: true})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	st, err := sqlite.Open(ctx, filepath.Join(c.DataDir, DBFile), sqlite.Options{
		Logger: log, AcceptLostWrites: c.AcceptLostWrites, CommitObserver: observe,
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
