package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// memoWorld is a random autoscaler input that a test changes step by
// step, one field Decide reads at a time, as cycles of a scale loop
// would see it.
type memoWorld struct {
	r      *rand.Rand
	offers []model.Offer
	in     autoscaler.Input
	view   uint64
}

func newMemoWorld(seed uint64) *memoWorld {
	r := rand.New(rand.NewPCG(seed, 21))
	w := &memoWorld{r: r, view: 1}
	for i, z := range []string{"a", "b", "c", "d"} {
		w.offers = append(w.offers, model.Offer{Provider: "aws", Region: "us-east-1", Zone: "us-east-1" + z, InstanceType: fmt.Sprintf("g%d", 1<<i),
			GPU: "H100", GPUCount: 1 << i, CapacityType: model.OnDemand, PricePerHour: float64(10 + i)})
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	in := autoscaler.Input{Now: now, Offers: w.offers, LaunchTimeout: 10 * time.Minute, Inventory: map[string][]autoscaler.Instance{},
		Memory: &autoscaler.Memory{}, Drivers: autoscaler.Drivers{}}
	for i := range 1 + r.IntN(3) {
		p := &model.NodePool{Name: fmt.Sprintf("p%d", i), Revision: 1, Spec: model.NodePoolSpec{Provider: model.ProviderSim,
			Min: r.IntN(2), Max: 1 + r.IntN(3), IdleTimeout: model.Duration(time.Duration(5+r.IntN(20)) * time.Minute)}}
		in.Pools = append(in.Pools, p)
		in.Drivers[p.Name] = autoscaler.PoolDriver{Name: "sim"}
	}
	w.in = in
	for range r.IntN(4) {
		w.addNode()
	}
	for range r.IntN(3) {
		w.addPending()
	}
	return w
}

func (w *memoWorld) addNode() {
	r, in := w.r, &w.in
	id := fmt.Sprintf("n%d", len(in.Nodes)+r.IntN(1000)*10)
	states := []model.NodeState{model.NodeLaunching, model.NodeReady, model.NodeDraining}
	n := autoscaler.Node{ID: id, Pool: in.Pools[r.IntN(len(in.Pools))].Name, Provider: "sim", InstanceID: "i-" + id, State: states[r.IntN(3)],
		Offer: w.offers[r.IntN(len(w.offers))], LaunchedAt: in.Now.Add(-time.Duration(r.IntN(8)) * time.Minute), Busy: r.IntN(2) == 0,
		IdleSince: in.Now.Add(-time.Duration(r.IntN(8)) * time.Minute), FreeGPUs: 1 + r.IntN(8)}
	in.Nodes = append(in.Nodes, n)
	in.Inventory["sim"] = append(in.Inventory["sim"], autoscaler.Instance{Provider: "sim", ID: n.InstanceID})
}

func (w *memoWorld) addPending() {
	r, in := w.r, &w.in
	pj := autoscaler.Pending{JobID: fmt.Sprintf("j%d", r.IntN(100)), Replicas: 1 + r.IntN(2), GPUs: 1 + r.IntN(4)}
	for _, o := range w.offers {
		if r.IntN(2) == 0 {
			pj.Offers = append(pj.Offers, o)
			pj.Costs = append(pj.Costs, o.PricePerHour)
		}
	}
	in.Pending = append(in.Pending, pj)
}

// next returns the next cycle's input: a fresh copy (the memo keeps the
// last one), the clock moved on by up to 3 minutes, and with probability
// one half one change, whose kind it returns ("" for none).
func (w *memoWorld) next() (autoscaler.Input, string) {
	r := w.r
	in := w.in
	in.Now = in.Now.Add(time.Duration(r.IntN(180)) * time.Second)
	in.Pools = slices.Clone(in.Pools)
	in.Nodes = slices.Clone(in.Nodes)
	in.Pending = slices.Clone(in.Pending)
	in.Inventory = maps.Clone(in.Inventory)
	in.Inventory["sim"] = slices.Clone(in.Inventory["sim"])
	in.Memory = in.Memory.Clone()
	w.in = in
	kind := ""
	if r.IntN(2) == 0 {
		return w.in, kind
	}
	i := r.IntN(12)
	switch {
	case i == 0:
		kind = "pool max"
		k := r.IntN(len(in.Pools))
		p := *in.Pools[k]
		p.Spec.Max = r.IntN(4)
		w.in.Pools[k] = &p
	case i == 1:
		kind = "pool min"
		k := r.IntN(len(in.Pools))
		p := *in.Pools[k]
		p.Spec.Min = r.IntN(3)
		w.in.Pools[k] = &p
	case i == 2:
		kind = "node added"
		w.addNode()
	case i == 3 && len(in.Nodes) > 0:
		kind = "node state"
		k := r.IntN(len(in.Nodes))
		w.in.Nodes[k].State = []model.NodeState{model.NodeLaunching, model.NodeReady, model.NodeDraining, model.NodeTerminated}[r.IntN(4)]
	case i == 4 && len(in.Nodes) > 0:
		k := r.IntN(len(in.Nodes))
		if r.IntN(2) == 0 {
			kind = "node busy"
			w.in.Nodes[k].Busy = !in.Nodes[k].Busy
		} else {
			// An idle ready node's idle time starts earlier.
			for k := range in.Nodes {
				if n := &w.in.Nodes[k]; n.State == model.NodeReady && !n.Busy {
					kind = "node idle since"
					n.IdleSince = in.Now.Add(-time.Hour)
				}
			}
		}
	case i == 5:
		kind = "pending added"
		w.addPending()
	case i == 6 && len(in.Pending) > 0:
		kind = "pending removed"
		k := r.IntN(len(in.Pending))
		w.in.Pending = slices.Delete(w.in.Pending, k, k+1)
	case i == 7 && len(in.Pending) > 0:
		kind = "pending offers"
		k := r.IntN(len(in.Pending))
		pj := &w.in.Pending[k]
		pj.Offers = slices.Clone(pj.Offers)
		pj.Offers = append(pj.Offers, w.offers[r.IntN(len(w.offers))])
		pj.Costs = append(slices.Clone(pj.Costs), 1)
	case i == 8:
		kind = "leak"
		w.in.Inventory["sim"] = append(w.in.Inventory["sim"], autoscaler.Instance{Provider: "sim", ID: fmt.Sprintf("leak%d", r.IntN(1000))})
	case i == 9:
		kind = "back-off"
		// An offer backing off succeeds (it may be bought again), or
		// one fails.
		o := w.offers[r.IntN(len(w.offers))]
		for _, b := range w.offers {
			if _, ok := w.in.Memory.Until[autoscaler.OfferKey(b)]; ok {
				o = b
			}
		}
		if _, ok := w.in.Memory.Until[autoscaler.OfferKey(o)]; ok {
			w.in.Memory.Succeed(o)
		} else {
			w.in.Memory.Fail(o, "", in.Now)
		}
	case i == 10:
		kind = "unavailable"
		// An outage of every offer ends early (a restart forgot
		// it), or one starts.
		if len(w.in.Memory.Unavailable) > 0 {
			clear(w.in.Memory.Unavailable)
		} else {
			for _, o := range w.offers {
				w.in.Memory.Mark(autoscaler.Unavailable{Kind: autoscaler.UnavailableCapacity, Offer: o, Since: in.Now, Until: in.Now.Add(autoscaler.CapacityTTL)})
			}
		}
	case i == 11:
		kind = "drivers"
		// A new launch view: a pool's driver stops selling, or sells
		// again.
		w.view++
		k := in.Pools[r.IntN(len(in.Pools))].Name
		w.in.Drivers = maps.Clone(in.Drivers)
		if _, ok := w.in.Drivers[k]; ok {
			delete(w.in.Drivers, k)
		} else {
			w.in.Drivers[k] = autoscaler.PoolDriver{Name: "sim"}
		}
	}
	return w.in, kind
}

// TestDecideMemoSkipsOnlyWhatDecidesNothing runs 400 random worlds through
// 60 scale cycles each, changing one input at a time, and calls Decide at
// every cycle: wherever the memo would have skipped it, Decide must
// decide nothing. It fails when the memo ignores an input Decide reads,
// or a timer (NextChange), and when it skips too little to matter.
func TestDecideMemoSkipsOnlyWhatDecidesNothing(t *testing.T) {
	skipped, caught := 0, map[string]int{}
	for seed := range 400 {
		w := newMemoWorld(uint64(seed))
		var m decideMemo
		for step := range 60 {
			in, kind := w.next()
			skip := m.current(in, w.view)
			acts := autoscaler.Decide(in)
			if skip {
				if len(acts) > 0 {
					t.Fatalf("world %d step %d (change %q): the memo skips a cycle that decides %d actions, first %s %s",
						seed, step, kind, len(acts), acts[0].Kind, acts[0].Reason)
				}
				skipped++
				continue
			}
			if m.ok && len(acts) > 0 {
				// The memo held a quiet cycle and this one acts: the
				// comparison (or the timer) is what kept it from a
				// wrong skip.
				caught[kind]++
			}
			m.record(in, w.view, acts)
			// What a launch or termination changes shows in the next
			// cycle's nodes; here the world goes on as it was, so
			// the same actions come again until a change or timer.
		}
	}
	t.Logf("skipped %d cycles; cycles that act after a quiet one, by the change before them: %v", skipped, caught)
	if skipped < 500 {
		t.Fatalf("the memo skipped only %d cycles", skipped)
	}
	for _, kind := range []string{"", "pool max", "pool min", "node added", "node state", "node busy", "node idle since", "pending added", "pending offers", "leak", "back-off", "unavailable", "drivers"} {
		if caught[kind] == 0 {
			t.Errorf("no cycle acted after a quiet one following change %q: the worlds do not test that input", kind)
		}
	}
}

// TestUnavailableJSONIsMarshal checks the kept encodings against
// json.Marshal of Memory.UnavailableNow over a random run of marks,
// expiries and re-marks (same key, new times), and that an unchanged
// unavailability is not written again.
func TestUnavailableJSONIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	w := newMemoWorld(5)
	now := w.in.Now
	var m autoscaler.Memory
	var e unavailableJSON
	written, same := 0, 0
	for step := range 3000 {
		now = now.Add(time.Duration(r.IntN(90)) * time.Second)
		switch o := w.offers[r.IntN(len(w.offers))]; r.IntN(4) {
		case 0:
			m.Mark(autoscaler.Unavailable{Kind: autoscaler.UnavailableCapacity, Offer: o, Reason: "no capacity", Since: now, Until: now.Add(autoscaler.CapacityTTL)})
		case 1:
			m.Mark(autoscaler.Unavailable{Kind: autoscaler.UnavailableQuota, Pool: fmt.Sprintf("p%d", r.IntN(3)), Offer: o, Reason: "quota", Since: now, Until: now.Add(autoscaler.QuotaTTL)})
		case 2:
			m.Expire(now)
		}
		want, err := json.Marshal(m.UnavailableNow(now))
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		c := &Controller{}
		c.scaleSt.memory, c.scaleSt.unavailJSON = m, e
		c.persistUnavailableLocked(&b, now)
		e = c.scaleSt.unavailJSON
		got, ok := b.Meta[metaUnavailable]
		if !ok {
			same++
			if e.last != string(want) {
				t.Fatalf("step %d: nothing written, but the last write %s is not %s", step, e.last, want)
			}
			continue
		}
		written++
		if got != string(want) {
			t.Fatalf("step %d: wrote\n%s\nwant json.Marshal's\n%s", step, got, want)
		}
	}
	if written < 100 || same < 100 {
		t.Fatalf("written %d, left unwritten %d: the run does not exercise both", written, same)
	}
}

