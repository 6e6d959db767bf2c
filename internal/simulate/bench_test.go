package simulate

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// BenchmarkSimulate runs built-in trace slices through Run on the
// repository's example fleets, seed 1, and reports each run's digest in
// the log (a run is deterministic for a seed). The slices grow, so a
// super-linear cost shows as a growing time per job:
//
//	go test -run '^$' -bench Simulate -benchtime 1x -cpuprofile cpu.out ./internal/simulate
//
// BENCHMARKS.md ("Trace simulation") has the figures and what the whole
// traces take through the CLI.
func BenchmarkSimulate(b *testing.B) {
	for _, bc := range []struct {
		name, trace, fleet string
		from, to           time.Duration
	}{
		{"philly-days19-20", "philly", "philly", 456 * time.Hour, 504 * time.Hour}, // 1,517 jobs
		{"philly-days19-24", "philly", "philly", 456 * time.Hour, 576 * time.Hour},
		{"philly-days19-29", "philly", "philly", 456 * time.Hour, 720 * time.Hour}, // 8,706 jobs
		// The trace's own cluster (552 owned machines) on the same slices.
		{"philly-cluster-days19-24", "philly", "philly-cluster", 456 * time.Hour, 576 * time.Hour},
		{"philly-cluster", "philly", "philly-cluster", 0, 0}, // the whole trace: 82,247 jobs
		{"alibaba-first-116d", "alibaba", "alibaba", 0, 2784 * time.Hour},
		{"alibaba", "alibaba", "alibaba", 0, 0}, // the whole trace: 6,203 GPU pods
	} {
		b.Run(bc.name, func(b *testing.B) {
			tr, err := trace.Builtin(bc.trace)
			if err != nil {
				b.Fatal(err)
			}
			if bc.to > 0 {
				tr = tr.Window(bc.from, bc.to)
			}
			set, problems, err := manifest.ParseDocuments([]string{"../../examples/simulate/" + bc.fleet}, manifest.Checks{})
			if err != nil || len(problems) > 0 {
				b.Fatal(err, problems)
			}
			b.ResetTimer()
			for range b.N {
				res, err := Run(context.Background(), Config{Fleet: set, Trace: tr, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*res.Jobs), "µs/job")
				maxQueued := 0
				for _, p := range res.Series {
					maxQueued = max(maxQueued, p.Queued)
				}
				b.Logf("%d jobs, %d steps, %d passes over %d queued jobs, %d scale decisions (%d skipped), %s simulated, max queue %d, wait p50 %s p95 %s, digest %.16s",
					res.Jobs, res.Steps, res.Passes, res.PassJobs, res.Decides, res.DecidesSkipped, res.Simulated.Round(time.Hour), maxQueued,
					res.WaitP50.Round(time.Second), res.WaitP95.Round(time.Second), res.Digest)
			}
		})
	}
}
