package advisor

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

var (
	catOnce sync.Once
	cat     *catalog.Catalog
)

func testCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	catOnce.Do(func() {
		c, err := catalog.Load()
		if err != nil {
			panic(err)
		}
		cat = c
	})
	return cat
}

func rank(t testing.TB, p Profile, o Options) Result {
	t.Helper()
	c := testCatalog(t)
	o.Offers, o.Accelerator = c.Offers(), c.Accelerator
	res, err := Rank(p, o)
	if err != nil {
		t.Fatalf("Rank: %v", err)
	}
	return res
}

// walkthrough is the motivating example of docs/advisor.md: a full
// fine-tune of Llama 2 70B with a Hugging Face/DeepSpeed stack (data
// parallelism with ZeRO/FSDP only), 100M tokens at 4096, on AWS on-demand
// A100 40 GB (p4d) against A100 80 GB (p4de).
var walkthrough = Profile{Preset: "llama-2-70b", Task: FullFineTune, Tokens: 1e8, GlobalBatch: 64, Parallelism: "data"}

func TestWalkthrough70BFineTune(t *testing.T) {
	t.Parallel()
	best := func(gpu string) Row {
		res := rank(t, walkthrough, Options{GPUs: []string{gpu}, Providers: []string{"aws"}, Capacity: []string{"on-demand"}, Regions: []string{"us-east-1"}, Explain: true})
		if len(res.Rows) == 0 {
			t.Fatalf("%s: no row; shortfall %+v", gpu, res.Shortfall)
		}
		return res.Rows[0]
	}
	r40, r80 := best("A100"), best("A100-80GB")
	t.Logf("40GB: %s ×%d %s %.1fh $%.0f margin %d", r40.InstanceType, r40.Nodes, r40.PlanText, r40.Hours, r40.Cost, r40.MarginBytes)
	t.Logf("80GB: %s ×%d %s %.1fh $%.0f margin %d", r80.InstanceType, r80.Nodes, r80.PlanText, r80.Hours, r80.Cost, r80.MarginBytes)
	if r40.InstanceType != "p4d.24xlarge" || r80.InstanceType != "p4de.24xlarge" {
		t.Fatalf("instances %s and %s, want p4d.24xlarge and p4de.24xlarge", r40.InstanceType, r80.InstanceType)
	}
	// The 40 GB plan fits only with recomputation and sharding.
	if r40.Plan.Recompute != RecomputeFull || r40.Plan.ZeRO < 1 {
		t.Errorf("40GB plan %s: want full recomputation and ZeRO sharding", r40.PlanText)
	}
	w := mustResolve(t, walkthrough)
	for name, mut := range map[string]func(*Plan){
		"without recomputation": func(p *Plan) { p.Recompute = RecomputeNone },
		"without sharding":      func(p *Plan) { p.ZeRO = 0 },
	} {
		p := r40.Plan
		mut(&p)
		if m := w.trainingMemory(p, 40*gib); m.total() <= 40*gib {
			t.Errorf("%s the 40GB plan still fits (%.1f GiB)", name, m.total()/gib)
		}
	}
	// The trade the model predicts (docs/advisor.md quotes these bounds).
	costRatio, timeRatio := r40.Cost/r80.Cost, r40.Hours/r80.Hours
	t.Logf("40GB vs 80GB: cost ×%.2f, time ×%.2f", costRatio, timeRatio)
	if costRatio < 0.6 || costRatio > 0.95 {
		t.Errorf("cost ratio %.2f, want 40GB 5–40%% cheaper", costRatio)
	}
}

func TestFitsNowhereNamesTheShortfall(t *testing.T) {
	t.Parallel()
	p := Profile{Preset: "llama-3.1-405b", Task: FullFineTune, Tokens: 1e9}
	res := rank(t, p, Options{GPUs: []string{"T4"}, MaxNodes: 2})
	if len(res.Rows) != 0 || res.Ranked != 0 {
		t.Fatalf("got %d rows, want none", len(res.Rows))
	}
	if res.Shortfall == nil || res.Shortfall.GPU != "T4" || res.Shortfall.ShortBytes <= 0 || !strings.Contains(res.Shortfall.Message, "short by") {
		t.Fatalf("shortfall %+v", res.Shortfall)
	}
}

