package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t testing.TB) func(storetest.Options) storetest.Store {
		path := filepath.Join(t.TempDir(), "gpufleet.db")
		return func(o storetest.Options) storetest.Store {
			return reopen(t, path, Options{MaxBatch: o.MaxBatch, Clock: o.Clock, CommitObserver: o.CommitObserver})
		}
	})
}

// TestStats counts what the committer made durable, and nothing for a
// batch refused before it was queued.
func TestStats(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 8, 20
	s, _ := openTest(t, Options{})
	j := testJob("job-nan", 1, 1)
	j.Spec.MaxPricePerHour = math.NaN()
	if err := <-s.Submit(&store.Batch{Jobs: []*model.Job{j}}); err == nil {
		t.Fatal("a NaN price was accepted")
	}
	if diff := cmp.Diff(Stats{}, s.Stats()); diff != "" {
		t.Errorf("Stats after a refused batch (-want +got):\n%s", diff)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := fmt.Sprintf("job-%d-%d", w, i)
				b := &store.Batch{
					Jobs:        []*model.Job{testJob(id, uint64(w*perWriter+i+1), 1)},
					Idempotency: []store.Idempotency{testIdempotency(fmt.Sprint(w), id, id, time.Now().Add(time.Hour))},
				}
				if err := <-s.Submit(b); err != nil {
					t.Errorf("Submit %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if diff := cmp.Diff(Stats{Commits: st.Commits, Batches: writers * perWriter, Rows: 2 * writers * perWriter, LastCommit: st.LastCommit}, st); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

// TestFencedBatchRefused: SQLite has no leases, so a fenced batch cannot be
// checked and is refused rather than written unfenced.
func TestFencedBatchRefused(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	err := <-s.Submit(&store.Batch{Jobs: []*model.Job{testJob("job-1", 1, 1)}, Fence: &store.Fence{Lease: "controller", Holder: "a", Epoch: 1}})
	if !errors.Is(err, store.ErrNoLeases) {
		t.Errorf("fenced Submit: got %v, want %v", err, store.ErrNoLeases)
	}
}

func TestLoadRejectsCorruptRows(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		insert  string
		wantErr string
	}{
		"job":         {`INSERT INTO jobs VALUES ('job-bad', 2, 'queued', 'nlp', 1, '{"id":')`, "decoding job job-bad: "},
		"job type":    {`INSERT INTO jobs VALUES ('job-bad', 2, 'queued', 'nlp', 1, '{"spec":{"resources":{"memory":"lots"}}}')`, "decoding job job-bad: "},
		"attempt":     {`INSERT INTO attempts VALUES ('att-bad', 'job-1', 1, '[]')`, "decoding attempt att-bad: "},
		"node":        {`INSERT INTO nodes VALUES ('node-bad', 1, 'null x')`, "decoding node node-bad: "},
		"token":       {`INSERT INTO tokens VALUES ('tok-bad', x'00', '')`, "decoding token tok-bad: "},
		"idempotency": {`INSERT INTO idempotency VALUES ('ada', 'k-bad', 'job-1', x'00', '9999-99-99')`, "decoding idempotency key ada/k-bad: "},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, Options{})
			commit(t, s, &store.Batch{Jobs: []*model.Job{testJob("job-1", 1, 1)}})
			if _, err := s.db.Exec(tc.insert); err != nil {
				t.Fatalf("inserting corrupt row: %v", err)
			}
			_, err := s.Load(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, Options{})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("database file mode = %v, want 0600", got)
	}
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "5000"}
	got := map[string]string{}
	for p := range want {
		var v string
		if err := s.db.QueryRow("PRAGMA " + p).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", p, err)
		}
		got[p] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("connection settings (-want +got):\n%s", diff)
	}
}

func TestOpenMissingDirectory(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing", "gpufleet.db"), Options{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open in a missing directory: got %v, want an error wrapping %v", err, os.ErrNotExist)
	}
}

// TestOpenUnusualPath checks that the path reaches SQLite intact, though it
// travels inside a URI.
func TestOpenUnusualPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpu?fleet#1%20.db")
	s := reopen(t, path, Options{})
	commit(t, s, &store.Batch{Meta: map[string]string{"k": "v"}})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"gpu?fleet#1%20.db", "gpu?fleet#1%20.db" + MarkSuffix}, names); diff != "" {
		t.Errorf("files in the data directory (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"k": "v"}, load(t, reopen(t, path, Options{})).Meta); diff != "" {
		t.Errorf("meta after reopen (-want +got):\n%s", diff)
	}
}
