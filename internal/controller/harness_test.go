package controller

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// memStore is a hand-written in-memory store.Store that keeps the newest
// version of every object, as the real store does.
type memStore struct {
	mu       sync.Mutex
	jobs     map[string]*model.Job
	attempts map[string]*model.Attempt
	nodes    map[string]*model.Node
	tokens   map[string]*model.Token
	idem     []store.Idempotency
	revs     []*model.Revision
	ledger   []model.LedgerEntry
	meta     map[string]string
	batches  int
}

func newMemStore() *memStore {
	return &memStore{jobs: map[string]*model.Job{}, attempts: map[string]*model.Attempt{}, nodes: map[string]*model.Node{}, tokens: map[string]*model.Token{}}
}

func (m *memStore) Load(context.Context) (*store.Dump, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &store.Dump{Idempotency: append([]store.Idempotency(nil), m.idem...), Revisions: append([]*model.Revision(nil), m.revs...),
		Meta: maps.Clone(m.meta)}
	d.Ledger = slices.Clone(m.ledger)
	for _, j := range m.jobs {
		d.Jobs = append(d.Jobs, j)
	}
	for _, a := range m.attempts {
		d.Attempts = append(d.Attempts, a)
	}
	for _, n := range m.nodes {
		d.Nodes = append(d.Nodes, n)
	}
	for _, t := range m.tokens {
		d.Tokens = append(d.Tokens, t)
	}
	return d, nil
}

func (m *memStore) Submit(b *store.Batch) <-chan error {
	m.mu.Lock()
	m.batches++
	for _, j := range b.Jobs {
		if old, ok := m.jobs[j.ID]; !ok || old.Version <= j.Version {
			m.jobs[j.ID] = j
		}
	}
	for _, a := range b.Attempts {
		if old, ok := m.attempts[a.ID]; !ok || old.Version <= a.Version {
			m.attempts[a.ID] = a
		}
	}
	for _, n := range b.Nodes {
		if old, ok := m.nodes[n.ID]; !ok || old.Version <= n.Version {
			m.nodes[n.ID] = n
		}
	}
	for _, t := range b.Tokens {
		if old, ok := m.tokens[t.ID]; !ok || !old.Revoked { // as sqlite: a revoked token stays revoked
			m.tokens[t.ID] = t
		}
	}
	m.idem = append(m.idem, b.Idempotency...)
	m.revs = append(m.revs, b.Revisions...)
	m.ledger = append(m.ledger, b.Ledger...)
	for k, v := range b.Meta {
		if m.meta == nil {
			m.meta = map[string]string{}
		}
		m.meta[k] = v
	}
	m.mu.Unlock()
	ch := make(chan error, 1)
	ch <- nil
	close(ch)
	return ch
}

func (m *memStore) Close() error { return nil }

// harness runs a controller on a fake clock with an in-memory store; the
// test plays the agent by calling Register and Sync itself.
type harness struct {
	t      *testing.T
	clk    *clock.Fake
	store  *memStore
	c      *Controller
	cancel context.CancelFunc
	done   chan struct{}
	node   string
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func newHarness(t *testing.T, st *memStore, clk *clock.Fake, opts ...func(*Config)) *harness {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Minute, PassGap: -1,
		Fatal: func(err error) { t.Errorf("fatal: %v", err) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, clk: clk, store: st, c: c, cancel: cancel, done: make(chan struct{})}
	armed := clk.Waiters()
	go func() { _ = c.Run(ctx); close(h.done) }()
	t.Cleanup(func() { h.stop(); c.Close() })
	// Run graces every node (lastSeen = now) before it arms its ticker;
	// a test that advances the clock before that would see the grace land
	// later, at the advanced time (TestUnansweredSyncDoesNotCountAsHeard
	// failed so at load).
	for deadline := time.Now().Add(10 * time.Second); clk.Waiters() <= armed; {
		if time.Now().After(deadline) {
			t.Fatal("the controller's Run did not arm its ticker within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	return h
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

func (h *harness) register(nodeID string, gpus int) string {
	h.t.Helper()
	reg := agentapi.Registration{NodeID: nodeID, Name: "test-node", Provider: "local", CPU: 16, Memory: 64 * model.GiB, Region: "local"}
	for i := 0; i < gpus; i++ {
		reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: "H100", Memory: 80 * model.GiB})
	}
	resp, err := h.c.Register(context.Background(), reg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.node = resp.NodeID
	return resp.NodeID
}

func (h *harness) submit(spec model.JobSpec) *model.Job {
	h.t.Helper()
	spec.Default()
	j, _, err := h.c.Submit(context.Background(), Submission{Project: "default", User: "test", Spec: spec})
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

// sync reports statuses and returns the desired set without waiting.
func (h *harness) sync(statuses ...agentapi.ReplicaStatus) agentapi.SyncResponse {
	h.t.Helper()
	resp, err := h.c.Sync(context.Background(), agentapi.SyncRequest{NodeID: h.node, Statuses: statuses})
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// waitDesired polls until the node's desired set has n replicas.
func (h *harness) waitDesired(n int) agentapi.SyncResponse {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := h.sync()
		if len(resp.Replicas) == n {
			return resp
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("desired set has %d replicas, want %d", len(resp.Replicas), n)
		}
		h.await()
	}
}

// waitJob polls until the job reaches state.
func (h *harness) waitJob(id string, want model.JobState) *model.Job {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		j, err := h.c.Job(id)
		if err != nil {
			h.t.Fatal(err)
		}
		if j.State == want {
			return j
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s is %s (%s), want %s", id, j.State, j.Reason, want)
		}
		h.await()
	}
}

func running(id string) agentapi.ReplicaStatus {
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseRunning, StartedAt: t0}
}

func exited(id string, code int, reason string) agentapi.ReplicaStatus {
	end := t0
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseExited, ExitCode: &code, Reason: reason, StartedAt: t0, EndedAt: &end}
}

// await triggers a pass and waits for the next state change (or a short
// while, as a pass that changes nothing broadcasts nothing).
func (h *harness) await() {
	changed := h.c.Changed()
	h.c.trigger()
	select {
	case <-changed:
	case <-time.After(10 * time.Millisecond):
	}
}
