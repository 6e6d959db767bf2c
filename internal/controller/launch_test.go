package controller

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// fakeCloud is a launching driver (no FixedCapacity) that answers each
// offer's launches with the error set for it, and blocks launches while
// hold is set (a slow cloud API).
type fakeCloud struct {
	offers []model.Offer

	mu         sync.Mutex
	errs       map[string]error // offer key → error
	hold       chan struct{}
	launched   []string // offer keys, in call order
	insts      []provider.Instance
	terminated []string // instance ids, in call order
}

func (f *fakeCloud) Name() string { return "cloud" }
func (f *fakeCloud) Offers(context.Context) ([]model.Offer, error) {
	return append([]model.Offer(nil), f.offers...), nil
}

// Terminate removes the instance from the inventory, recording its id;
// an unknown id is success (already gone).
func (f *fakeCloud) Terminate(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.terminated = append(f.terminated, id)
	f.insts = slices.DeleteFunc(f.insts, func(in provider.Instance) bool { return in.ID == id })
	return nil
}
func (f *fakeCloud) List(context.Context) ([]provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]provider.Instance(nil), f.insts...), nil
}

func (f *fakeCloud) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	k := autoscaler.OfferKey(req.Offer)
	f.mu.Lock()
	f.launched = append(f.launched, k)
	hold, err := f.hold, f.errs[k]
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return provider.Instance{}, ctx.Err()
		}
	}
	if err != nil {
		return provider.Instance{}, err
	}
	in := provider.Instance{ID: "i-" + req.Token, Offer: req.Offer, State: provider.StatePending, Labels: req.Labels}
	f.mu.Lock()
	f.insts = append(f.insts, in)
	f.mu.Unlock()
	return in, nil
}

func (f *fakeCloud) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.launched...)
}

// Offers of the fake cloud, cheapest first by cost to finish: two zones of
// one region, then another region.
var (
	cloudA = model.Offer{Provider: "cloud", Region: "r1", Zone: "r1a", InstanceType: "g8", GPU: "H100", GPUCount: 8, VCPUs: 96, Memory: 1024 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 10}
	cloudB = model.Offer{Provider: "cloud", Region: "r1", Zone: "r1b", InstanceType: "g8", GPU: "H100", GPUCount: 8, VCPUs: 96, Memory: 1024 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 11}
	cloudC = model.Offer{Provider: "cloud", Region: "r2", Zone: "r2a", InstanceType: "g8", GPU: "H100", GPUCount: 8, VCPUs: 96, Memory: 1024 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 12}
)

// newCloudController is a controller, not running, on st whose pool "gpu"
// launches on f through the registry, as the server wires a driver.
func newCloudController(t *testing.T, clk *clock.Fake, st store.Store, f provider.Provider) *Controller {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Driver{Name: "cloud", New: func(*model.NodePool) (provider.Provider, error) { return f, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		Scale: ScaleConfig{Drivers: reg, LaunchTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: model.NodePoolSpec{Provider: "cloud", Max: 4}}}
	c.mu.Unlock()
	return c
}

func openSQLite(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLaunchErrorKinds: insufficient capacity marks the offer unavailable
// for its TTL and the next cycle fails over to the next offer by cost;
// a quota marks the pool's region, so the failover leaves the region;
// the unavailability is in explain and survives a restart on the same
// database; after the TTL the offer is tried again.
func TestLaunchErrorKinds(t *testing.T) {
	tests := map[string]struct {
		err        error
		wantCalls  []model.Offer // launches, in order, over two cycles
		wantKind   string
		wantRegion bool
		ttl        time.Duration
	}{
		"insufficient capacity": {err: &provider.InsufficientCapacityError{Offer: cloudA}, wantCalls: []model.Offer{cloudA, cloudB},
			wantKind: model.UnavailableCapacity, ttl: autoscaler.CapacityTTL},
		"quota exceeded": {err: &provider.QuotaError{Offer: cloudA, Quota: "cloud H100 GPUs", Limit: 8, Used: 8, Requested: 8}, wantCalls: []model.Offer{cloudA, cloudC},
			wantKind: model.UnavailableQuota, wantRegion: true, ttl: autoscaler.QuotaTTL},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			db := filepath.Join(t.TempDir(), "gpufleet.db")
			st := openSQLite(t, db)
			f := &fakeCloud{offers: []model.Offer{cloudA, cloudB, cloudC}, errs: map[string]error{autoscaler.OfferKey(cloudA): tc.err}}
			c := newCloudController(t, clk, st, f)
			j := submitTrain(t, c, func(*model.JobSpec) {})
			for range 2 {
				if err := c.pass(ctx); err != nil {
					t.Fatal(err)
				}
				c.scaleWait(ctx)
			}
			var want []string
			for _, o := range tc.wantCalls {
				want = append(want, autoscaler.OfferKey(o))
			}
			if diff := cmp.Diff(want, f.calls()); diff != "" {
				t.Fatalf("launches (-want +got):\n%s", diff)
			}
			e, err := c.Explain(j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Unavailable) != 1 || e.Unavailable[0].Kind != tc.wantKind || e.Unavailable[0].Pool != "gpu" || !e.Unavailable[0].Until.Equal(t0.Add(tc.ttl)) {
				t.Fatalf("explain's unavailable = %+v, want one %s entry for pool gpu until %s", e.Unavailable, tc.wantKind, t0.Add(tc.ttl))
			}
			failover := false
			for _, ev := range c.Events(EventFilter{}) {
				failover = failover || ev.Kind == model.EventFailover
			}
			if !failover {
				t.Error("no failover event")
			}

			// A restart on the same database keeps it.
			c.Close()
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st2 := openSQLite(t, db)
			defer st2.Close()
			f2 := &fakeCloud{offers: f.offers}
			c2 := newCloudController(t, clk, st2, f2)
			defer c2.Close()
			if diff := cmp.Diff(e.Unavailable, c2.Unavailable()); diff != "" {
				t.Errorf("unavailable after a restart (-before +after):\n%s", diff)
			}
			// The job got its node; a second job does not try the
			// unavailable offer (or region) until the TTL has passed.
			j2 := submitTrain(t, c2, func(*model.JobSpec) {})
			if err := c2.pass(ctx); err != nil {
				t.Fatal(err)
			}
			c2.scaleWait(ctx)
			calls := f2.calls()
			if len(calls) == 0 || calls[0] == autoscaler.OfferKey(cloudA) || tc.wantRegion && calls[0] != autoscaler.OfferKey(cloudC) {
				t.Errorf("after the restart job %s launched %v, skipping %s", j2.ID, calls, autoscaler.OfferKey(cloudA))
			}
			clk.Advance(tc.ttl)
			if got := c2.Unavailable(); len(got) != 0 {
				t.Errorf("still unavailable after the TTL: %+v", got)
			}
		})
	}
}

