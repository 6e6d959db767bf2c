package autoscaler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// RandomInput builds a small random world for Decide: pools with mins,
// maxes and idle timeouts, nodes launching, ready (busy or idle) and
// draining, pending jobs with candidate offers, an inventory with the
// odd leak, and a memory with back-offs, failovers and unavailability,
// every time near t0.
func randomInput(r *rand.Rand) Input {
	mins := func(n int) time.Duration { return time.Duration(r.IntN(n)) * time.Minute }
	offers := []model.Offer{a1, a2, a3, g1}
	var pools []*model.NodePool
	for i := range 1 + r.IntN(3) {
		p := pool(fmt.Sprintf("p%d", i), r.IntN(2), 1+r.IntN(4), mins(30))
		p.Spec.SharedGPUs = r.IntN(4) == 0
		pools = append(pools, p)
	}
	in := Input{Now: t0, Pools: pools, Drivers: launchAll(pools...), Offers: offers, LaunchTimeout: mins(20),
		Inventory: map[string][]Instance{}, Memory: &Memory{}}
	states := []model.NodeState{model.NodeLaunching, model.NodeReady, model.NodeReady, model.NodeDraining}
	for i := range r.IntN(6) {
		n := Node{ID: fmt.Sprintf("n%d", i), Pool: pools[r.IntN(len(pools))].Name, Provider: "sim", InstanceID: fmt.Sprintf("i%d", i),
			State: states[r.IntN(len(states))], Offer: offers[r.IntN(len(offers))], LaunchedAt: t0.Add(-mins(40)),
			Busy: r.IntN(2) == 0, IdleSince: t0.Add(-mins(40)), FreeGPUs: r.IntN(9)}
		if r.IntN(3) == 0 {
			n.ForJobs = []string{fmt.Sprintf("j%d", r.IntN(4))}
		}
		in.Nodes = append(in.Nodes, n)
		in.Inventory["sim"] = append(in.Inventory["sim"], Instance{Provider: "sim", ID: n.InstanceID})
	}
	if r.IntN(4) == 0 {
		in.Inventory["sim"] = append(in.Inventory["sim"], Instance{Provider: "sim", ID: "leak"})
	}
	for i := range r.IntN(4) {
		pj := Pending{JobID: fmt.Sprintf("j%d", i), Replicas: 1 + r.IntN(2), GPUs: 1 + r.IntN(8), Shared: r.IntN(5) == 0}
		for _, o := range offers {
			if r.IntN(2) == 0 {
				pj.Offers = append(pj.Offers, o)
				pj.Costs = append(pj.Costs, o.PricePerHour)
			}
		}
		in.Pending = append(in.Pending, pj)
	}
	for _, o := range offers {
		switch r.IntN(5) {
		case 0:
			in.Memory.Fail(o, fmt.Sprintf("j%d", r.IntN(4)), t0.Add(-mins(10)))
		case 1:
			in.Memory.Mark(Unavailable{Kind: UnavailableCapacity, Offer: o, Since: t0.Add(-time.Minute), Until: t0.Add(mins(5))})
		case 2:
			in.Memory.Mark(Unavailable{Kind: UnavailableQuota, Pool: pools[0].Name, Offer: o, Since: t0, Until: t0.Add(mins(40))})
		}
	}
	return in
}

// TestNextChangeBoundsTheClock checks NextChange on random worlds: at any
// time before it Decide answers what it answered at Now, and at it (when
// the world has a timer) the answer may differ. A timer NextChange
// forgets shows as a different answer before it.
func TestNextChangeBoundsTheClock(t *testing.T) {
	changed := 0
	for seed := range 2000 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		in := randomInput(r)
		want := brief(Decide(in))
		next := in.NextChange()
		if !next.IsZero() && !next.After(in.Now) {
			t.Fatalf("world %d: NextChange %s is not after Now %s", seed, next, in.Now)
		}
		probe := func(at time.Time) []string {
			later := in
			later.Now = at
			return brief(Decide(later))
		}
		limit := next
		if limit.IsZero() {
			limit = in.Now.Add(48 * time.Hour)
		}
		span := limit.Sub(in.Now)
		for _, at := range []time.Time{in.Now, limit.Add(-time.Nanosecond), in.Now.Add(time.Duration(r.Int64N(int64(span))))} {
			if got := probe(at); !cmp.Equal(got, want) {
				t.Fatalf("world %d: Decide at %s (before NextChange %s) differs from Now %s:\n%s", seed, at, next, in.Now, cmp.Diff(want, got))
			}
		}
		if !next.IsZero() && !cmp.Equal(probe(next), want) {
			changed++
		}
	}
	// The worlds have timers that matter: otherwise the test above
	// could not tell a forgotten one.
	if changed < 100 {
		t.Fatalf("only %d of 2000 worlds change their answer at NextChange", changed)
	}
	t.Logf("%d of 2000 worlds answer differently at NextChange", changed)
}
