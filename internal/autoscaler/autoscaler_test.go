package autoscaler

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func offer(prov, region, zone string, gpus int, price float64) model.Offer {
	return model.Offer{Provider: prov, Region: region, Zone: zone, InstanceType: fmt.Sprintf("g%d", gpus), GPU: "H100", GPUCount: gpus, CapacityType: model.OnDemand, PricePerHour: price}
}

func pool(name string, min, max int, idle time.Duration) *model.NodePool {
	return &model.NodePool{Name: name, Spec: model.NodePoolSpec{Provider: model.ProviderSim, Min: min, Max: max, IdleTimeout: model.Duration(idle)}}
}

func sharedPool(name string) *model.NodePool {
	p := pool(name, 0, 10, 0)
	p.Spec.SharedGPUs = true
	return p
}

// launchAll gives every pool a launching driver that sells what the sim
// driver's view of the pool would: the offers of its spec.sim.clouds, or
// every offer.
func launchAll(pools ...*model.NodePool) Drivers {
	d := Drivers{}
	for _, p := range pools {
		pd := PoolDriver{Name: "sim"}
		if p.Spec.Sim != nil && len(p.Spec.Sim.Clouds) > 0 {
			clouds := p.Spec.Sim.Clouds
			pd.Sells = func(o model.Offer) bool { return slices.Contains(clouds, o.Provider) }
		}
		d[p.Name] = pd
	}
	return d
}

var (
	a1 = offer("aws", "us-east-1", "us-east-1a", 8, 20)
	a2 = offer("aws", "us-east-1", "us-east-1b", 8, 21)
	a3 = offer("aws", "us-west-2", "us-west-2a", 8, 19)
	g1 = offer("gcp", "us-central1", "us-central1-a", 8, 18)
)

