package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/replica"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// TestConformanceShared runs the conformance suite on stores opened
// shared, which also write the change feed in every commit (the fast path
// and the isolated one).
func TestConformanceShared(t *testing.T) {
	storetest.Run(t, func(t testing.TB) func(storetest.Options) storetest.Store {
		dsn := pgtest.DSN(t)
		return func(o storetest.Options) storetest.Store {
			return openTest(t, dsn, Options{MaxBatch: o.MaxBatch, Clock: o.Clock, CommitObserver: o.CommitObserver, Shared: true})
		}
	})
}

// randomBatch is one batch of every kind of write, about objects drawn
// from small sets so later batches overwrite, delete and re-insert what
// earlier ones wrote (and some writes carry lower versions, which the
// store ignores).
func randomBatch(r *rand.Rand, i int) *store.Batch {
	b := &store.Batch{Meta: map[string]string{fmt.Sprintf("k%d", r.IntN(5)): fmt.Sprint(i)}}
	jid := fmt.Sprintf("job-%d", r.IntN(40))
	j := storetest.Job(jid, uint64(r.IntN(100)), uint64(r.IntN(6)))
	j.Reason = fmt.Sprint(i)
	b.Jobs = append(b.Jobs, j)
	if r.IntN(2) == 0 {
		a := storetest.Attempt(jid, 1+r.IntN(2), uint64(r.IntN(6)))
		a.Reason = fmt.Sprint(i)
		b.Attempts = append(b.Attempts, a)
	}
	if r.IntN(3) == 0 {
		b.Nodes = append(b.Nodes, storetest.Node(fmt.Sprintf("node-%d", r.IntN(5)), uint64(r.IntN(6))))
	}
	if r.IntN(4) == 0 {
		tok := storetest.Token(fmt.Sprintf("tok-%d", r.IntN(6)))
		tok.Revoked = r.IntN(3) == 0
		tok.Name = fmt.Sprint(i)
		b.Tokens = append(b.Tokens, tok)
	}
	if r.IntN(2) == 0 {
		// Some already expired: Load leaves them out, and so must Dump.
		b.Idempotency = append(b.Idempotency, storetest.Idempotency("ada", fmt.Sprintf("key-%d", r.IntN(20)), jid, storetest.T0.Add(time.Duration(r.IntN(3)-1)*time.Hour)))
	}
	q := fmt.Sprintf("q-%d", r.IntN(4))
	if r.IntN(4) == 0 {
		b.DeleteQueues = append(b.DeleteQueues, q)
	} else {
		b.Queues = append(b.Queues, &model.Queue{Name: q, Version: uint64(r.IntN(6)), Spec: model.QueueSpec{Weight: float64(1 + r.IntN(4))}})
	}
	if r.IntN(5) == 0 {
		b.Revisions = append(b.Revisions, &model.Revision{Number: r.IntN(8), CreatedAt: storetest.T0, Author: fmt.Sprint(i)})
	}
	b.Events = append(b.Events, &model.Event{Seq: uint64(i + 1), Time: storetest.T0, Kind: "job.queued", Object: jid, Message: fmt.Sprint(i)})
	g := model.Grant{User: fmt.Sprintf("u%d", r.IntN(3)), Project: "nlp", Role: model.Role("member"), CreatedAt: storetest.T0}
	if r.IntN(3) == 0 {
		b.DeleteGrants = append(b.DeleteGrants, store.GrantKey{User: g.User, Project: g.Project})
	} else {
		b.Grants = append(b.Grants, g)
	}
	b.Audit = append(b.Audit, &model.AuditEntry{Seq: uint64(i + 1), Time: storetest.T0, Action: fmt.Sprint(i)})
	s := model.Secret{Project: "nlp", Name: fmt.Sprintf("s%d", r.IntN(3)), Sealed: fmt.Sprint(i), Version: int64(i)}
	if r.IntN(3) == 0 {
		b.DeleteSecrets = append(b.DeleteSecrets, store.SecretKey{Project: s.Project, Name: s.Name})
	} else {
		b.Secrets = append(b.Secrets, s)
	}
	b.Ledger = append(b.Ledger, model.LedgerEntry{NodeID: "node-1", JobID: jid, Project: "nlp", Kind: "gpu", From: storetest.T0, To: storetest.T0.Add(time.Minute), Cost: model.Money(i)})
	b.BudgetFired = append(b.BudgetFired, model.FiredKey{Budget: fmt.Sprintf("b%d", r.IntN(3)), Threshold: 50 * (1 + r.IntN(2)), PeriodStart: storetest.T0})
	b.Metrics = append(b.Metrics, store.MetricReport{JobID: jid, Seq: int64(r.IntN(5)), Step: int64(i), Values: store.MetricValues{"loss": float64(i)}, At: storetest.T0})
	b.Notifications = append(b.Notifications, &store.Notification{ID: fmt.Sprintf("n%d", r.IntN(6)), Kind: "budget", Body: []byte(fmt.Sprint(i)),
		Delivered: r.IntN(3) == 0, Created: storetest.T0, NextAt: storetest.T0})
	return b
}

