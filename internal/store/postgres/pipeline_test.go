package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// changedJobs reads the change feed in commit order: each commit's number
// and the jobs it wrote, in the order their batches were submitted.
func changedJobs(t *testing.T, s *Store) (seqs []int64, jobs []string) {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT seq, data FROM changes ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq  int64
			data []byte
		)
		if err := rows.Scan(&seq, &data); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
		var recs []json.RawMessage
		if err := json.Unmarshal(data, &recs); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			b, err := encode.Unbatch(r)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range b.Jobs {
				jobs = append(jobs, j.ID)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs, jobs
}

// TestPipelineKeepsOrder submits 3,000 batches from one goroutine without
// waiting, then from 32 at once: every commit lands in the order its group
// was sent, so the feed holds the first 3,000 jobs in Submit order under
// gapless commit numbers, and most groups committed in their pipeline.
func TestPipelineKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, pgtest.DSN(t), Options{Shared: true})
	l, err := s.Acquire(ctx, "controller", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var (
		want  []string
		waits []<-chan error
	)
	for i := range n {
		id := fmt.Sprintf("j-%05d", i)
		want = append(want, id)
		b := &store.Batch{Jobs: []*model.Job{storetest.Job(id, uint64(i+1), 1)}, Fence: l.Fence(),
			Access: store.Access{Audit: []*model.AuditEntry{{Seq: uint64(i + 1), Action: "job.submit", Object: id}}}}
		if i%10 == 0 && i > 0 {
			// A job written again by a later group: the groups share a
			// row, the later one waits before writing it.
			b.Jobs = append(b.Jobs, storetest.Job(want[i-1], uint64(i), 2))
		}
		waits = append(waits, s.Submit(b))
	}
	for i, w := range waits {
		if err := <-w; err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				if err := store.Commit(ctx, s, &store.Batch{Jobs: []*model.Job{storetest.Job(fmt.Sprintf("k-%d-%d", g, i), 1, 1)}, Fence: l.Fence()}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seqs, jobs := changedJobs(t, s)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("commit %d follows %d: the commit numbers have a gap", seqs[i], seqs[i-1])
		}
	}
	var first []string
	seen := map[string]bool{}
	for _, id := range jobs {
		if id[0] == 'j' && !seen[id] {
			seen[id] = true
			first = append(first, id)
		}
	}
	if !slices.Equal(first, want) {
		t.Fatalf("the feed holds the jobs in another order than submitted (%d of %d)", len(first), len(want))
	}
	pipelined, rewritten := s.PipelineStats()
	t.Logf("%d commits, %d in their pipeline, %d written again", len(seqs), pipelined, rewritten)
	if pipelined == 0 || rewritten > pipelined/10 {
		t.Errorf("%d groups committed in their pipeline, %d written again: want nearly all in their pipeline", pipelined, rewritten)
	}
}

// TestPipelineFailedCommitFailsItsGroupOnly holds two fenced groups in
// flight (an outside transaction locks the lease row, so both wait in
// their fence check), then kills the first group's backend: the first
// group's caller gets an error and its job is not stored; the second
// group, refused in its own commit because the first did not land, is
// written again and succeeds; the committer reconnects for the next.
func TestPipelineFailedCommitFailsItsGroupOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := openTest(t, dsn, Options{Shared: true})
	l, err := s.Acquire(ctx, "controller", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(id string) error {
		return store.Commit(ctx, s, &store.Batch{Jobs: []*model.Job{storetest.Job(id, 1, 1)}, Fence: l.Fence()})
	}
	if err := commit("j-before"); err != nil {
		t.Fatal(err)
	}
	outside, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close(ctx)
	tx, err := outside.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM leases WHERE name = 'controller' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// waiting lists the committer's backends waiting for the lease row,
	// oldest transaction first.
	waiting := func(want int) []int32 {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var pids []int32
			// Not on outside: within its transaction, pg_stat_activity
			// stays the snapshot of its first read.
			rows, err := s.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
				ORDER BY xact_start`)
			if err == nil {
				pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pids) == want {
				return pids
			}
			if time.Now().After(deadline) {
				rows, _ := s.pool.Query(ctx, `SELECT pid || ' ' || coalesce(wait_event_type, '-') || ' ' || coalesce(wait_event, '-') || ' ' || state || ' ' || left(query, 60) FROM pg_stat_activity WHERE datname = current_database()`)
				all, _ := pgx.CollectRows(rows, pgx.RowTo[string])
				t.Fatalf("%d backends wait for the lease row, want %d: %q", len(pids), want, all)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := s.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-first", 1, 1)}, Fence: l.Fence()})
	waiting(1)
	second := s.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-second", 1, 1)}, Fence: l.Fence()})
	pids := waiting(2)
	if _, err := outside.Exec(ctx, `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err == nil {
		t.Fatal("the first group succeeded though its backend was killed")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second group failed with the first: %v", err)
	}
	if err := commit("j-after"); err != nil {
		t.Fatalf("after the failure: %v", err)
	}
	d, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range d.Jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	if want := []string{"j-after", "j-before", "j-second"}; !slices.Equal(ids, want) {
		t.Errorf("stored jobs %v, want %v", ids, want)
	}
	if _, rewritten := s.PipelineStats(); rewritten == 0 {
		t.Error("no group was written again: the second group committed in its pipeline behind a failed one")
	}
	seqs, _ := changedJobs(t, s)
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("commit numbers %v have a gap", seqs)
		}
	}
}

