package simulate

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// ownedFleet: two owned machines of 4 V100s at $2/h each (a static pool),
// and at most one 8×H100 node to buy on demand beside them.
const ownedFleet = `
apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: lab}
spec:
  provider: static
  min: 2
  max: 2
  static:
    machines:
      - {name: lab-a, address: lab-a, gpus: 4xV100, pricePerHour: 2}
      - {name: lab-b, address: lab-b, gpus: 4xV100, pricePerHour: 2}
` + `---` + oneNodeFleet

// TestOwnedMachines: a static pool's machines register through the agent
// protocol at the start, take the jobs they fit before the cloud is asked,
// and are charged in the ledger at their price under "owned" for the
// whole run, beside the cloud's bill.
func TestOwnedMachines(t *testing.T) {
	tr, err := trace.Read(strings.NewReader(`{"id":"a","submitS":0,"gpus":4,"runtimeS":3600}
{"id":"b","submitS":0,"gpus":4,"runtimeS":3600}
{"id":"c","submitS":0,"gpus":8,"runtimeS":1800,"gpuModels":["H100"]}
`), "owned.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Fleet: parseFleet(t, ownedFleet), Trace: tr, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 3 || res.Unfinished != 0 {
		t.Fatalf("completed %d, unfinished %d; want 3, 0", res.Completed, res.Unfinished)
	}
	if res.OwnedMachines != 2 || res.OwnedGPUs != 8 {
		t.Errorf("owned %d machines, %d GPUs; want 2, 8", res.OwnedMachines, res.OwnedGPUs)
	}
	nodes := map[string]string{}
	for _, p := range res.Placements {
		nodes[p.Job] = strings.Join(p.Nodes, ",")
	}
	if !strings.HasPrefix(nodes["a"], "lab-") || !strings.HasPrefix(nodes["b"], "lab-") || nodes["a"] == nodes["b"] {
		t.Errorf("placements %v: want a and b on the two owned machines", nodes)
	}
	if res.Instances != 1 || strings.HasPrefix(nodes["c"], "lab-") {
		t.Errorf("%d instances bought, c on %q: want the H100 job alone on one bought node", res.Instances, nodes["c"])
	}
	owned := res.CostByCapacity["owned"]
	if want := 4 * res.Simulated.Hours(); math.Abs(owned-want) > 0.01 {
		t.Errorf("owned cost $%.4f, want $%.4f (2 machines × $2/h × %s)", owned, want, res.Simulated)
	}
	if math.Abs(res.CostUSD-(res.BilledUSD+owned)) > 1e-6 || res.BilledUSD <= 0 {
		t.Errorf("ledger $%.6f, want the cloud's bill $%.6f plus the owned machines' $%.6f", res.CostUSD, res.BilledUSD, owned)
	}
	if res.GPUUtilisation <= 0 || res.GPUUtilisation > 1 {
		t.Errorf("GPU utilisation %.4f, want in (0, 1]", res.GPUUtilisation)
	}
}

// TestLaunchLimitsAreReported: a quota of 16 H100s holds a pool of max 4
// 8-GPU nodes to 2; the report says so (the peak, and the launches the
// cloud refused for quota), and the series shows the queued GPUs.
func TestLaunchLimitsAreReported(t *testing.T) {
	scn, err := sim.ParseScenario([]byte("clouds: {aws: {quota: {H100: 16}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Read(strings.NewReader(`{"id":"a","submitS":0,"gpus":8,"runtimeS":3600}
{"id":"b","submitS":0,"gpus":8,"runtimeS":3600}
{"id":"c","submitS":0,"gpus":8,"runtimeS":3600}
{"id":"d","submitS":0,"gpus":8,"runtimeS":3600}
`), "quota.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	fleet := strings.Replace(oneNodeFleet, "max: 1", "max: 4", 1)
	res, err := Run(context.Background(), Config{Fleet: parseFleet(t, fleet), Trace: tr, Seed: 1, Scenario: scn})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 4 {
		t.Fatalf("completed %d of 4", res.Completed)
	}
	if res.PeakInstances != 2 || res.PeakGPUs != 16 {
		t.Errorf("peak %d instances, %d GPUs; want 2, 16 (the quota)", res.PeakInstances, res.PeakGPUs)
	}
	if res.LaunchRefusals[sim.FailQuotaExceeded] == 0 {
		t.Errorf("launch refusals %v: want some for quota", res.LaunchRefusals)
	}
	most := 0
	for _, p := range res.Series {
		most = max(most, p.Instances)
	}
	if most != 2 {
		t.Errorf("the series' most instances in an hour is %d, want 2", most)
	}
	if len(res.Series) == 0 || res.Series[0].QueuedGPUs != 32 {
		t.Errorf("first hour's queued GPUs: %v, want 32 (four 8-GPU jobs not started)", res.Series)
	}
}