// TestFeedMirrorMatchesLoad: a follower that took a snapshot while a
// writer committed 600 random batches (grouped, one failing alone, some
// fenced with a stale epoch) and then applied the feed's changes holds
// exactly what Load returns: the tail of changes rebuilds the whole state.
func TestFeedMirrorMatchesLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	now := storetest.T0
	s := openTest(t, dsn, Options{Shared: true, Clock: clock.NewFake(now)})
	follower := openTest(t, dsn, Options{Shared: true, Clock: clock.NewFake(now)})
	lease, err := s.Acquire(ctx, "controller", "w", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stale := lease.Fence()
	stale.Epoch--

	// A first part before the snapshot, the rest while the follower
	// follows.
	r := rand.New(rand.NewPCG(1, 2))
	write := func(from, to int) {
		var wg sync.WaitGroup
		errs := make([]error, to-from)
		for i := from; i < to; i++ {
			b := randomBatch(r, i)
			switch {
			case i%97 == 13:
				b.Attempts = append(b.Attempts, storetest.Attempt("job-missing", 1, 1)) // fails alone
			case i%89 == 7:
				b.Fence = stale
			default:
				b.Fence = lease.Fence()
			}
			ch := s.Submit(b)
			wg.Go(func() { errs[i-from] = <-ch })
			if i%8 == 0 {
				wg.Wait() // some groups, some single commits
			}
		}
		wg.Wait()
		for k, err := range errs {
			i := from + k
			failing := i%97 == 13 || i%89 == 7
			if (err != nil) != failing {
				t.Fatalf("batch %d: err %v, want failing %v", i, err, failing)
			}
			if i%89 == 7 && !store.IsFenced(err) {
				t.Fatalf("batch %d: %v, want a fenced error", i, err)
			}
		}
	}
	write(0, 200)
	applied := 0
	f, err := replica.NewFollower(ctx, replica.Config{Feed: follower, Poll: 50 * time.Millisecond, OnApply: func(store.Change) { applied++ }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- f.Run(runCtx) }()
	write(200, 600)
	// The notification wakes the follower well before the poll would:
	// it catches up on its own.
	deadline := time.Now().Add(10 * time.Second)
	want := storeSeq(t, s)
	for f.Mirror().Seq() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.Mirror().Seq(); got != want {
		t.Fatalf("follower at change %d, store at %d", got, want)
	}
	if applied == 0 {
		t.Fatal("the follower applied no change: the test exercised nothing")
	}
	// Stopped, then caught up (a takeover): it reads only the tail, the
	// commits since it stopped, one change each.
	for i := 600; i < 610; i++ {
		b := randomBatch(r, i)
		b.Fence = lease.Fence()
		mustCommit(t, s, b)
	}
	before := applied
	if n, err := f.CatchUp(ctx); err != nil || n != 10 || applied-before != 10 {
		t.Fatalf("CatchUp after 10 commits = %d, %v (applied %d); want the 10-change tail", n, err, applied-before)
	}
	if got := f.Mirror().Seq(); got != want+10 {
		t.Fatalf("after the tail the follower is at change %d, want %d", got, want+10)
	}
	got := f.Mirror().Dump(now)
	wantDump, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Load orders jobs by seq alone; this workload gives several jobs
	// one seq (real jobs never share one), so order ties by id.
	slices.SortFunc(wantDump.Jobs, func(a, b *model.Job) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID)) })
	opts := gocmp.Options{cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)}
	if diff := gocmp.Diff(wantDump, got, opts); diff != "" {
		t.Errorf("mirror after %d changes differs from Load (-load +mirror):\n%s", applied, diff)
	}
	if len(got.Jobs) == 0 || len(got.Tokens) == 0 || len(got.Ledger) < 400 || got.AuditHead == nil {
		t.Errorf("the workload wrote little: %d jobs, %d tokens, %d ledger entries", len(got.Jobs), len(got.Tokens), len(got.Ledger))
	}
}

// TestFeedPruned: a follower asking for changes the store no longer keeps
// is told so (and would take a new snapshot), never given a gap.
func TestFeedPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := openTest(t, dsn, Options{Shared: true})
	for i := range 5 {
		mustCommit(t, s, &store.Batch{Jobs: []*model.Job{storetest.Job(fmt.Sprintf("j%d", i), uint64(i), 1)}})
	}
	cs, err := s.Changes(ctx, 0, 10)
	if err != nil || len(cs) != 5 || cs[0].Seq != 1 || cs[4].Batches[0].Jobs[0].ID != "j4" {
		t.Fatalf("Changes(0) = %d changes, %v", len(cs), err)
	}
	if _, err := s.pool.Exec(ctx, pruneChanges, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Changes(ctx, 1, 10); !errors.Is(err, store.ErrChangesPruned) {
		t.Fatalf("Changes(1) after pruning up to 3: %v, want ErrChangesPruned", err)
	}
	if cs, err := s.Changes(ctx, 3, 10); err != nil || len(cs) != 2 {
		t.Fatalf("Changes(3) = %d changes, %v; want the 2 kept", len(cs), err)
	}
	if cs, err := s.Changes(ctx, 5, 10); err != nil || len(cs) != 0 {
		t.Fatalf("Changes(5) = %d changes, %v; want none", len(cs), err)
	}
	// A commit that writes nothing (a fence alone) is a change too, an
	// empty one: the feed has no gap a follower would take for pruning.
	l, err := s.Acquire(ctx, "controller", "w", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, &store.Batch{Fence: l.Fence()})
	mustCommit(t, s, &store.Batch{Jobs: []*model.Job{storetest.Job("j5", 5, 1)}})
	if cs, err := s.Changes(ctx, 5, 10); err != nil || len(cs) != 2 || len(cs[0].Batches) != 0 || cs[1].Seq != 7 {
		t.Fatalf("Changes(5) after an empty commit = %+v, %v; want an empty change 6 and change 7", cs, err)
	}
}

func storeSeq(t *testing.T, s *Store) uint64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), `SELECT seq FROM store_commits WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return uint64(n)
}

func mustCommit(t *testing.T, s store.Store, b *store.Batch) {
	t.Helper()
	if err := store.Commit(context.Background(), s, b); err != nil {
		t.Fatal(err)
	}
}