// TestPipelineStaleFenceInFlight: a leader's group is in flight (held at
// its fence) when another replica takes the lease over; the group is
// refused with a *store.FencedError, and so is the one sent behind it.
func TestPipelineStaleFenceInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	old := openTest(t, dsn, Options{Shared: true})
	next := openTest(t, dsn, Options{Shared: true})
	l, err := old.Acquire(ctx, "controller", "old", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	outside, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close(ctx)
	tx, err := outside.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM leases WHERE name = 'controller' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	first := old.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-first", 1, 1)}, Fence: l.Fence()})
	second := old.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-second", 1, 1)}, Fence: l.Fence()})
	if _, err := tx.Exec(ctx, `UPDATE leases SET holder = 'next', epoch = epoch + 1 WHERE name = 'controller'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan error{"first": first, "second": second} {
		var fe *store.FencedError
		if err := <-ch; !errors.As(err, &fe) {
			t.Errorf("%s group of the old leader: %v, want a *store.FencedError", name, err)
		}
	}
	d, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Jobs) != 0 {
		t.Errorf("the old leader's jobs were stored: %d", len(d.Jobs))
	}
}

// TestCommitOutOfOrderRefused: gpufleet_commit refuses a number that does
// not follow the last commit, with GF002.
func TestCommitOutOfOrderRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, pgtest.DSN(t), Options{})
	var last int64
	if err := s.pool.QueryRow(ctx, readCommits).Scan(&last); err != nil {
		t.Fatal(err)
	}
	_, err := s.pool.Exec(ctx, markCommit, last+2, "t")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "GF002" {
		t.Fatalf("commit %d after %d: %v, want GF002", last+2, last, err)
	}
	if _, err := s.pool.Exec(ctx, markCommit, last+1, "t"); err != nil {
		t.Fatalf("commit %d after %d: %v", last+1, last, err)
	}
}

// TestTakeoverCostsOneRewritePerGroup backs docs/postgres.md's account of
// rewrites with two writers: a replica opens the store as a follower
// (reading the commit count then), the leader commits on, and the
// replica takes over. The old leader's next commit is fenced and does not
// count; the new leader's first groups, numbered from its stale count, are
// refused once each and land at their first rewrite, and its later groups
// need none.
func TestTakeoverCostsOneRewritePerGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	old := openTest(t, dsn, Options{Shared: true})
	next := openTest(t, dsn, Options{Shared: true}) // a follower: its count is read now
	lo, err := old.Acquire(ctx, "controller", "old", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := store.Commit(ctx, old, &store.Batch{Jobs: []*model.Job{storetest.Job(fmt.Sprintf("j-old-%d", i), 1, 1)}, Fence: lo.Fence()}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(400 * time.Millisecond) // the old leader's lease runs out
	ln, err := next.Acquire(ctx, "controller", "next", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(ctx, old, &store.Batch{Jobs: []*model.Job{storetest.Job("j-old-late", 1, 1)}, Fence: lo.Fence()}); !store.IsFenced(err) {
		t.Fatalf("the old leader's commit after the takeover: %v, want fenced", err)
	}
	// Two groups at once, as a new leader's first pass and a submission.
	a := next.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-next-a", 1, 1)}, Fence: ln.Fence()})
	b := next.Submit(&store.Batch{Jobs: []*model.Job{storetest.Job("j-next-b", 1, 1)}, Fence: ln.Fence()})
	for name, ch := range map[string]<-chan error{"a": a, "b": b} {
		if err := <-ch; err != nil {
			t.Fatalf("the new leader's group %s: %v", name, err)
		}
	}
	_, first := next.PipelineStats()
	if first < 1 || first > 2 {
		t.Errorf("the new leader's first two batches took %d rewrites, want 1 or 2 (one per group, its count being stale)", first)
	}
	for i := range 5 {
		if err := store.Commit(ctx, next, &store.Batch{Jobs: []*model.Job{storetest.Job(fmt.Sprintf("j-next-%d", i), 1, 1)}, Fence: ln.Fence()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, later := next.PipelineStats(); later != first {
		t.Errorf("the new leader's later groups took %d more rewrites, want none", later-first)
	}
	d, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Jobs) != 12 {
		t.Errorf("%d jobs stored, want the old leader's 5 and the new one's 7", len(d.Jobs))
	}
}
