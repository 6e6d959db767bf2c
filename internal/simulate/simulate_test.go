package simulate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// oneNodeFleet: at most one on-demand 8×H100 node on AWS us-east-1
// (p5.48xlarge, $55.04/h in the catalog), kept 10 minutes idle.
const oneNodeFleet = `
apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: h100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  regions: {allow: [us-east-1]}
  requirements: {gpuModels: [H100], gpusPerNode: 8}
  capacityTypes: [on-demand]
  min: 0
  max: 1
  idleTimeout: 10m
`

func parseFleet(t *testing.T, doc string) *manifest.Set {
	t.Helper()
	set, fe := manifest.Parse([]manifest.Source{{Name: "fleet.yaml", Data: []byte(doc), Format: manifest.YAML}}, manifest.Checks{})
	if len(fe) > 0 {
		t.Fatal(fe)
	}
	return set
}

// TestHandComputed: two 8-GPU jobs submitted together on a fleet of one
// node that boots in exactly 2 minutes. By hand: the node is launched at
// 0 and ready at 2m, so job a waits 2m and runs to 62m; job b then waits
// 62m and runs to 92m; the node idles 10m and goes at 102m (within a
// one-minute tick). Wait mean 32m; cost 55.04 $/h × ~102m; GPU
// utilisation 90m of busy GPU time over ~102m billed.
func TestHandComputed(t *testing.T) {
	scn, err := sim.ParseScenario([]byte("clouds: {aws: {bootDelay: {min: 2m, max: 2m}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Read(strings.NewReader(`{"id":"a","submitS":0,"gpus":8,"runtimeS":3600}
{"id":"b","submitS":0,"gpus":8,"runtimeS":1800}
`), "hand.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Fleet: parseFleet(t, oneNodeFleet), Trace: tr, Seed: 1, Scenario: scn})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Completed != 2 || res.Failed != 0 || res.Unfinished != 0 {
		t.Errorf("completed %d, failed %d, unfinished %d; want 2, 0, 0", res.Completed, res.Failed, res.Unfinished)
	}
	if res.WaitP50 != 2*time.Minute || res.WaitP95 != 62*time.Minute || res.WaitMean != 32*time.Minute {
		t.Errorf("waits p50 %s, p95 %s, mean %s; want 2m, 1h2m, 32m", res.WaitP50, res.WaitP95, res.WaitMean)
	}
	if res.Instances != 1 {
		t.Errorf("%d instances launched, want 1", res.Instances)
	}
	lo, hi := 55.04*102/60, 55.04*103/60
	if res.CostUSD < lo-0.01 || res.CostUSD > hi+0.01 {
		t.Errorf("cost $%.2f, want $%.2f–%.2f (102–103 minutes of a $55.04/h node)", res.CostUSD, lo, hi)
	}
	if res.CostUSD != res.BilledUSD {
		t.Errorf("the ledger says $%.6f, the cloud billed $%.6f", res.CostUSD, res.BilledUSD)
	}
	if res.CostByCapacity["on-demand"] != res.CostUSD || res.CostByCapacity["spot"] != 0 {
		t.Errorf("cost by capacity %v, want all on-demand", res.CostByCapacity)
	}
	if u := res.GPUUtilisation; u < 90.0/103 || u > 90.0/102 {
		t.Errorf("GPU utilisation %.4f, want 90/102–90/103", u)
	}
}

// spotFleet mixes spot and on-demand on two clouds; the scenario makes
// spot interruptions frequent enough to matter on a short trace.
const spotFleet = `
apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: mixed}
spec:
  provider: sim
  sim: {clouds: [aws, gcp]}
  regions: {allow: ["us-*"]}
  requirements: {gpusPerNode: 8}
  capacityTypes: [spot, on-demand]
  min: 0
  max: 6
  idleTimeout: 5m
`

func philly(t *testing.T, n int) *trace.Trace {
	t.Helper()
	tr, err := trace.Builtin("philly")
	if err != nil {
		t.Fatal(err)
	}
	tr.Jobs = tr.Jobs[:n]
	for i := range tr.Jobs {
		// Short jobs keep the test quick; the interval makes resumption
		// matter.
		tr.Jobs[i].Runtime = min(tr.Jobs[i].Runtime, 3*time.Hour)
		tr.Jobs[i].CheckpointInterval = 10 * time.Minute
	}
	return tr
}

// TestDeterministic: the same trace, fleet and seed give the same report
// (digest over every job outcome and cloud event), and every job ends.
func TestDeterministic(t *testing.T) {
	scn, err := sim.ParseScenario([]byte("offers:\n  - match: {capacityType: spot}\n    interruptionRate: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	run := func() *Result {
		res, err := Run(context.Background(), Config{Fleet: parseFleet(t, spotFleet), Trace: philly(t, 25), Seed: 7, Scenario: scn})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(), run()
	t.Logf("%+v", a)
	if a.Digest != b.Digest {
		t.Errorf("two runs with seed 7 differ: %+v then %+v", a, b)
	}
	if a.Completed+a.Failed != a.Jobs || a.Unfinished != 0 {
		t.Errorf("%d of %d jobs ended", a.Completed+a.Failed, a.Jobs)
	}
	if a.CostUSD != a.BilledUSD {
		t.Errorf("the ledger says $%.6f, the clouds billed $%.6f", a.CostUSD, a.BilledUSD)
	}
	if a.Interruptions == 0 || a.Preemptions == 0 || a.LostWork <= 0 {
		t.Errorf("%d interruptions, %d preemptions, %s lost work: the scenario did not bite", a.Interruptions, a.Preemptions, a.LostWork)
	}
	// Lost work is bounded by one checkpoint interval per preemption.
	if a.LostWork > time.Duration(a.Preemptions)*10*time.Minute {
		t.Errorf("%s of work lost over %d preemptions: more than one 10m interval each", a.LostWork, a.Preemptions)
	}
	if a.GPUUtilisation <= 0 || a.GPUUtilisation > 1 {
		t.Errorf("GPU utilisation %.3f out of (0, 1]", a.GPUUtilisation)
	}
}

// TestConservation: on a slice of Philly with spot interruptions, for
// each of an on-demand, a half-spot (two pools, through --vary) and an
// all-spot fleet: every job in the slice ends; the ledger's total equals
// the simulated clouds' bill to the micro-dollar, and its capacity types
// and hours sum to that total; GPU utilisation, and every hour's
// allocated share of metered GPU time, stay within [0, 1].
func TestConservation(t *testing.T) {
	scn, err := sim.ParseScenario([]byte("offers:\n  - match: {capacityType: spot}\n    interruptionRate: 0.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	base := parseFleet(t, `
apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: v100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  regions: {allow: ["us-*"]}
  requirements: {gpuModels: [V100], gpusPerNode: 8}
  capacityTypes: [on-demand, spot]
  max: 6
  idleTimeout: 5m
`)
	v, err := ParseVary("pools.v100.spot=0,0.5,1")
	if err != nil {
		t.Fatal(err)
	}
	variants, err := Variants("v100", base, []Vary{v})
	if err != nil {
		t.Fatal(err)
	}
	if len(variants) != 3 || len(variants[1].Set.NodePools) != 2 || variants[1].Set.NodePools[1].Spec.Max != 3 {
		t.Fatalf("variants %+v: want 3, the middle one with a 3-node spot pool", variants)
	}
	tr := philly(t, 60)
	for _, v := range variants {
		res, err := Run(context.Background(), Config{Fleet: v.Set, Trace: tr, Seed: 3, Scenario: scn})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d jobs, cost $%.2f %v, %d interruptions, %d preemptions, utilisation %.3f, %d steps",
			v.Name, res.Jobs, res.CostUSD, res.CostByCapacity, res.Interruptions, res.Preemptions, res.GPUUtilisation, res.Steps)
		if res.Completed+res.Failed != res.Jobs || res.Unfinished != 0 || res.Jobs != len(tr.Jobs) {
			t.Errorf("%s: %d completed + %d failed of %d (trace %d), %d unfinished", v.Name, res.Completed, res.Failed, res.Jobs, len(tr.Jobs), res.Unfinished)
		}
		if res.CostUSD != res.BilledUSD || res.CostUSD <= 0 {
			t.Errorf("%s: the ledger says $%.6f, the clouds billed $%.6f", v.Name, res.CostUSD, res.BilledUSD)
		}
		var byCap, hourly float64
		for _, c := range res.CostByCapacity {
			byCap += c
		}
		for _, p := range res.Series {
			for _, c := range p.CostUSD {
				hourly += c
			}
			if p.AllocatedGPUHours < 0 || p.AllocatedGPUHours > p.MeteredGPUHours+1e-9 {
				t.Errorf("%s: at %s %.3f GPU-hours allocated of %.3f metered", v.Name, p.At, p.AllocatedGPUHours, p.MeteredGPUHours)
			}
		}
		if d := byCap - res.CostUSD; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: capacity types sum to $%.6f of $%.6f", v.Name, byCap, res.CostUSD)
		}
		if d := hourly - res.CostUSD; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: hours sum to $%.6f of $%.6f", v.Name, hourly, res.CostUSD)
		}
		if res.GPUUtilisation <= 0 || res.GPUUtilisation > 1 {
			t.Errorf("%s: GPU utilisation %.4f out of (0, 1]", v.Name, res.GPUUtilisation)
		}
		if strings.Contains(v.Name, "spot=1") && (res.CostByCapacity["on-demand"] != 0 || res.Interruptions == 0) {
			t.Errorf("%s: on-demand $%.2f, %d interruptions; want only spot, interrupted", v.Name, res.CostByCapacity["on-demand"], res.Interruptions)
		}
		if strings.Contains(v.Name, "spot=0") && !strings.Contains(v.Name, "spot=0.5") && res.CostByCapacity["spot"] != 0 {
			t.Errorf("%s: spot $%.2f, want none", v.Name, res.CostByCapacity["spot"])
		}
	}
}

// TestGPUShares: jobs that take a share of one GPU run on a pool that
// marks its GPUs shareable, packed onto one node; without such a pool they
// wait and nothing is bought for them (the scale loop used to buy a node
// they could never use, again and again).
func TestGPUShares(t *testing.T) {
	tr, err := trace.Read(strings.NewReader(`{"id":"a","submitS":0,"gpus":0.5,"runtimeS":1800}
{"id":"b","submitS":0,"gpus":0.5,"runtimeS":1800}
{"id":"c","submitS":60,"gpus":0.25,"runtimeS":600}
`), "shares.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	shared := strings.Replace(oneNodeFleet, "  max: 1\n", "  max: 1\n  sharedGPUs: true\n", 1)
	res, err := Run(context.Background(), Config{Fleet: parseFleet(t, shared), Trace: tr, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 3 || res.Instances != 1 {
		t.Errorf("on a pool that shares GPUs: %d of 3 jobs completed on %d instances, want 3 on 1", res.Completed, res.Instances)
	}
	res, err = Run(context.Background(), Config{Fleet: parseFleet(t, oneNodeFleet), Trace: tr, Seed: 1, Horizon: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unfinished != 3 || res.Instances != 0 {
		t.Errorf("without a pool that shares GPUs: %d unfinished, %d instances bought; want 3 unfinished and none bought", res.Unfinished, res.Instances)
	}
}

// TestDrainEndsBesideSpotMin: after the last job the run follows the fleet
// only as long as nodes could still idle out. A pool whose min holds a spot
// node, interrupted and replaced every 30 minutes, kept waking the drain,
// which ran on for up to 1,000 wakes (days of billed capacity).
func TestDrainEndsBesideSpotMin(t *testing.T) {
	const fleet = oneNodeFleet + `---
apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: spot}
spec:
  provider: sim
  sim: {clouds: [aws]}
  regions: {allow: [us-east-1]}
  requirements: {gpuModels: [H100], gpusPerNode: 8}
  capacityTypes: [spot]
  min: 1
  max: 1
  idleTimeout: 10m
`
	scn, err := sim.ParseScenario([]byte("clouds: {aws: {bootDelay: {min: 2m, max: 2m}}}\noffers:\n  - match: {cloud: aws}\n    interruptAfter: 30m\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Read(strings.NewReader(`{"id":"a","submitS":0,"gpus":8,"runtimeS":3600,"checkpointIntervalS":300}
`), "one.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{Fleet: parseFleet(t, fleet), Trace: tr, Seed: 1, Scenario: scn})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 1 {
		t.Fatalf("completed %d, want 1", res.Completed)
	}
	// The job ends within a few hours (interruptions included); the drain
	// adds at most the idle timeout and its margin.
	if limit := 8*time.Hour + 10*time.Minute + drainMargin; res.Simulated > limit {
		t.Errorf("the run lasted %s simulated (%d instances), want at most %s", res.Simulated, res.Instances, limit)
	}
}
