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

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, Options{})
	exit := 1
	a2 := testAttempt("job-b", 2, 3)
	a2.State, a2.ExitCode, a2.Reason = model.AttemptFailed, &exit, "exit status 1"
	want := &store.Dump{
		// In Seq order, which is neither id nor submit order.
		Jobs:        []*model.Job{testJob("job-b", 1, 4), testJob("job-a", 2, 1)},
		Attempts:    []*model.Attempt{testAttempt("job-b", 1, 2), a2},
		Nodes:       []*model.Node{testNode("node-1", 1), testNode("node-2", 5)},
		Tokens:      []*model.Token{testToken("tok-1"), testToken("tok-2")},
		Idempotency: []store.Idempotency{testIdempotency("ada", "k1", "job-b", time.Now().Add(time.Hour))},
		Meta:        map[string]string{"job_seq": "2", "cluster_id": "c-1"},
	}
	// Two batches, so the second's references to the first are resolved
	// across a batch boundary.
	commit(t, s, &store.Batch{Jobs: []*model.Job{want.Jobs[1], want.Jobs[0]}, Meta: want.Meta})
	commit(t, s, &store.Batch{Attempts: want.Attempts, Nodes: want.Nodes, Tokens: want.Tokens, Idempotency: want.Idempotency})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	got := load(t, reopen(t, path, Options{}))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load after reopen (-want +got):\n%s", diff)
	}
}