// TestScaleDoesNotWaitForTheCloud: a launch that hangs in the provider
// does not hold the scale cycle or the scheduling pass; the node is
// launching meanwhile and the next cycles do not launch again for the same
// job; once the provider answers, the node has its instance.
func TestScaleDoesNotWaitForTheCloud(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	f := &fakeCloud{offers: []model.Offer{cloudA, cloudB}, hold: make(chan struct{})}
	c := newCloudController(t, clk, newMemStore(), f)
	defer c.Close()
	submitTrain(t, c, func(*model.JobSpec) {})
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			c.scale(ctx)
			if err := c.pass(ctx); err != nil {
				t.Error(err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the scale loop waited for a hung launch")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(f.calls()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if diff := cmp.Diff([]string{autoscaler.OfferKey(cloudA)}, f.calls()); diff != "" {
		t.Fatalf("launches while the first hangs (-want +got):\n%s", diff)
	}
	launching := func() (n int, instance string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nd := range c.st.Nodes() {
			if nd.State == model.NodeLaunching {
				n++
				instance = nd.Labels[model.LabelInstance]
			}
		}
		return n, instance
	}
	if n, inst := launching(); n != 1 || inst != "" {
		t.Fatalf("%d launching nodes (instance %q), want 1 without an instance yet", n, inst)
	}
	close(f.hold)
	c.WaitLaunches()
	if n, inst := launching(); n != 1 || inst == "" {
		t.Fatalf("%d launching nodes (instance %q), want 1 with its instance", n, inst)
	}
}

// pricedCloud is a fakeCloud with live prices.
type pricedCloud struct {
	*fakeCloud
	asOf   time.Time
	prices []model.Offer
}

func (p *pricedCloud) Prices(context.Context) ([]model.Offer, time.Time, error) {
	return p.prices, p.asOf, nil
}

var _ provider.PriceSource = (*pricedCloud)(nil)

// TestLivePricesOverrideTheCatalog: a driver that is a PriceSource prices
// its offers itself; the scheduler ranks them at that price, dated, so the
// candidate and the launch use it.
func TestLivePricesOverrideTheCatalog(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	f := &fakeCloud{offers: []model.Offer{cloudA, cloudB}}
	readAt := t0.Add(-time.Minute)
	cheaperB := cloudB
	cheaperB.PricePerHour = 5 // live: B is now cheaper than A's catalog 10
	p := &pricedCloud{fakeCloud: f, asOf: readAt, prices: []model.Offer{cheaperB}}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Driver{Name: "cloud", New: func(*model.NodePool) (provider.Provider, error) { return p, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, Config{Store: newMemStore(), Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) }, Scale: ScaleConfig{Drivers: reg}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: model.NodePoolSpec{Provider: "cloud", Max: 4}}}
	c.mu.Unlock()
	j := submitTrain(t, c, func(s *model.JobSpec) { s.Estimate.Runtime = model.Duration(time.Hour) })
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := c.Explain(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Candidate == nil || len(e.Candidate.Offers) != 2 {
		t.Fatalf("candidate = %+v", e.Candidate)
	}
	best := e.Candidate.Offers[0]
	if autoscaler.OfferKey(best) != autoscaler.OfferKey(cloudB) || best.PricePerHour != 5 || !best.PriceAsOf.Equal(readAt) {
		t.Errorf("best candidate = %s at $%.2f (as of %s), want %s at the live $5 as of %s", autoscaler.OfferKey(best), best.PricePerHour, best.PriceAsOf, autoscaler.OfferKey(cloudB), readAt)
	}
	if other := e.Candidate.Offers[1]; other.PricePerHour != 10 || !other.PriceAsOf.IsZero() {
		t.Errorf("an offer without a live price = $%.2f as of %s, want the catalog's $10, undated", other.PricePerHour, other.PriceAsOf)
	}
	c.scaleWait(ctx)
	if diff := cmp.Diff([]string{autoscaler.OfferKey(cloudB)}, f.calls()); diff != "" {
		t.Errorf("launches (-want +got):\n%s", diff)
	}
}
