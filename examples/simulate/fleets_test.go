package simulate_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/simulate"
)

// TestPhillyClusterIsTheTracesList: examples/simulate/philly-cluster
// declares the Philly machine list it cites (msr-fiddle/philly-traces
// cluster_machine_list): 552 machines, 321 of 2 GPUs and 231 of 8, 2,490
// GPUs, each once.
func TestPhillyClusterIsTheTracesList(t *testing.T) {
	set, problems, err := manifest.ParseDocuments([]string{"philly-cluster"}, manifest.Checks{})
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	byGPUs, seen, gpus := map[int]int{}, map[string]bool{}, 0
	for _, p := range set.NodePools {
		if p.Spec.Provider != model.ProviderStatic || p.Spec.Static == nil || p.Spec.Min != len(p.Spec.Static.Machines) || p.Spec.Max != p.Spec.Min {
			t.Fatalf("pool %s: want a static pool whose min and max are its machines", p.Metadata.Name)
		}
		for _, m := range p.Spec.Static.Machines {
			n, _, err := model.ParseGPUCount(m.GPUs)
			if err != nil || seen[m.Name] {
				t.Fatalf("machine %s (%s): %v, listed before: %t", m.Name, m.GPUs, err, seen[m.Name])
			}
			seen[m.Name] = true
			byGPUs[n]++
			gpus += n
		}
	}
	if len(seen) != 552 || byGPUs[2] != 321 || byGPUs[8] != 231 || gpus != 2490 {
		t.Errorf("%d machines (%v by GPUs), %d GPUs; want 552 (321 of 2, 231 of 8), 2,490", len(seen), byGPUs, gpus)
	}
}

// TestPhillyFleetNeedsItsScenario: examples/simulate/philly's pool (160
// on-demand 8×V100 nodes) reaches its max on the simulated AWS only with
// the scenario beside it; on the defaults the quota of 256 V100s stops it
// at 32 nodes, as its comment says. Each buyable offer is launched until
// the cloud refuses it.
func TestPhillyFleetNeedsItsScenario(t *testing.T) {
	set, problems, err := manifest.ParseDocuments([]string{"philly"}, manifest.Checks{})
	if err != nil || len(problems) > 0 || len(set.NodePools) != 1 {
		t.Fatal(err, problems)
	}
	mp := set.NodePools[0]
	pool := &model.NodePool{Name: mp.Metadata.Name, Spec: mp.Spec}
	data, err := os.ReadFile("scenarios/philly-aws.yaml")
	if err != nil {
		t.Fatal(err)
	}
	scn, err := sim.ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		scn       *sim.Scenario
		want      int
		refusedBy func(error) bool
	}{
		{"defaults", nil, 32, provider.IsQuotaExceeded},
		{"scenario", scn, pool.Spec.Max, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := sim.New(sim.Config{Seed: 1, Providers: []string{"aws"}, Scenario: tc.scn, Clock: clock.NewFake(simulate.Start),
				Keep: func(o model.Offer) bool { return autoscaler.Admits(pool, o) }})
			if err != nil {
				t.Fatal(err)
			}
			offers, err := sp.Offers(context.Background())
			if err != nil || len(offers) == 0 {
				t.Fatal(err, "no offers")
			}
			launched := 0
			var last error
			for _, o := range offers {
				for launched < pool.Spec.Max {
					if _, last = sp.Launch(context.Background(), provider.LaunchRequest{Offer: o}); last != nil {
						break
					}
					launched++
				}
			}
			if launched != tc.want {
				t.Errorf("%d nodes launched, want %d (last refusal: %v)", launched, tc.want, last)
			}
			if tc.refusedBy != nil && !tc.refusedBy(last) {
				t.Errorf("the last refusal is %v, want the quota's", last)
			}
		})
	}
}