func TestInvalidProfileIsFieldErrors(t *testing.T) {
	t.Parallel()
	_, err := Rank(Profile{Preset: "nope", Task: Serving}, Options{})
	var fe model.FieldErrors
	if !errors.As(err, &fe) || fe[len(fe)-1].Path != "serving.outputTokens" && !strings.Contains(err.Error(), "preset") {
		t.Fatalf("err = %v, want field errors naming preset", err)
	}
}

// TestNoOfferDroppedSilently: every offer considered is ranked, counted as
// not estimated, or does not fit.
func TestNoOfferDroppedSilently(t *testing.T) {
	t.Parallel()
	res := rank(t, Profile{Preset: "llama-3-8b", Task: LoRA, Tokens: 1e7}, Options{Limit: -1, ReservedTerm: "none"})
	notEst := 0
	for _, ne := range res.NotEstimated {
		notEst += ne.Offers
		if ne.Reason == "" {
			t.Errorf("%s: no reason", ne.GPU)
		}
	}
	if res.Ranked+notEst > res.Offers || res.Ranked == 0 {
		t.Fatalf("ranked %d + not estimated %d vs %d offers", res.Ranked, notEst, res.Offers)
	}
	tpu := false
	for _, ne := range res.NotEstimated {
		tpu = tpu || strings.HasPrefix(ne.GPU, "tpu-")
	}
	if !tpu {
		t.Error("TPU offers are not listed as not estimated")
	}
	// An 8B LoRA fits a 24 GB card: the unranked rest are not-estimated
	// or too small.
	if res.Ranked+notEst < res.Offers*9/10 {
		t.Errorf("only %d of %d offers accounted for", res.Ranked+notEst, res.Offers)
	}
}

func TestRankIsDeterministic(t *testing.T) {
	t.Parallel()
	p := Profile{Preset: "mixtral-8x7b", Task: Serving, Serving: ServingSpec{InputTokens: 500, OutputTokens: 500, Concurrency: 32}}
	a := rank(t, p, Options{Limit: -1, Explain: true})
	b := rank(t, p, Options{Limit: -1, Explain: true})
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two rankings differ (-first +second):\n%s", diff)
	}
	for i := 1; i < len(a.Rows); i++ {
		if a.Rows[i-1].MeetsTarget == a.Rows[i].MeetsTarget && a.Rows[i-1].PerMTokens > a.Rows[i].PerMTokens {
			t.Fatalf("rows %d and %d out of order", i-1, i)
		}
	}
}

func TestServingRow(t *testing.T) {
	t.Parallel()
	p := Profile{Preset: "llama-3-70b", Task: Serving, Serving: ServingSpec{InputTokens: 1000, OutputTokens: 200, Concurrency: 64, TotalTokens: 1e9}}
	res := rank(t, p, Options{GPUs: []string{"H100"}, Providers: []string{"aws"}, Capacity: []string{"on-demand"}, Explain: true})
	if len(res.Rows) == 0 {
		t.Fatal("no rows")
	}
	r := res.Rows[0]
	if r.PerMTokens <= 0 || r.TokensPerSecond <= 0 || r.Cost <= 0 || r.Plan.TP < 2 {
		t.Fatalf("row %+v", r)
	}
	// Decode at TPOT is bound below by reading the weights once.
	wt := 70.55e9 * 2 / float64(r.Plan.TP)
	if floor := wt / 3350e9; r.Timing.TPOT < floor {
		t.Errorf("TPOT %.4fs is below the bandwidth floor %.4fs", r.Timing.TPOT, floor)
	}
	if got := r.Cost / (1e9 / 1e6); math.Abs(got/r.PerMTokens-1) > 1e-6 {
		t.Errorf("cost to finish %.2f disagrees with $/Mtok %.4f", r.Cost, r.PerMTokens)
	}
}

