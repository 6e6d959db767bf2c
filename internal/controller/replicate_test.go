package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// recordingStore is a memStore that keeps every batch, in order, as a
// change feed would hand them to a follower.
type recordingStore struct {
	*memStore
	mu      sync.Mutex
	batches []*store.Batch
}

func (r *recordingStore) Submit(b *store.Batch) <-chan error { return r.Prepare(b)() }

// Prepare records b when it is queued, in the order batches reach the
// store (store.Preparer).
func (r *recordingStore) Prepare(b *store.Batch) func() <-chan error {
	submit := store.Prepare(r.memStore, b)
	return func() <-chan error {
		r.mu.Lock()
		r.batches = append(r.batches, b)
		r.mu.Unlock()
		return submit()
	}
}

// TestReplicateFollowsTheLeader: a follower's read-only controller that
// is handed the leader's batches answers reads as the leader does: the
// same jobs in the same states and versions, the same nodes, and the
// leader's tokens (a revoked one refused).
func TestReplicateFollowsTheLeader(t *testing.T) {
	ctx := context.Background()
	rec := &recordingStore{memStore: newMemStore()}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	lead, err := New(ctx, Config{Store: rec, Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		Fatal: func(err error) { t.Errorf("fatal: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Close()
	follow, err := New(ctx, Config{Store: newMemStore(), Logs: logs, Clock: clk, Fatal: func(err error) { t.Errorf("follower wrote: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()

	h := &harness{t: t, clk: clk, c: lead}
	h.register("node-1", 1)
	var jobs []*model.Job
	for range 3 {
		jobs = append(jobs, h.submit(model.JobSpec{Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}}))
	}
	if err := lead.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lead.Cancel(ctx, jobs[2].ID); err != nil {
		t.Fatal(err)
	}
	_, kept, err := lead.Identity().CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "ada", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gone, goneSecret, err := lead.Identity().CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "bob", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Identity().RevokeToken(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	for _, b := range rec.batches {
		follow.Replicate(b)
	}
	n := len(rec.batches)
	rec.mu.Unlock()
	if n < 5 {
		t.Fatalf("the leader committed %d batches: the test exercised little", n)
	}
	states := map[model.JobState]bool{}
	for _, want := range lead.Jobs(JobFilter{}) {
		got, err := follow.Job(want.ID)
		if err != nil {
			t.Fatalf("follower: job %s: %v", want.ID, err)
		}
		if got.State != want.State || got.Version != want.Version {
			t.Errorf("job %s on the follower: %s v%d, leader: %s v%d", want.ID, got.State, got.Version, want.State, want.Version)
		}
		states[want.State] = true
	}
	if len(follow.Jobs(JobFilter{})) != 3 || len(states) < 2 {
		t.Errorf("follower holds %d jobs in states %v; want the leader's 3 in several states", len(follow.Jobs(JobFilter{})), states)
	}
	if got, want := len(follow.Nodes()), len(lead.Nodes()); got != want || got != 1 {
		t.Errorf("follower holds %d nodes, leader %d", got, want)
	}
	if _, err := follow.Identity().Authenticate(kept); err != nil {
		t.Errorf("the leader's token on the follower: %v", err)
	}
	if _, err := follow.Identity().Authenticate(goneSecret); err == nil {
		t.Error("a token the leader revoked authenticates on the follower")
	}
	// A stale batch (an older version, as a mirror reset could replay)
	// changes nothing.
	rec.mu.Lock()
	first := rec.batches[0]
	rec.mu.Unlock()
	follow.Replicate(first)
	for _, want := range lead.Jobs(JobFilter{}) {
		if got, _ := follow.Job(want.ID); got.Version != want.Version {
			t.Errorf("an old batch rolled job %s back to v%d", want.ID, got.Version)
		}
	}
}