// TestMemoComparesTheMemoryByGeneration: once the memo drops the view of
// the memory its quiet cycle read (releaseView), it skips only while the
// memory is unwritten since that view was taken, and the memory's maps are
// written in place again (no copy on write for a view nobody reads).
func TestMemoComparesTheMemoryByGeneration(t *testing.T) {
	w := newMemoWorld(1)
	var mem autoscaler.Memory
	o := w.offers[0]
	mem.Fail(w.offers[1], "", w.in.Now) // makes the maps
	mem.Remember("j1", o)
	mem.Remember("j2", o)
	for _, write := range []func(){
		func() { mem.Remember("j3", o) },
		func() { mem.Fail(o, "j1", w.in.Now) },
		func() { mem.Succeed(o) },
		func() { mem.ForgetJobs(func(id string) bool { return id == "j1" }) },
		func() {
			mem.Mark(autoscaler.Unavailable{Kind: autoscaler.UnavailableCapacity, Offer: o, Since: w.in.Now, Until: w.in.Now.Add(time.Minute)})
		},
		func() { mem.Expire(w.in.Now.Add(time.Hour)) },
	} {
		in := w.in
		in.Memory = &mem
		gen := mem.Gen()
		in.Memory = mem.Share()
		var m decideMemo
		m.record(in, w.view, nil)
		m.releaseView(&mem, gen)
		mem.Unshare()
		if m.in.Memory != nil {
			t.Fatal("the memo keeps the view after releaseView")
		}
		in.Memory = &mem
		if !m.current(in, w.view) {
			t.Fatal("the memo does not skip an unchanged cycle")
		}
		before := fmt.Sprintf("%p", mem.JobLast)
		write()
		if in.Memory = &mem; m.current(in, w.view) {
			t.Fatalf("the memo skips after a write to the memory (generation %d → %d)", gen, mem.Gen())
		}
		if after := fmt.Sprintf("%p", mem.JobLast); after != before && mem.JobLast != nil {
			t.Fatal("a write copied the failover map though no view is read")
		}
	}
}