func TestLatencyTargetShrinksBatch(t *testing.T) {
	t.Parallel()
	base := Profile{Preset: "llama-3-8b", Task: Serving, Serving: ServingSpec{InputTokens: 2000, OutputTokens: 500, Concurrency: 256}}
	loose := rank(t, base, Options{GPUs: []string{"L4"}, Capacity: []string{"on-demand"}, Explain: true})
	tight := base
	tight.Serving.TargetLatency = model.Duration(20 * time.Second)
	strict := rank(t, tight, Options{GPUs: []string{"L4"}, Capacity: []string{"on-demand"}, Explain: true})
	if len(loose.Rows) == 0 || len(strict.Rows) == 0 {
		t.Fatal("no rows")
	}
	l, s := loose.Rows[0], strict.Rows[0]
	if s.MeetsTarget && s.Timing.Latency > 20 {
		t.Errorf("meets target with latency %.1fs", s.Timing.Latency)
	}
	if s.Plan.Batch > l.Plan.Batch {
		t.Errorf("latency target grew the batch: %d > %d", s.Plan.Batch, l.Plan.Batch)
	}
}

func TestYoungDaly(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		work, perHour, delta, restart float64
		wantTau, wantWall             float64
	}{
		"no interruptions": {work: 3600, perHour: 0, delta: 60, restart: 600, wantTau: 0, wantWall: 3600},
		// M = 36000 s, τ = √(2·60·36000) = 2078.46 s;
		// W = 3.6e5·(1 + 60/2078.46) / (1 − (600 + 1069.23)/36000).
		"one per ten hours":        {work: 360000, perHour: 0.1, delta: 60, restart: 600, wantTau: 2078.46, wantWall: 360000 * (1 + 60/2078.4609) / (1 - (600+(2078.4609+60)/2)/36000)},
		"shorter than an interval": {work: 600, perHour: 0.1, delta: 60, restart: 600, wantTau: 0, wantWall: 600 / (1 - (600+300)/36000.0)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			wall, tau := youngDaly(tt.work, tt.perHour, tt.delta, tt.restart)
			if math.Abs(tau-tt.wantTau) > 0.01 || math.Abs(wall/tt.wantWall-1) > 1e-6 {
				t.Errorf("youngDaly = (%.2f, %.2f), want (%.2f, %.2f)", wall, tau, tt.wantWall, tt.wantTau)
			}
		})
	}
}

func TestSpotCostsInterruptions(t *testing.T) {
	t.Parallel()
	res := rank(t, Profile{Preset: "llama-2-13b", Task: FullFineTune, Tokens: 5e10}, Options{GPUs: []string{"A100-80GB"}, Capacity: []string{"spot"}, Limit: -1})
	seen := false
	for _, r := range res.Rows {
		if r.Capacity != "spot" {
			t.Fatalf("capacity %s", r.Capacity)
		}
		if r.SpotOverhead > 0 {
			seen = true
			if r.CheckpointEvery <= 0 {
				t.Errorf("%s: overhead without a checkpoint interval", r.InstanceType)
			}
		}
	}
	if !seen {
		t.Error("no spot row carries interruption overhead")
	}
}

func TestReservedIsDerived(t *testing.T) {
	t.Parallel()
	res := rank(t, Profile{Preset: "llama-3-8b", Task: FullFineTune, Tokens: 1e8}, Options{Providers: []string{"gcp"}, Capacity: []string{"reserved"}, ReservedTerm: "3y", Limit: -1})
	if len(res.Rows) == 0 {
		t.Fatal("no reserved rows")
	}
	for _, r := range res.Rows {
		if r.Capacity != Reserved3y || !r.Derived {
			t.Fatalf("row capacity %s derived %v", r.Capacity, r.Derived)
		}
	}
}

