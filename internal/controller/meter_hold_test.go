package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// twoNodes is a fleet of two 1-GPU nodes at $1 a second each, with project
// slow's job handed to n1's agent and project fast's to n2's, neither
// started; fast has a $50 budget whose 50% threshold notifies.
type twoNodes struct {
	t            *testing.T
	clk          *clock.Fake
	st           *memStore
	prices       cost.PriceTable
	slow, fast   string // job ids
	slowR, fastR string // their replicas' ids
}

func newTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,n1,3600\nnode,n2,3600\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := &twoNodes{t: t, clk: clock.NewFake(t0), st: newMemStore(), prices: prices}
	c := f.leader()
	ctx := context.Background()
	budgets := &manifest.Set{Budgets: []manifest.Budget{{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget,
		Metadata: manifest.ObjectMeta{Name: "fast"}, Spec: manifest.BudgetSpec{
			Scope: model.BudgetScope{Project: "fast"}, Amount: 100 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
			Thresholds: []model.BudgetThreshold{{Percent: 50, Action: model.ActionNotify}}}}}}
	if _, err := c.ApplyFleet(ctx, budgets, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := c.CostPass(ctx); err != nil { // starts the meter's clock
		t.Fatal(err)
	}
	// One job per node: a node is registered, then its job submitted
	// and placed, so each lands on its own node.
	for _, n := range []struct{ node, project string }{{"n1", "slow"}, {"n2", "fast"}} {
		reg := agentapi.Registration{NodeID: n.node, Name: n.node, Provider: "static", CPU: 16, Memory: 64 * model.GiB,
			GPUs: []model.GPU{{Index: 0, UUID: n.node + "-gpu", Model: "H100", Memory: 80 * model.GiB}}}
		if _, err := c.Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
		spec := cmdSpec(1)
		spec.Default()
		j, _, err := c.Submit(ctx, Submission{Project: n.project, User: "test", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
		resp := f.sync(c, n.node)
		if len(resp.Replicas) != 1 {
			t.Fatalf("%s's desired set %+v, want its one replica", n.node, resp)
		}
		if n.node == "n1" {
			f.slow, f.slowR = j.ID, resp.Replicas[0].ID
		} else {
			f.fast, f.fastR = j.ID, resp.Replicas[0].ID
		}
	}
	return f
}

// leader builds a controller on the fleet's store, as a new leader would.
func (f *twoNodes) leader() *Controller {
	return newTermController(f.t, f.st, f.clk, f.prices, time.Minute)
}

// sync is node's agent syncing with c, sending its clock (an agent that
// reports its starts with its own times).
func (f *twoNodes) sync(c *Controller, node string, s ...agentapi.ReplicaStatus) agentapi.SyncResponse {
	f.t.Helper()
	sent := f.clk.Now()
	resp, err := c.Sync(context.Background(), agentapi.SyncRequest{NodeID: node, SentAt: &sent, Statuses: s})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

func (f *twoNodes) pass(c *Controller) {
	f.t.Helper()
	if err := c.CostPass(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// runToEnd has both agents report their replicas running (n1's from
// slowStart, n2's from start), runs a pass, ends both 10 s later, runs the
// pass after, and checks that each job is billed every second of its run
// exactly once.
func (f *twoNodes) runToEnd(t *testing.T, c *Controller, slowStart, start time.Time) {
	t.Helper()
	f.sync(c, "n1", seenRunning(f.slowR, slowStart, f.clk.Now()))
	f.sync(c, "n2", seenRunning(f.fastR, start, f.clk.Now()))
	f.pass(c)
	f.clk.Advance(10 * time.Second)
	end := f.clk.Now()
	f.sync(c, "n1", exitedAt(f.slowR, 0, "", slowStart, end))
	f.sync(c, "n2", exitedAt(f.fastR, 0, "", start, end))
	f.clk.Advance(5 * time.Second)
	f.pass(c)
	checkMeteredOnce(t, f.st, f.slow, slowStart, end)
	checkMeteredOnce(t, f.st, f.fast, start, end)
}

func seenRunning(id string, start, seen time.Time) agentapi.ReplicaStatus {
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen}
}

// TestSlowNodeHoldsOnlyItself: n1's agent syncs but is slow to start its
// replica (a hung image pull, a loaded machine): the replica is starting,
// and its start may yet be reported with a time in the past, so the meter
// must not bill n1 past what it knows. Meanwhile project fast's job runs
// on n2, its agent seeing it alive at every sync. n2's rows, fast's spend
// and fast's budget firing must keep up with n2's observations, as if n1
// were not there (a global hold delays them by up to the report lag); and
// n1's start, reported a minute late with its real time, is still billed
// from then, each of n1's seconds once.
func TestSlowNodeHoldsOnlyItself(t *testing.T) {
	f := newTwoNodes(t)
	c := f.leader()
	f.sync(c, "n1") // n1's agent knows its replica, which starts... slowly
	f.clk.Advance(time.Second)
	start := f.clk.Now()
	f.sync(c, "n2", seenRunning(f.fastR, start, start))
	key := model.FiredKey{Budget: "fast", Threshold: 0, PeriodStart: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	var slowStart time.Time
	for i := 1; i <= 8; i++ {
		f.clk.Advance(10 * time.Second)
		now := f.clk.Now()
		if i == 3 {
			slowStart = now.Add(-5 * time.Second) // n1's replica starts, unreported
		}
		f.sync(c, "n1")
		f.sync(c, "n2", seenRunning(f.fastR, start, now))
		f.pass(c)
		ran := now.Sub(start).Seconds()
		if got := allocatedGPUSeconds(f.st, f.fast); got != ran {
			t.Fatalf("pass %d, %.0f s into fast's run (seen alive now): fast is billed %.0f GPU-seconds, want %.0f", i, ran, got, ran)
		}
		if fired := c.cost.budgets.Fired()[key]; fired != (ran >= 50) {
			t.Fatalf("pass %d: fast has spent $%.0f of its $100 budget and its 50%% threshold fired: %v", i, ran, fired)
		}
	}
	c.mu.Lock()
	held, behind := c.cost.behind["n1"]
	c.mu.Unlock()
	if !behind || !held.Before(slowStart) {
		t.Fatalf("n1 is metered to %v (behind %v), want held before its unreported start %s", held, behind, slowStart.Format(time.TimeOnly))
	}
	// n1's agent reports the start at last, then both jobs end.
	f.clk.Advance(5 * time.Second)
	f.runToEnd(t, c, slowStart, start)
	c.mu.Lock()
	to, left := c.cost.meteredTo, len(c.cost.behind)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d nodes still behind after n1's replica ended", left)
	}
	for _, n := range []string{"n1", "n2"} {
		checkNodeTiled(t, f.st, n, to)
	}
}

// TestHeldNodeAcrossTakeover: n1 is held back (its replica starting)
// while n2 is metered on; the leader dies. The new leader goes on from
// where its predecessor left each node, as the store says: n1's start,
// reported to it with a time before the old leader's last pass, is billed
// from then, and neither node has a second billed twice or left out.
func TestHeldNodeAcrossTakeover(t *testing.T) {
	heldAcrossTakeover(t, nil)
}

// TestUnreadableMarksAcrossTakeover: as TestHeldNodeAcrossTakeover, but the
// stored marks of the held nodes cannot be read (one entry, or the whole
// value). The new leader takes n1's mark from its last ledger row rather
// than skip it: no second of n1's is left unbilled or billed twice.
func TestUnreadableMarksAcrossTakeover(t *testing.T) {
	for name, bad := range map[string]string{
		"entry": `{"n1":"soon"}`,
		"value": `{"n1":`,
	} {
		t.Run(name, func(t *testing.T) {
			heldAcrossTakeover(t, func(meta map[string]string) { meta[store.MeterBehindKey] = bad })
		})
	}
}

// heldAcrossTakeover is TestHeldNodeAcrossTakeover, with tamper (if not
// nil) changing the store's meta before the new leader loads it.
func heldAcrossTakeover(t *testing.T, tamper func(meta map[string]string)) {
	f := newTwoNodes(t)
	old := f.leader()
	f.sync(old, "n1")
	f.clk.Advance(time.Second)
	start := f.clk.Now()
	f.sync(old, "n2", seenRunning(f.fastR, start, start))
	f.clk.Advance(10 * time.Second)
	slowStart := f.clk.Now() // unreported to the old leader
	for range 3 {
		f.clk.Advance(10 * time.Second)
		f.sync(old, "n1")
		f.sync(old, "n2", seenRunning(f.fastR, start, f.clk.Now()))
		f.pass(old)
	}
	old.mu.Lock()
	held, behind := old.cost.behind["n1"]
	old.mu.Unlock()
	if !behind || !held.Before(slowStart) {
		t.Fatalf("n1 is metered to %v (behind %v), want held before its start %s", held, behind, slowStart.Format(time.TimeOnly))
	}
	old.Close()
	f.clk.Advance(5 * time.Second)
	if tamper != nil {
		f.st.mu.Lock()
		tamper(f.st.meta)
		f.st.mu.Unlock()
	}

	c := f.leader()
	c.mu.Lock()
	got := c.cost.behind["n1"]
	c.mu.Unlock()
	if !got.Equal(held) {
		t.Fatalf("the new leader has n1 metered to %s, its predecessor %s", got.Format(time.TimeOnly), held.Format(time.TimeOnly))
	}
	f.pass(c) // before any agent has synced with it
	f.clk.Advance(2 * time.Second)
	f.runToEnd(t, c, slowStart, start)
	c.mu.Lock()
	to := c.cost.meteredTo
	c.mu.Unlock()
	for _, n := range []string{"n1", "n2"} {
		checkNodeTiled(t, f.st, n, to)
	}
	if v := f.st.meta[store.MeterBehindKey]; v != "{}" {
		t.Errorf("stored %s = %q once no node is held, want {}", store.MeterBehindKey, v)
	}
}

// checkNodeTiled checks that node's idle rows (one per node and window,
// each the node's whole window) cover every second from its first row up
// to to exactly once, and that its rows add up to $1 a second of it.
func checkNodeTiled(t *testing.T, st *memStore, node string, to time.Time) {
	t.Helper()
	st.mu.Lock()
	ledger := append([]model.LedgerEntry(nil), st.ledger...)
	st.mu.Unlock()
	seen := map[int64]bool{}
	from := to
	var sum model.Money
	for _, e := range ledger {
		if e.NodeID != node {
			continue
		}
		sum += e.Cost
		if e.Kind != model.LedgerIdle {
			continue
		}
		from = minTime(from, e.From)
		for s := e.From.Unix(); s < e.To.Unix(); s++ {
			if seen[s] {
				t.Errorf("%s: second %s metered twice", node, time.Unix(s, 0).UTC().Format(time.TimeOnly))
			}
			seen[s] = true
		}
	}
	for s := from.Unix(); s < to.Unix(); s++ {
		if !seen[s] {
			t.Errorf("%s: second %s never metered", node, time.Unix(s, 0).UTC().Format(time.TimeOnly))
		}
	}
	if want := model.FromDollars(to.Sub(from).Seconds()); sum != want {
		t.Errorf("%s's rows add up to %s over [%s, %s), want its bill %s", node, sum.USD(), from.Format(time.TimeOnly), to.Format(time.TimeOnly), want.USD())
	}
}
