package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/simulate"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// onePathFleet: at most one on-demand 8×V100 node in one AWS region.
const onePathFleet = `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: v100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  regions: {allow: [us-east-1]}
  requirements: {gpuModels: [V100], gpusPerNode: 8}
  capacityTypes: [on-demand]
  max: 1
  idleTimeout: 10m
`

// onePathTrace: an 8-GPU job and two 4-GPU jobs submitted together; the
// one node runs the first, then the other two side by side.
const onePathTrace = `{"id":"a","submitS":0,"gpus":8,"runtimeS":6}
{"id":"b","submitS":0,"gpus":4,"runtimeS":3}
{"id":"c","submitS":0,"gpus":4,"runtimeS":3}
`

// TestSimulateMatchesUp is DESIGN.md's one code path: a tiny trace run by
// `gpufleet simulate` (virtual agents, fake clock) and by `gpufleet up
// --sim` at 600× (the real binary, its in-process agents running the jobs
// as processes, jobs submitted through the CLI) places every attempt alike:
// the same nodes, in launch order, and the same GPU indexes.
func TestSimulateMatchesUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fleetDir := filepath.Join(dir, "fleet")
	if err := os.MkdirAll(fleetDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fleetDir, "pool.yaml"), []byte(onePathFleet), 0o600); err != nil {
		t.Fatal(err)
	}
	scenario := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(scenario, []byte("clouds: {aws: {bootDelay: {min: 2m, max: 2m}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The simulation.
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	set, problems, err := manifest.ParseDocuments([]string{fleetDir}, manifest.Checks{KnownGPU: cat.KnownGPU, Pool: server.PoolChecks().CheckPool})
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	tr, err := trace.Read(strings.NewReader(onePathTrace), "tiny.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(scenario)
	if err != nil {
		t.Fatal(err)
	}
	scn, err := sim.ParseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate.Run(context.Background(), simulate.Config{Fleet: set, Trace: tr, Seed: 1, Scenario: scn, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	simulated := res.Placements

	// The same through the real server.
	s := startControlPlane(t, filepath.Join(dir, "data"), freePort(t), "--sim", "--time-scale", "600", "--sim-scenario", scenario)
	s.gpufleet("apply", "-f", fleetDir, "-m", "one V100 node")
	ids := map[string]string{}
	for _, j := range tr.Jobs {
		id := strings.TrimSpace(s.gpufleet("run", "--gpus", fmt.Sprint(j.GPUs), "--", "sleep", fmt.Sprint(j.Runtime.Seconds())))
		ids[j.ID] = id
	}
	var live []simulate.Placement
	for _, j := range tr.Jobs {
		v := s.waitJob(ids[j.ID], func(v api.JobView) bool { return v.State.Terminal() }, "ended")
		if v.State != model.JobSucceeded {
			t.Fatalf("job %s (%s) %s\nserver log:\n%s", ids[j.ID], j.ID, v.State, s.out)
		}
		for _, a := range v.AttemptDetails {
			p := simulate.Placement{Job: j.ID, Attempt: a.Number}
			for _, r := range a.Replicas {
				p.Nodes, p.GPUs = append(p.Nodes, r.NodeID), append(p.GPUs, r.GPUs)
			}
			live = append(live, p)
		}
	}
	a, b := normalise(simulated), normalise(live)
	t.Logf("simulate: %v\nup --sim: %v", a, b)
	if !slices.Equal(a, b) || len(a) != 3 {
		t.Errorf("placements differ:\nsimulate: %v\nup --sim: %v", a, b)
	}
}

// normalise writes placements with nodes numbered in order of first use,
// so runs whose node ids differ compare.
func normalise(ps []simulate.Placement) []string {
	num := map[string]int{}
	var out []string
	for _, p := range ps {
		var parts []string
		for i, n := range p.Nodes {
			if _, ok := num[n]; !ok {
				num[n] = len(num) + 1
			}
			parts = append(parts, fmt.Sprintf("node%d%v", num[n], p.GPUs[i]))
		}
		out = append(out, fmt.Sprintf("%s#%d@%s", p.Job, p.Attempt, strings.Join(parts, "+")))
	}
	return out
}