func TestCalibrationReplacesDatasheet(t *testing.T) {
	t.Parallel()
	p := Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e8}
	opts := Options{GPUs: []string{"H100"}, Providers: []string{"aws"}, Capacity: []string{"on-demand"}, Regions: []string{"us-east-1"}}
	data := rank(t, p, opts)
	// A GPU that measures at half the usual matmul rate takes longer.
	opts.Calibration = Calibration{GPUs: map[string]Measured{"H100": {BF16TFLOPS: 989 * gemmEfficiency / 2, MemoryBandwidthGBs: 3000}}}
	slow := rank(t, p, opts)
	if len(data.Rows) == 0 || len(slow.Rows) == 0 {
		t.Fatal("no rows")
	}
	if r := slow.Rows[0].Hours / data.Rows[0].Hours; r < 1.8 {
		t.Errorf("half the measured rate took ×%.2f the time, want about ×2", r)
	}
	if !strings.Contains(strings.Join(slow.Assumptions, "\n"), "measured rates") || !strings.Contains(strings.Join(slow.Rows[0].Assumptions, "\n"), "measured") {
		t.Error("assumptions do not say the rates were measured")
	}
}

func TestEstimateRuntime(t *testing.T) {
	t.Parallel()
	acc, _ := testCatalog(t).Accelerator("H100")
	p := Profile{Preset: "llama-3-8b", Task: FullFineTune, Tokens: 1e9}
	d8, err := EstimateRuntime(p, acc, 8, 8, "", Calibration{})
	if err != nil {
		t.Fatal(err)
	}
	d16, err := EstimateRuntime(p, acc, 16, 8, "", Calibration{})
	if err != nil {
		t.Fatal(err)
	}
	if d8 <= 0 || d16 >= d8 {
		t.Errorf("8 GPUs %s, 16 GPUs %s: want more GPUs faster", d8, d16)
	}
	if _, err := EstimateRuntime(Profile{Preset: "llama-3.1-405b", Task: FullFineTune, Tokens: 1e9}, acc, 1, 1, "", Calibration{}); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("405B on one GPU: err = %v", err)
	}
	if _, err := EstimateRuntime(p, acc, 12, 8, "", Calibration{}); err == nil {
		t.Error("12 GPUs in nodes of 8: no error")
	}
}

// TestMeasuredRate: a measured tokens/s per GPU sets the step's compute
// time exactly at the recomputation it was measured with (pinned off, then
// pinned full), and a measured TFLOP/s
// sets the achieved rate; giving both is an error naming the field.
func TestMeasuredRate(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	none := Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e8, GlobalBatch: 64, Pin: Pin{GPUs: 8, Recompute: RecomputeNone}}
	req := Request{Profile: none, Providers: []string{"aws"}, InstanceTypes: []string{"p4de.24xlarge"}, Limit: 1, Explain: true, MeasuredTokensPerSecond: 2500}
	res, err := Rank(req.Profile, req.Options(cat.Offers(), cat.Accelerator, Calibration{}))
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("rank: %v, %d rows", err, len(res.Rows))
	}
	want := float64(4096*64) / (2500 * 8)
	if got := res.Rows[0].Timing.Compute; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("compute per step %.4fs, want %.4fs from 2500 tokens/s per GPU", got, want)
	}
	req.MeasuredTokensPerSecond, req.MeasuredTFLOPS = 0, 150
	res, err = Rank(req.Profile, req.Options(cat.Offers(), cat.Accelerator, Calibration{}))
	if err != nil || len(res.Rows) != 1 || math.Abs(res.Rows[0].Timing.RatePerGPU-150e12) > 1 {
		t.Fatalf("rank with 150 TFLOP/s: %v, rows %+v", err, res.Rows)
	}
	// A run measured with full recomputation, pinned so, is reproduced at
	// that plan: the rate is converted with the FLOPs that run executed.
	full := none
	full.Pin.Recompute = RecomputeFull
	req.Profile, req.MeasuredTFLOPS, req.MeasuredTokensPerSecond = full, 0, 2500
	res, err = Rank(req.Profile, req.Options(cat.Offers(), cat.Accelerator, Calibration{}))
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("rank with full recomputation: %v, %d rows", err, len(res.Rows))
	}
	if got := res.Rows[0].Timing.Compute; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("full recomputation pinned: compute per step %.4fs, want %.4fs from 2500 tokens/s per GPU", got, want)
	}
	w := mustResolve(t, full)
	model, executed := w.flopsPerToken(RecomputeFull)
	if got := res.Rows[0].Timing.RatePerGPU; math.Abs(got/(2500*executed)-1) > 1e-9 || executed <= model {
		t.Errorf("full recomputation pinned: hardware rate %.4g, want %.4g (model %.4g FLOPs per token)", got, 2500*executed, model)
	}
	req.MeasuredTokensPerSecond, req.MeasuredTFLOPS = 1, 150
	if fe := req.Validate(nil); len(fe) != 1 || fe[0].Path != "measuredTokensPerSecond" {
		t.Errorf("both rates: %v", fe)
	}
}