// brief turns actions into comparable one-liners.
func brief(acts []Action) []string {
	var out []string
	for _, a := range acts {
		switch a.Kind {
		case Launch:
			s := fmt.Sprintf("launch %s %dx%s jobs=%v", a.Pool, a.Count, OfferKey(a.Offer), a.Jobs)
			if a.Failover {
				s += " failover"
			}
			out = append(out, s)
		case Terminate:
			out = append(out, fmt.Sprintf("terminate %s node=%s instance=%s/%s", a.Reason, a.NodeID, a.Provider, a.InstanceID))
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	t.Parallel()
	failedA1 := &Memory{}
	failedA1.Fail(a1, "j1", t0.Add(-time.Minute))
	failedA1A2 := &Memory{}
	failedA1A2.Fail(a1, "j1", t0.Add(-time.Minute))
	failedA1A2.Fail(a2, "j1", t0.Add(-time.Minute))
	expired := &Memory{}
	expired.Fail(a1, "", t0.Add(-time.Hour))
	tests := map[string]struct {
		in   Input
		want []string
	}{
		"launch cheapest candidate": {
			in:   Input{Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1, g1}}}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"},
		},
		"pack two 4-GPU jobs into one 8-GPU instance": {
			in: Input{Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{
				{JobID: "j1", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
				{JobID: "j2", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
				{JobID: "j3", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
			}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1 j2]", "launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j3]"},
		},
		"a GPU share launches into the pool that shares GPUs, a whole GPU into the one that does not": {
			in: Input{Pools: []*model.NodePool{pool("a-whole", 0, 10, 0), sharedPool("b-shared")}, Pending: []Pending{
				{JobID: "j1", Replicas: 1, GPUs: 1, Shared: true, Offers: []model.Offer{a1}},
				{JobID: "j2", Replicas: 1, GPUs: 1, Offers: []model.Offer{a1}},
				{JobID: "j3", Replicas: 1, GPUs: 1, Shared: true, Offers: []model.Offer{a1}},
			}},
			want: []string{"launch b-shared 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1 j3]", "launch a-whole 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j2]"},
		},
		"a GPU share without a pool that shares GPUs launches nothing": {
			in:   Input{Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 1, Shared: true, Offers: []model.Offer{a1}}}},
			want: nil,
		},
		"gang of 2x8 needs two instances": {
			in:   Input{Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 2, GPUs: 8, Offers: []model.Offer{a1}}}},
			want: []string{"launch p 2xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"},
		},
		"pool max stops launches": {
			in: Input{Pools: []*model.NodePool{pool("p", 0, 1, 0)}, Pending: []Pending{
				{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}},
				{JobID: "j2", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}},
			}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"},
		},
		"job covered by a launching node gets no second launch": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 0, 10, 0)},
				Nodes:   []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeLaunching, Offer: a1, LaunchedAt: t0, FreeGPUs: 8, ForJobs: []string{"j1"}}},
				Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}}}},
		},
		"a booting node counts once: the second job waits for it only if it has room for both": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 0, 10, 0)},
				Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeLaunching, Offer: a1, LaunchedAt: t0, FreeGPUs: 8, ForJobs: []string{"j1"}}},
				Pending: []Pending{
					{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}},
					{JobID: "j2", Replicas: 1, GPUs: 1, Offers: []model.Offer{a1}},
				}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j2]"},
		},
		"a booting node with room takes the second job": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 0, 10, 0)},
				Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeLaunching, Offer: a1, LaunchedAt: t0, FreeGPUs: 8, ForJobs: []string{"j1", "gone"}}},
				Pending: []Pending{
					{JobID: "j1", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
					{JobID: "j2", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
					{JobID: "j3", Replicas: 1, GPUs: 4, Offers: []model.Offer{a1}},
				}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j3]"},
		},
		"failover: the next offer by expected cost to finish, not the same zone first": {
			in:   Input{Now: t0, Memory: failedA1, Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1, g1, a2, a3}}}},
			want: []string{"launch p 1xgcp/us-central1/us-central1-a/g8/on-demand jobs=[j1] failover"},
		},
		"failover: past every failing offer": {
			in:   Input{Now: t0, Memory: failedA1A2, Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1, a2, a3, g1}}}},
			want: []string{"launch p 1xaws/us-west-2/us-west-2a/g8/on-demand jobs=[j1] failover"},
		},
		"a full pool leaves the offer to another pool that admits it": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("a-full", 0, 0, 0), pool("b", 0, 10, 0)},
				Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}}}},
			want: []string{"launch b 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"},
		},
		"failover: back-off expires": {
			in:   Input{Now: t0, Memory: expired, Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}}}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"},
		},
		"every offer failing: wait, no launch": {
			in: Input{Now: t0, Memory: failedA1, Pools: []*model.NodePool{pool("p", 0, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}}}},
		},
		"pool does not admit the provider": {
			in: Input{Pools: []*model.NodePool{{Name: "p", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Max: 5, Sim: &model.SimPoolSettings{Clouds: []string{"gcp"}}}}},
				Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1, g1}}}},
			want: []string{"launch p 1xgcp/us-central1/us-central1-a/g8/on-demand jobs=[j1]"},
		},
		"a pool without a launching driver (fixed capacity) is neither launched into nor scaled down": {
			in: Input{Now: t0, Drivers: Drivers{}, Pools: []*model.NodePool{pool("owned", 1, 10, time.Minute)},
				Nodes:   []Node{{ID: "n1", Pool: "owned", Provider: "static", State: model.NodeReady, IdleSince: t0.Add(-time.Hour)}},
				Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1}}}, Offers: []model.Offer{a1}},
		},
		"leak: instance no node owns": {
			in: Input{Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeReady, Busy: true}, {ID: "n2", Pool: "p", Provider: "sim", State: model.NodeLaunching, LaunchedAt: t0}},
				Now: t0, Pools: []*model.NodePool{pool("p", 0, 10, 0)},
				Inventory: map[string][]Instance{"sim": {{Provider: "sim", ID: "i1"}, {Provider: "sim", ID: "i2", Labels: map[string]string{LabelNode: "n2"}}, {Provider: "sim", ID: "i9"}}}},
			want: []string{"terminate leak node= instance=sim/i9"},
		},
		"launch timeout": {
			in: Input{Now: t0, LaunchTimeout: time.Minute, Pools: []*model.NodePool{pool("p", 0, 10, 0)},
				Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeLaunching, Offer: a1, LaunchedAt: t0.Add(-2 * time.Minute), ForJobs: []string{"j1"}}}},
			want: []string{"terminate launch-timeout node=n1 instance=sim/i1"},
		},
		"idle past timeout, never below min": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 1, 10, 5*time.Minute)}, Nodes: []Node{
				{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeReady, IdleSince: t0.Add(-10 * time.Minute)},
				{ID: "n2", Pool: "p", Provider: "sim", InstanceID: "i2", State: model.NodeReady, IdleSince: t0.Add(-20 * time.Minute)},
				{ID: "n3", Pool: "p", Provider: "sim", InstanceID: "i3", State: model.NodeReady, IdleSince: t0.Add(-time.Minute)},
				{ID: "n4", Pool: "p", Provider: "sim", InstanceID: "i4", State: model.NodeReady, Busy: true, IdleSince: t0.Add(-time.Hour)},
			}},
			want: []string{"terminate idle node=n2 instance=sim/i2", "terminate idle node=n1 instance=sim/i1"},
		},
		"idle nodes kept at min": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 2, 10, 5*time.Minute)}, Nodes: []Node{
				{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeReady, IdleSince: t0.Add(-10 * time.Minute)},
				{ID: "n2", Pool: "p", Provider: "sim", InstanceID: "i2", State: model.NodeReady, IdleSince: t0.Add(-20 * time.Minute)},
			}},
		},
		"pool below min launches with no pending job": {
			in:   Input{Now: t0, Pools: []*model.NodePool{pool("p", 2, 10, 0)}, Offers: []model.Offer{a1, a3, g1}},
			want: []string{"launch p 2xgcp/us-central1/us-central1-a/g8/on-demand jobs=[]"},
		},
		"pool below min counts its live nodes": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 2, 10, 0)}, Offers: []model.Offer{a1},
				Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeReady, Busy: true}}},
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[]"},
		},
		"pool below min skips failing and unadmitted offers": {
			in: Input{Now: t0, Memory: failedA1, Offers: []model.Offer{g1, a1, a3},
				Pools: []*model.NodePool{{Name: "p", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Min: 1, Max: 3, Sim: &model.SimPoolSettings{Clouds: []string{"aws"}}}}}},
			want: []string{"launch p 1xaws/us-west-2/us-west-2a/g8/on-demand jobs=[]"},
		},
		"pool at min launches nothing without work": {
			in: Input{Now: t0, Pools: []*model.NodePool{pool("p", 1, 10, 0)}, Offers: []model.Offer{a1},
				Nodes: []Node{{ID: "n1", Pool: "p", Provider: "sim", InstanceID: "i1", State: model.NodeLaunching, Offer: a1, LaunchedAt: t0}}},
		},
		"pool below min launches cheapest admitted": {
			in:   Input{Now: t0, Pools: []*model.NodePool{pool("p", 2, 10, 0)}, Pending: []Pending{{JobID: "j1", Replicas: 1, GPUs: 16, Offers: []model.Offer{a1, g1}}}},
			want: []string{"launch p 2xgcp/us-central1/us-central1-a/g8/on-demand jobs=[]"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tc.in.Drivers == nil {
				tc.in.Drivers = launchAll(tc.in.Pools...)
			}
			got := brief(Decide(tc.in))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuyable: the scheduler ranks only offers a launch could use now — a
// launchable pool with room admits them, and they are not backing off —
// so a candidate respects its pool and failover reaches every offer that
// fits it (issue #14 item 7: an Azure-only pool never launched for an H100
// job whose first five candidates were other clouds').
func TestBuyable(t *testing.T) {
	t.Parallel()
	z1 := offer("azure", "eastus", "eastus-1", 8, 30)
	e1 := offer("aws", "eu-west-1", "eu-west-1a", 8, 17)
	azureOnly := pool("azure", 0, 2, 0)
	azureOnly.Spec.Sim = &model.SimPoolSettings{Clouds: []string{"azure"}}
	usOnly := pool("us", 0, 2, 0)
	usOnly.Spec.Regions.Allow = []string{"us-*"}
	failedA1 := &Memory{}
	failedA1.Fail(a1, "j1", t0.Add(-time.Minute))
	all := []model.Offer{e1, g1, a3, a1, a2, z1}
	tests := map[string]struct {
		pools []*model.NodePool
		size  map[string]int
		mem   *Memory
		want  []model.Offer
	}{
		"an Azure-only pool":       {pools: []*model.NodePool{azureOnly}, want: []model.Offer{z1}},
		"a pool limited to us-*":   {pools: []*model.NodePool{usOnly}, want: []model.Offer{g1, a3, a1, a2}},
		"backing off":              {pools: []*model.NodePool{usOnly}, mem: failedA1, want: []model.Offer{g1, a3, a2}},
		"a pool at its max":        {pools: []*model.NodePool{usOnly}, size: map[string]int{"us": 2}},
		"no pool buys nothing":     {},
		"two pools, each its part": {pools: []*model.NodePool{azureOnly, usOnly}, want: []model.Offer{g1, a3, a1, a2, z1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := Buyable(all, tc.pools, launchAll(tc.pools...), tc.size, tc.mem, t0)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Buyable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMemoryBackoffDoubles(t *testing.T) {
	t.Parallel()
	m := &Memory{}
	var got []time.Duration
	for i := 0; i < 7; i++ {
		got = append(got, m.Fail(a1, "", t0).Sub(t0))
	}
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour, time.Hour}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	m.Succeed(a1)
	if m.failing(OfferKey(a1), t0) {
		t.Error("offer still failing after Succeed")
	}
}

// TestMemoryForgetsJobsThatNoLongerWait: the failover memory keeps the
// jobs still waiting and drops the others, without touching back-offs.
func TestMemoryForgetsJobsThatNoLongerWait(t *testing.T) {
	t.Parallel()
	m := &Memory{}
	m.Fail(a1, "waits", t0)
	m.Remember("ran", a1)
	m.Remember("ended", a1)
	m.ForgetJobs(func(job string) bool { return job == "waits" })
	if _, ok := m.jobLast("waits"); !ok {
		t.Error("the waiting job's failed offer was forgotten")
	}
	for _, job := range []string{"ran", "ended"} {
		if _, ok := m.jobLast(job); ok {
			t.Errorf("job %s no longer waits but its failed offer is remembered", job)
		}
	}
	if !m.failing(OfferKey(a1), t0) {
		t.Error("forgetting jobs lifted the offer's back-off")
	}
}

// benchInput is 10,000 pending jobs (1–16 GPUs, some gangs) whose
// candidates come from the whole catalog, 1,000 nodes and their inventory.
func benchInput(tb testing.TB) Input {
	cat, err := catalog.Load()
	if err != nil {
		tb.Fatal(err)
	}
	offers := cat.Offers()
	sort.SliceStable(offers, func(i, j int) bool { return offers[i].PricePerGPUHour() < offers[j].PricePerGPUHour() })
	byGPUs := map[int][]model.Offer{}
	for _, need := range []int{1, 2, 4, 8} {
		for _, o := range offers {
			if o.GPUCount >= need && len(byGPUs[need]) < 5 {
				byGPUs[need] = append(byGPUs[need], o)
			}
		}
	}
	in := Input{Now: t0, Pools: []*model.NodePool{pool("spot", 0, 100000, 0), {Name: "od", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Max: 100000, CapacityTypes: []model.CapacityType{model.OnDemand, model.Spot}}}},
		Inventory: map[string][]Instance{}}
	in.Drivers = launchAll(in.Pools...)
	for i := range 10000 {
		g := []int{1, 2, 4, 8, 8}[i%5]
		reps := 1
		if i%10 == 0 {
			reps = 2 // a 16-GPU gang
		}
		in.Pending = append(in.Pending, Pending{JobID: fmt.Sprintf("j%05d", i), Replicas: reps, GPUs: g, Offers: byGPUs[g]})
	}
	for i := range 1000 {
		id := fmt.Sprintf("n%04d", i)
		in.Nodes = append(in.Nodes, Node{ID: id, Pool: "od", Provider: "sim", InstanceID: "i" + id, State: model.NodeReady, Busy: i%2 == 0, IdleSince: t0.Add(-time.Hour), Offer: offers[i%len(offers)]})
		in.Inventory["sim"] = append(in.Inventory["sim"], Instance{Provider: "sim", ID: "i" + id})
	}
	m := &Memory{}
	for i := 0; i < len(offers); i += 7 {
		m.Fail(offers[i], "", t0)
	}
	in.Memory = m
	return in
}

func BenchmarkDecide(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	for b.Loop() {
		Decide(in)
	}
}

// TestUnavailable: an offer without capacity is skipped by every pool
// until its TTL ends, and the next offer by cost is launched; a region out
// of quota is skipped by its pool only.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ice := &Memory{}
	ice.Mark(Unavailable{Kind: UnavailableCapacity, Pool: "p", Offer: a1, Since: t0, Until: t0.Add(CapacityTTL)})
	quota := &Memory{}
	quota.Mark(Unavailable{Kind: UnavailableQuota, Pool: "p", Offer: a1, Since: t0, Until: t0.Add(QuotaTTL)})
	pending := []Pending{{JobID: "j1", Replicas: 1, GPUs: 8, Offers: []model.Offer{a1, a2, g1}}}
	tests := map[string]struct {
		mem   *Memory
		pools []*model.NodePool
		now   time.Time
		want  []string
	}{
		"no capacity: the next offer by cost": {mem: ice, pools: []*model.NodePool{pool("p", 0, 10, 0)}, now: t0,
			want: []string{"launch p 1xaws/us-east-1/us-east-1b/g8/on-demand jobs=[j1]"}},
		"no capacity: any pool skips it": {mem: ice, pools: []*model.NodePool{pool("q", 0, 10, 0)}, now: t0,
			want: []string{"launch q 1xaws/us-east-1/us-east-1b/g8/on-demand jobs=[j1]"}},
		"no capacity: tried again after the TTL": {mem: ice, pools: []*model.NodePool{pool("p", 0, 10, 0)}, now: t0.Add(CapacityTTL),
			want: []string{"launch p 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"}},
		"quota: the pool skips the whole region": {mem: quota, pools: []*model.NodePool{pool("p", 0, 10, 0)}, now: t0,
			want: []string{"launch p 1xgcp/us-central1/us-central1-a/g8/on-demand jobs=[j1]"}},
		"quota: another pool still launches there": {mem: quota, pools: []*model.NodePool{pool("p", 0, 0, 0), pool("q", 0, 10, 0)}, now: t0,
			want: []string{"launch q 1xaws/us-east-1/us-east-1a/g8/on-demand jobs=[j1]"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := Input{Now: tc.now, Memory: tc.mem.Clone(), Pools: tc.pools, Drivers: launchAll(tc.pools...), Pending: pending}
			if diff := cmp.Diff(tc.want, brief(Decide(in)), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			var buy []string
			for _, o := range Buyable(pending[0].Offers, tc.pools, launchAll(tc.pools...), nil, tc.mem, tc.now) {
				buy = append(buy, OfferKey(o))
			}
			if len(buy) == 0 || !slices.Contains(tc.want, "launch "+tc.pools[len(tc.pools)-1].Name+" 1x"+buy[0]+" jobs=[j1]") {
				t.Errorf("Buyable ranks %v first, want the offer Decide launches (%v)", buy, tc.want)
			}
		})
	}
}