func TestEmptyStoreLoads(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	commit(t, s, nil)
	commit(t, s, &store.Batch{})
	if diff := cmp.Diff(&store.Dump{Meta: map[string]string{}}, load(t, s)); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

func TestVersionGuard(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		first, second, want uint64
	}{
		"higher replaces":       {first: 2, second: 3, want: 3},
		"equal replaces":        {first: 2, second: 2, want: 2},
		"lower is ignored":      {first: 3, second: 2, want: 3},
		"much lower is ignored": {first: 10, second: 1, want: 10},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, Options{})
			// Each version has its own state, so the loaded object shows
			// which write won, not only its Version field.
			batch := func(v uint64) *store.Batch {
				j := testJob("job-1", 1, v)
				j.Reason = fmt.Sprintf("written at v%d", v)
				a := testAttempt("job-1", 1, v)
				a.Reason = j.Reason
				n := testNode("node-1", v)
				n.Name = j.Reason
				return &store.Batch{Jobs: []*model.Job{j}, Attempts: []*model.Attempt{a}, Nodes: []*model.Node{n}}
			}
			commit(t, s, batch(tc.first))
			commit(t, s, batch(tc.second))

			want := batch(tc.want)
			got := load(t, s)
			if diff := cmp.Diff(want.Jobs, got.Jobs); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Attempts, got.Attempts); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Nodes, got.Nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnversionedLastWriteWins(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	tok := testToken("tok-1")
	idem := testIdempotency("ada", "k1", "job-1", time.Now().Add(time.Hour))
	commit(t, s, &store.Batch{Jobs: []*model.Job{testJob("job-1", 1, 1), testJob("job-2", 2, 1)}, Tokens: []*model.Token{tok}, Idempotency: []store.Idempotency{idem}, Meta: map[string]string{"k": "1"}})

	revoked := *tok
	revoked.Revoked = true
	idem.JobID = "job-2"
	commit(t, s, &store.Batch{Tokens: []*model.Token{&revoked}, Idempotency: []store.Idempotency{idem}, Meta: map[string]string{"k": "2"}})

	got := load(t, s)
	if diff := cmp.Diff([]*model.Token{&revoked}, got.Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Idempotency{idem}, got.Idempotency); diff != "" {
		t.Errorf("idempotency (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"k": "2"}, got.Meta); diff != "" {
		t.Errorf("meta (-want +got):\n%s", diff)
	}
}

// A token's revocation is never undone, whichever of two batches that write
// the token lands last.
func TestRevokedTokenStaysRevoked(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	tok := testToken("tok-1")
	revoked := *tok
	revoked.Revoked = true
	commit(t, s, &store.Batch{Tokens: []*model.Token{&revoked}})
	commit(t, s, &store.Batch{Tokens: []*model.Token{tok}})
	if diff := cmp.Diff([]*model.Token{&revoked}, load(t, s).Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
}

func TestConcurrentSubmitters(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 16, 50
	s, _ := openTest(t, Options{})
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

	want := map[string]bool{}
	for w := range writers {
		for i := range perWriter {
			want[fmt.Sprintf("job-%d-%d", w, i)] = true
		}
	}
	d := load(t, s)
	got := map[string]bool{}
	for _, j := range d.Jobs {
		got[j.ID] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored jobs (-want +got):\n%s", diff)
	}
	if len(d.Idempotency) != writers*perWriter {
		t.Errorf("Load returned %d idempotency records, want %d", len(d.Idempotency), writers*perWriter)
	}
	st := s.Stats()
	if diff := cmp.Diff(Stats{Commits: st.Commits, Batches: writers * perWriter, Rows: 2 * writers * perWriter, LastCommit: st.LastCommit}, st); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

// TestGroupCommit holds the first commit open while more batches queue, and
// checks that they are then written in as few transactions as MaxBatch
// allows, in Submit order.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	const n = 25
	tests := map[string]struct {
		maxBatch   int
		wantGroups []int
	}{
		"default max": {maxBatch: 0, wantGroups: []int{1, n - 1}},
		"max 10":      {maxBatch: 10, wantGroups: []int{1, 10, 10, 4}},
		"max 1":       {maxBatch: 1, wantGroups: []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			observe, entered, release, groups := holdFirstCommit()
			s, _ := openTest(t, Options{MaxBatch: tc.maxBatch, CommitObserver: observe})
			// Every batch overwrites one meta key and the same job at the
			// same version: what survives shows the order they committed in.
			batch := func(i int) *store.Batch {
				j := testJob("job-1", 1, 1)
				j.Reason = fmt.Sprint(i)
				return &store.Batch{Jobs: []*model.Job{j}, Meta: map[string]string{"last": fmt.Sprint(i)}}
			}
			chs := []<-chan error{s.Submit(batch(0))}
			<-entered
			for i := 1; i < n; i++ {
				chs = append(chs, s.Submit(batch(i)))
			}
			close(release)
			for i, ch := range chs {
				if err := <-ch; err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}

			if diff := cmp.Diff(tc.wantGroups, *groups); diff != "" {
				t.Errorf("batches per commit (-want +got):\n%s", diff)
			}
			d := load(t, s)
			last := fmt.Sprint(n - 1)
			if d.Meta["last"] != last || d.Jobs[0].Reason != last {
				t.Errorf("last write: meta %q, job reason %q; want both %q", d.Meta["last"], d.Jobs[0].Reason, last)
			}
		})
	}
}

// TestFailedBatchFailsAlone groups a batch that breaks a foreign key with
// good ones: only it fails, and none of its rows are written.
func TestFailedBatchFailsAlone(t *testing.T) {
	t.Parallel()
	observe, entered, release, _ := holdFirstCommit()
	s, _ := openTest(t, Options{CommitObserver: observe})
	good := func(id string) *store.Batch { return &store.Batch{Jobs: []*model.Job{testJob(id, 0, 1)}} }
	bad := &store.Batch{
		Jobs:     []*model.Job{testJob("job-partial", 0, 1)},
		Attempts: []*model.Attempt{testAttempt("job-missing", 1, 1)},
	}

	chs := []<-chan error{s.Submit(good("job-0"))}
	<-entered
	chs = append(chs, s.Submit(good("job-1")), s.Submit(bad), s.Submit(good("job-2")))
	close(release)
	// The driver's wording of the constraint is its own; the prefix is ours.
	var errs []string
	for _, ch := range chs {
		err := <-ch
		errs = append(errs, strings.SplitN(fmt.Sprint(err), ":", 2)[0])
	}
	wantErrs := []string{"<nil>", "<nil>", "writing attempt job-missing-a1", "<nil>"}
	if diff := cmp.Diff(wantErrs, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	var ids []string
	for _, j := range load(t, s).Jobs {
		ids = append(ids, j.ID)
	}
	if diff := cmp.Diff([]string{"job-0", "job-1", "job-2"}, ids); diff != "" {
		t.Errorf("stored jobs (-want +got):\n%s", diff)
	}
}

func TestCloseDrainsQueue(t *testing.T) {
	t.Parallel()
	const n = 200
	s, path := openTest(t, Options{MaxBatch: 16})
	var chs []<-chan error
	for i := range n {
		chs = append(chs, s.Submit(&store.Batch{Jobs: []*model.Job{testJob(fmt.Sprintf("job-%03d", i), uint64(i), 1)}}))
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, ch := range chs {
		if err := <-ch; err != nil {
			t.Errorf("batch %d: %v", i, err)
		}
	}
	if got := len(load(t, reopen(t, path, Options{})).Jobs); got != n {
		t.Errorf("after Close and reopen, %d jobs stored, want %d", got, n)
	}
}

func TestSubmitAfterClose(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ch := s.Submit(&store.Batch{Jobs: []*model.Job{testJob("job-1", 1, 1)}})
	if err := <-ch; !errors.Is(err, store.ErrClosed) {
		t.Errorf("Submit after Close: got %v, want %v", err, store.ErrClosed)
	}
	if _, open := <-ch; open {
		t.Errorf("Submit's channel is not closed after its error")
	}
}

func TestLoadDropsExpiredIdempotency(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	s, _ := openTest(t, Options{Clock: clock.NewFake(now)})
	live := testIdempotency("ada", "live", "job-1", now.Add(time.Nanosecond))
	commit(t, s, &store.Batch{
		Jobs: []*model.Job{testJob("job-1", 1, 1)},
		Idempotency: []store.Idempotency{
			testIdempotency("ada", "old", "job-1", now.Add(-time.Second)),
			testIdempotency("ada", "now", "job-1", now),
			live,
		},
	})

	if diff := cmp.Diff([]store.Idempotency{live}, load(t, s).Idempotency); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	var rows int
	if err := s.db.QueryRow(`SELECT count(*) FROM idempotency`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("idempotency table holds %d rows after Load, want 1 (expired ones deleted)", rows)
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

func TestSubmitRejectsUnencodable(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	j := testJob("job-nan", 1, 1)
	j.Spec.MaxPricePerHour = math.NaN()
	err := <-s.Submit(&store.Batch{Jobs: []*model.Job{j}})
	if want := "encoding job job-nan: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Submit error = %v, want one starting %q", err, want)
	}
	if diff := cmp.Diff(Stats{}, s.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
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