// TestPricePerGPUHour: a given price replaces every listed one (cost is
// price × GPUs × hours), leaves out the reserved rows derived from listed
// prices, and says so.
func TestPricePerGPUHour(t *testing.T) {
	t.Parallel()
	p := Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e8}
	res := rank(t, p, Options{PricePerGPUHour: 2, InstanceTypes: []string{"p4d.24xlarge", "p5.48xlarge"}, Limit: -1})
	if len(res.Rows) == 0 {
		t.Fatal("no rows")
	}
	for _, r := range res.Rows {
		if r.Derived || strings.HasPrefix(r.Capacity, "reserved") {
			t.Errorf("%s %s: reserved row with a given price", r.InstanceType, r.Capacity)
		}
		if want := 2 * float64(r.GPUsPerNode); r.PricePerHour != want {
			t.Errorf("%s: price %v per hour, want %v", r.InstanceType, r.PricePerHour, want)
		}
		if r.Capacity == "on-demand" {
			if want := 2 * float64(r.GPUs) * r.Hours; math.Abs(r.Cost/want-1) > 1e-9 {
				t.Errorf("%s: cost %v, want 2 × %d GPUs × %v h = %v", r.InstanceType, r.Cost, r.GPUs, r.Hours, want)
			}
		}
	}
	if !slices.ContainsFunc(res.Assumptions, func(a string) bool { return strings.Contains(a, "$2 per GPU-hour") }) {
		t.Errorf("assumptions do not name the given price: %q", res.Assumptions)
	}
	listed := rank(t, p, Options{InstanceTypes: []string{"p4d.24xlarge"}, Limit: 1})
	if listed.Rows[0].PricePerHour == 16 {
		t.Fatal("the listed p4d price happens to be $2/GPU-hour; pick another price")
	}
}

// TestMicroBatchIsTheRanksShare: a rank whose share of the global batch
// is 3 sequences runs one micro-batch of 3, not two of 2 (which doubles
// ZeRO-3's gathers per step).
func TestMicroBatchIsTheRanksShare(t *testing.T) {
	t.Parallel()
	zero := 3
	p := Profile{Preset: "llama-2-7b", Task: PreTrain, Tokens: 1e9, SequenceLength: 2048, GlobalBatch: 24,
		Pin: Pin{GPUs: 8, ZeRO: &zero}}
	res := rank(t, p, Options{InstanceTypes: []string{"p4de.24xlarge"}, Capacity: []string{"on-demand"}, Limit: 1, Explain: true})
	if len(res.Rows) == 0 {
		t.Fatal("no rows")
	}
	if mb := res.Rows[0].Plan.MicroBatch; mb != 3 {
		t.Fatalf("micro-batch %d, want the rank's share 3 (plan %s)", mb, res.Rows[0].PlanText)
	}
}

// TestSmallestIsSortPrefix: the bounded selection Rank uses returns what
// sorting everything and keeping the first k returns, ties included.
func TestSmallestIsSortPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := rng.IntN(300)
		vals := make([]int, n)
		for i := range vals {
			vals[i] = rng.IntN(50) // many ties
		}
		// A total order, as compareQuotes is: value, then index.
		less := func(a, b int32) int {
			if vals[a] != vals[b] {
				return vals[a] - vals[b]
			}
			return int(a - b)
		}
		for _, k := range []int{-1, 0, 1, 5, 20, 50, n, n + 3} {
			all := make([]int32, n)
			sel := make([]int32, n)
			for i := range all {
				all[i], sel[i] = int32(i), int32(n-1-i)
			}
			slices.SortFunc(all, less)
			if k > 0 && k < n {
				all = all[:k]
			}
			if got := smallest(sel, k, less); !slices.Equal(got, all) {
				t.Fatalf("n=%d k=%d: got %v, want %v", n, k, got, all)
			}
		}
	}
}

