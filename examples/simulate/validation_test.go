// Package simulate_test keeps the validation configuration of
// docs/simulate.md ("Validation against published figures") runnable: the
// Pollux artifact's workload 6 on its 64-GPU cluster.
package simulate_test

import (
	"context"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/simulate"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// TestPolluxValidation runs both validation traces on the validation fleet
// and checks what must hold whatever the policy, from the trace alone:
// every job ends; no job is interrupted (on-demand, fixed size); a job's
// JCT is its wait plus its runtime, so the mean JCT is the mean wait plus
// the mean runtime and each JCT percentile is at least the runtime's; the
// GPU time the ledger's series allocated is the trace's GPU time; the fleet
// stays at its 16 nodes and is never more than fully used.
func TestPolluxValidation(t *testing.T) {
	set, problems, err := manifest.ParseDocuments([]string{"pollux"}, manifest.Checks{})
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	for _, file := range []string{"traces/pollux-w6-half.jsonl", "traces/pollux-w6.jsonl"} {
		t.Run(file, func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tr, err := trace.Read(f, file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := simulate.Run(context.Background(), simulate.Config{Fleet: set, Trace: tr, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Jobs != len(tr.Jobs) || res.Completed != res.Jobs {
				t.Fatalf("%d of %d jobs completed (%d in the trace)", res.Completed, res.Jobs, len(tr.Jobs))
			}
			if res.Preemptions != 0 || res.Interruptions != 0 || res.LostWork != 0 {
				t.Errorf("preemptions %d, interruptions %d, lost work %s on a fixed on-demand fleet", res.Preemptions, res.Interruptions, res.LostWork)
			}
			if res.Instances != 16 {
				t.Errorf("instances %d, want the pool's 16", res.Instances)
			}

			runtimes := make([]time.Duration, 0, len(tr.Jobs))
			var sum time.Duration
			var gpuHours float64
			for _, j := range tr.Jobs {
				runtimes = append(runtimes, j.Runtime)
				sum += j.Runtime
				gpuHours += j.GPUs * float64(j.Replicas) * j.Runtime.Hours()
			}
			slices.Sort(runtimes)
			meanRuntime := sum / time.Duration(len(runtimes))
			if d := res.JCTMean - res.WaitMean - meanRuntime; d < -time.Second || d > time.Second {
				t.Errorf("JCT mean %s - wait mean %s = %s, want the mean runtime %s", res.JCTMean, res.WaitMean, res.JCTMean-res.WaitMean, meanRuntime)
			}
			for _, q := range []struct {
				name string
				jct  time.Duration
				p    float64
			}{{"p50", res.JCTP50, 0.50}, {"p95", res.JCTP95, 0.95}, {"p99", res.JCTP99, 0.99}} {
				// Nearest rank, as the report computes it.
				r := runtimes[min(max(int(q.p*float64(len(runtimes))+0.999999)-1, 0), len(runtimes)-1)]
				if q.jct < r {
					t.Errorf("JCT %s %s below the runtimes' %s %s", q.name, q.jct, q.name, r)
				}
			}

			var allocated, metered float64
			for _, p := range res.Series {
				allocated += p.AllocatedGPUHours
				metered += p.MeteredGPUHours
				if p.AllocatedGPUHours > p.MeteredGPUHours+1e-6 || p.MeteredGPUHours > 64+1e-6 {
					t.Errorf("%s: allocated %.3f of %.3f metered GPU-hours on a 64-GPU fleet", p.At, p.AllocatedGPUHours, p.MeteredGPUHours)
				}
			}
			if math.Abs(allocated-gpuHours) > 0.01 {
				t.Errorf("series allocated %.3f GPU-hours, the trace holds %.3f", allocated, gpuHours)
			}
			if res.GPUUtilisation <= 0 || res.GPUUtilisation > 1 || math.Abs(res.GPUUtilisation-allocated/metered) > 0.01 {
				t.Errorf("GPU utilisation %.4f, series give %.4f", res.GPUUtilisation, allocated/metered)
			}
			t.Logf("%d jobs: wait mean %s, JCT mean %s p50 %s p95 %s p99 %s, utilisation %.1f%%, digest %.16s",
				res.Jobs, res.WaitMean, res.JCTMean, res.JCTP50, res.JCTP95, res.JCTP99, 100*res.GPUUtilisation, res.Digest)
		})
	}
}
