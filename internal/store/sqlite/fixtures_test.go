package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// The fixtures are the conformance suite's.
var (
	testJob         = storetest.Job
	testAttempt     = storetest.Attempt
	testNode        = storetest.Node
	testToken       = storetest.Token
	testIdempotency = storetest.Idempotency
)

// openTest opens a store in a fresh directory and closes it when the test
// ends. It returns the database path so a test can reopen it.
func openTest(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	return reopen(t, path, opts), path
}

// reopen opens the store at path and closes it when the test ends.
func reopen(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func commit(t testing.TB, s *Store, b *store.Batch) {
	t.Helper()
	if err := store.Commit(context.Background(), s, b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func load(t testing.TB, s *Store) *store.Dump {
	t.Helper()
	d, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return d
}