// TestPruningKeepsRanking: the plan search's pruning (search.go) skips only
// plans that cannot win, so the ranking — the 100 best rows, every plan,
// every figure — is what the exhaustive search gives.
func TestPruningKeepsRanking(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	zero1 := 1
	for name, p := range map[string]Profile{
		"70b-full-finetune": {Preset: "llama-2-70b", Task: FullFineTune, Tokens: 1e8},
		"8b-qlora":          {Preset: "llama-3-8b", Task: QLoRA, Tokens: 1e7},
		"70b-data":          {Preset: "llama-2-70b", Task: FullFineTune, Tokens: 1e8, Parallelism: "data"},
		"mixtral-pretrain":  {Preset: "mixtral-8x7b", Task: PreTrain, Tokens: 1e11},
		"13b-eager-zero1":   {Preset: "llama-2-13b", Task: PreTrain, Tokens: 1e10, Attention: Eager, Pin: Pin{ZeRO: &zero1}},
		"7b-long":           {Preset: "mistral-7b", Task: PreTrain, Tokens: 1e10, SequenceLength: 32768, GlobalBatch: 16},
	} {
		for _, deadline := range []time.Duration{0, 72 * time.Hour} {
			// The 100 best rows: building every row (Limit -1) costs more
			// than the searches under -race.
			o := Options{Offers: c.Offers(), Accelerator: c.Accelerator, Limit: 100, Deadline: deadline}
			pruned, err := Rank(p, o)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			o.exhaustive = true
			full, err := Rank(p, o)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if full.Ranked == 0 {
				t.Fatalf("%s: nothing ranked; the comparison would prove nothing", name)
			}
			if d := cmp.Diff(full, pruned); d != "" {
				t.Errorf("%s (deadline %v): pruning changed the ranking (-exhaustive +pruned):\n%s", name, deadline, d)
			}
		}
	}
}

// TestRankSameOnAnyCoreCount: the shape searches run in parallel, and the
// ranking (rows, not-estimated list, closest miss) is the one a single core
// gives. Not parallel: it sets GOMAXPROCS, which the parallel tests wait
// for.
func TestRankSameOnAnyCoreCount(t *testing.T) {
	c := testCatalog(t)
	for name, p := range map[string]Profile{
		"70b-full-finetune": {Preset: "llama-2-70b", Task: FullFineTune, Tokens: 1e8},
		"70b-serving":       {Preset: "llama-3-70b", Task: Serving, Serving: ServingSpec{InputTokens: 1000, OutputTokens: 200, Concurrency: 64}},
		"fits-nowhere":      {Preset: "llama-3.1-405b", Task: PreTrain, Tokens: 1e12},
	} {
		o := Options{Offers: c.Offers(), Accelerator: c.Accelerator, Limit: 100, MaxNodes: 4}
		if name == "fits-nowhere" {
			// 405B's training states need more than one node of these has.
			o.MaxNodes, o.GPUs = 1, []string{"T4", "L4", "V100", "A10G", "A100"}
		}
		prev := runtime.GOMAXPROCS(1)
		one, err1 := Rank(p, o)
		runtime.GOMAXPROCS(8)
		many, err8 := Rank(p, o)
		runtime.GOMAXPROCS(prev)
		if err1 != nil || err8 != nil {
			t.Fatalf("%s: %v, %v", name, err1, err8)
		}
		if name == "fits-nowhere" && one.Shortfall == nil {
			t.Fatalf("%s: expected a closest miss", name)
		}
		if d := cmp.Diff(one, many); d != "" {
			t.Errorf("%s: 8 cores rank differently from 1 (-1 +8):\n%s", name, d)
		}
	}
}
