package advisor

import (
	"syscall"
	"testing"
	"time"
)

// benchWorkloads are the workloads BenchmarkRankCatalog ranks the whole
// catalog for: dense and mixture-of-experts, training and serving.
var benchWorkloads = []struct {
	name string
	p    Profile
}{
	{"70b-full-finetune", Profile{Preset: "llama-2-70b", Task: FullFineTune, Tokens: 1e8}},
	{"8b-qlora", Profile{Preset: "llama-3-8b", Task: QLoRA, Tokens: 1e7}},
	{"405b-pretrain", Profile{Preset: "llama-3.1-405b", Task: PreTrain, Tokens: 1e12}},
	// An MoE searches expert-parallel degrees as well.
	{"mixtral-pretrain", Profile{Preset: "mixtral-8x7b", Task: PreTrain, Tokens: 1e11}},
	{"deepseek-v3-pretrain", deepSeekV3()},
	{"70b-serving", Profile{Preset: "llama-3-70b", Task: Serving, Serving: ServingSpec{InputTokens: 1000, OutputTokens: 200, Concurrency: 64}}},
	{"mixtral-serving", Profile{Preset: "mixtral-8x7b", Task: Serving, Serving: ServingSpec{InputTokens: 2000, OutputTokens: 500, Concurrency: 128}}},
	{"deepseek-v3-serving", Profile{Model: deepSeekV3().Model, Task: Serving, Precision: FP8, Serving: ServingSpec{InputTokens: 1000, OutputTokens: 200, Concurrency: 64}}},
}

// BenchmarkRankCatalog ranks the whole catalog (every offer, with derived
// reserved rows) for one workload, plan search included. Target: < 50 ms.
// Besides wall time per rank it reports the process's CPU time per rank
// (cpu-ms/rank, garbage collection included), which a loaded machine
// does not inflate the way it inflates wall time.
func BenchmarkRankCatalog(b *testing.B) {
	c := testCatalog(b)
	offers := c.Offers()
	for _, bw := range benchWorkloads {
		b.Run(bw.name, func(b *testing.B) {
			opts := Options{Offers: offers, Accelerator: c.Accelerator}
			start, cpu0 := time.Now(), cpuTime(b)
			for b.Loop() {
				if _, err := Rank(bw.p, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1e3/float64(b.N), "ms/rank")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/rank")
		})
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
