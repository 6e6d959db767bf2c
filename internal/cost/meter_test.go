package cost

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/model"
)

var t0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestMoneyString(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		m    model.Money
		want string
	}{
		"zero":     {0, "$0.000000"},
		"micro":    {1, "$0.000001"},
		"dollars":  {12_345_678, "$12.345678"},
		"negative": {-1, "-$0.000001"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.m.String()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			back, err := model.ParseMoney(tt.want)
			if err != nil || back != tt.m {
				t.Errorf("ParseMoney(%q) = %v, %v", tt.want, back, err)
			}
		})
	}
}

func TestFromDollars(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		d    float64
		want model.Money
	}{
		"h100 hour":      {98.32, 98_320_000},
		"half rounds up": {0.0000005, 1},
		"negative":       {-0.0000005, -1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, model.FromDollars(tt.d)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestNodeCostTelescopes(t *testing.T) {
	t.Parallel()
	p := model.FromDollars(3.67) // does not divide 3600 evenly
	whole := NodeCost(p, at(0), at(24*time.Hour))
	var parts model.Money
	for s := time.Duration(0); s < 24*time.Hour; s += 7 * time.Second {
		parts += NodeCost(p, at(s), at(min(s+7*time.Second, 24*time.Hour)))
	}
	if diff := cmp.Diff(whole, parts); diff != "" {
		t.Errorf("(-whole +sum of parts)\n%s", diff)
	}
	if diff := cmp.Diff(model.FromDollars(3.67*24), whole); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

type summary struct {
	Kind  model.LedgerKind
	Job   string
	Cost  model.Money
	Secs  int64
	GPUS  float64
	Eff   model.Money
	Range string
}

func summarise(es []model.LedgerEntry) []summary {
	var out []summary
	for _, e := range es {
		out = append(out, summary{e.Kind, e.JobID, e.Cost, e.Seconds, e.GPUSeconds, e.EffectiveCost,
			fmt.Sprintf("%s-%s", e.From.Sub(t0), e.To.Sub(t0))})
	}
	return out
}

func TestMeter(t *testing.T) {
	t.Parallel()
	hour := time.Hour
	node := func(gpus, cpu float64, price float64, allocs ...Allocation) NodeUsage {
		return NodeUsage{NodeID: "n1", GPUs: gpus, CPU: cpu, PricePerHour: model.FromDollars(price),
			CapacityType: model.OnDemand, PriceSource: model.PriceCatalog, Allocations: allocs}
	}
	tests := map[string]struct {
		nodes []NodeUsage
		want  []summary
	}{
		"empty node is all idle": {
			nodes: []NodeUsage{node(8, 96, 8)},
			want:  []summary{{model.LedgerIdle, "", 8 * model.Dollar, 3600, 8 * 3600, 0, "0s-1h0m0s"}},
		},
		"gpu shares": {
			nodes: []NodeUsage{node(8, 96, 8,
				Allocation{JobID: "a", GPUs: 4, CPU: 10},
				Allocation{JobID: "b", GPUs: 2, CPU: 80, SMActive: 0.5, Telemetry: true})},
			want: []summary{
				{model.LedgerAllocation, "a", 4 * model.Dollar, 3600, 4 * 3600, 0, "0s-1h0m0s"},
				{model.LedgerAllocation, "b", 2 * model.Dollar, 3600, 2 * 3600, model.Dollar, "0s-1h0m0s"},
				{model.LedgerIdle, "", 2 * model.Dollar, 3600, 2 * 3600, 0, "0s-1h0m0s"},
			},
		},
		"partial overlap is metered for its overlap only": {
			nodes: []NodeUsage{node(4, 32, 4,
				Allocation{JobID: "a", GPUs: 4, Start: at(-hour), End: at(30 * time.Minute)},
				Allocation{JobID: "b", GPUs: 2, Start: at(45 * time.Minute)})},
			want: []summary{
				{model.LedgerAllocation, "a", 2 * model.Dollar, 1800, 4 * 1800, 0, "0s-30m0s"},
				{model.LedgerAllocation, "b", model.Dollar / 2, 900, 2 * 900, 0, "45m0s-1h0m0s"},
				{model.LedgerIdle, "", 3 * model.Dollar / 2, 3600, 4*3600 - 4*1800 - 2*900, 0, "0s-1h0m0s"},
			},
		},
		"cpu-only work on a gpu node takes cpu share of free gpus": {
			nodes: []NodeUsage{node(2, 10, 2,
				Allocation{JobID: "g", GPUs: 1, CPU: 5},
				Allocation{JobID: "c", CPU: 5})},
			want: []summary{
				{model.LedgerAllocation, "g", model.Dollar, 3600, 3600, 0, "0s-1h0m0s"},
				{model.LedgerAllocation, "c", model.Dollar / 2, 3600, 0, 0, "0s-1h0m0s"},
				{model.LedgerIdle, "", model.Dollar / 2, 3600, 3600, 0, "0s-1h0m0s"},
			},
		},
		"cpu-only node by cpu share": {
			nodes: []NodeUsage{node(0, 4, 1, Allocation{JobID: "c", CPU: 1})},
			want: []summary{
				{model.LedgerAllocation, "c", model.Dollar / 4, 3600, 0, 0, "0s-1h0m0s"},
				{model.LedgerIdle, "", 3 * model.Dollar / 4, 3600, 0, 0, "0s-1h0m0s"},
			},
		},
		"thirds split by largest remainder": {
			nodes: []NodeUsage{{NodeID: "n", GPUs: 3, PricePerHour: 3600 * 100, Allocations: []Allocation{
				{JobID: "a", GPUs: 1}, {JobID: "b", GPUs: 1}, {JobID: "c", GPUs: 1}}}},
			want: []summary{
				{model.LedgerAllocation, "a", 34, 1, 1, 0, "0s-1s"},
				{model.LedgerAllocation, "b", 33, 1, 1, 0, "0s-1s"},
				{model.LedgerAllocation, "c", 33, 1, 1, 0, "0s-1s"},
				{model.LedgerIdle, "", 0, 1, 0, 0, "0s-1s"},
			},
		},
		"node launched inside the pass": {
			nodes: []NodeUsage{{NodeID: "n", GPUs: 1, PricePerHour: model.Dollar, Start: at(59 * time.Minute)}},
			want:  []summary{{model.LedgerIdle, "", 16_667, 60, 60, 0, "59m0s-1h0m0s"}},
		},
		"terminated node": {
			nodes: []NodeUsage{{NodeID: "n", GPUs: 1, PricePerHour: model.Dollar, End: at(-time.Minute)}},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			to := at(hour)
			if name == "thirds split by largest remainder" {
				to = at(time.Second)
			}
			got := summarise(Meter(tt.nodes, t0, to))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// FuzzMeterInvariant checks that job cost + idle cost = node cost exactly
// and that no entry is negative, for arbitrary shapes and prices.
func FuzzMeterInvariant(f *testing.F) {
	f.Add(uint64(1), uint16(8), uint32(98_320_000), int64(3600), uint8(3))
	f.Add(uint64(7), uint16(0), uint32(1), int64(1), uint8(9))
	f.Add(uint64(42), uint16(3), uint32(4_294_967_295), int64(86400*31), uint8(17))
	f.Fuzz(func(t *testing.T, seed uint64, gpus uint16, price uint32, secs int64, nalloc uint8) {
		if secs < 0 {
			secs = -secs
		}
		secs %= 86400 * 62
		r := rand.New(rand.NewPCG(seed, 1))
		nu := NodeUsage{NodeID: "n", GPUs: float64(gpus % 17), CPU: float64(r.IntN(200)), PricePerHour: model.Money(price)}
		if r.IntN(4) == 0 {
			nu.Start = at(time.Duration(r.Int64N(secs+1)) * time.Second)
		}
		for i := 0; i < int(nalloc%24); i++ {
			a := Allocation{JobID: fmt.Sprint(i), GPUs: float64(r.IntN(5)) / float64(1+r.IntN(3)), CPU: r.Float64() * 20}
			if r.IntN(2) == 0 {
				a.Start = at(time.Duration(r.Int64N(secs+1)-100) * time.Second)
			}
			if r.IntN(2) == 0 {
				a.End = at(time.Duration(r.Int64N(secs+100)) * time.Second)
			}
			nu.Allocations = append(nu.Allocations, a)
		}
		from, to := at(0), at(time.Duration(secs)*time.Second)
		es := Meter([]NodeUsage{nu}, from, to)
		var sum model.Money
		for _, e := range es {
			if e.Cost < 0 || e.EffectiveCost < 0 || e.GPUSeconds < 0 {
				t.Fatalf("negative entry %+v", e)
			}
			sum += e.Cost
		}
		lo := from
		if nu.Start.After(lo) {
			lo = nu.Start
		}
		if want := NodeCost(nu.PricePerHour, lo, to); sum != want {
			t.Fatalf("entries sum to %v, node cost is %v", sum, want)
		}
		if secs > 0 && (len(es) == 0 || es[len(es)-1].Kind != model.LedgerIdle) && lo.Before(to) {
			t.Fatalf("no idle entry: %+v", es)
		}
	})
}

func fleet(n int, seed uint64) []NodeUsage {
	r := rand.New(rand.NewPCG(seed, 2))
	caps := []model.CapacityType{model.OnDemand, model.Spot, model.Owned}
	nodes := make([]NodeUsage, n)
	for i := range nodes {
		nu := NodeUsage{NodeID: fmt.Sprintf("node-%05d", i), GPUs: 8, CPU: 96, GPUModel: "H100",
			CapacityType: caps[i%3], PriceSource: model.PriceCatalog, PricePerHour: model.FromDollars(20 + r.Float64()*80)}
		left := 8
		for left > 0 && r.IntN(5) != 0 {
			g := 1 + r.IntN(left)
			left -= g
			nu.Allocations = append(nu.Allocations, Allocation{
				JobID: fmt.Sprintf("job-%d-%d", i, left), Attempt: 1, Project: fmt.Sprintf("p%d", r.IntN(3)),
				User: "u", Queue: "default", Tags: map[string]string{"team": "nlp"}, GPUs: float64(g), CPU: float64(g * 10),
				Start: at(time.Duration(r.IntN(120)) * time.Second)})
		}
		nodes[i] = nu
	}
	return nodes
}

// BenchmarkMeter10kNodes is one metering pass (a minute) over 10,000
// nodes; the target is < 10 ms.
func BenchmarkMeter10kNodes(b *testing.B) {
	nodes := fleet(10_000, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Meter(nodes, at(time.Minute), at(2*time.Minute))
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkAppendMeter10kNodes is the controller's steady state: the same
// pass into a reused buffer.
func BenchmarkAppendMeter10kNodes(b *testing.B) {
	nodes := fleet(10_000, 1)
	buf := Meter(nodes, at(time.Minute), at(2*time.Minute))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		buf = AppendMeter(buf[:0], nodes, at(time.Minute), at(2*time.Minute))
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
}

// TestMeterFromOrigin: a node with an Origin (its provider's launch time,
// not on a whole second) is billed per whole second since it, rounded half
// up, as its provider bills it, however the passes cut its life.
func TestMeterFromOrigin(t *testing.T) {
	t.Parallel()
	price := model.FromDollars(98.32)
	launch := at(17*time.Minute + 300*time.Millisecond)
	tests := map[string]struct {
		stop   time.Time
		passes []time.Duration // pass boundaries after t0
	}{
		"one pass":              {stop: at(40*time.Minute + 900*time.Millisecond), passes: []time.Duration{0, time.Hour}},
		"minute passes":         {stop: at(3*time.Hour + 59*time.Second), passes: everyMinute(4 * time.Hour)},
		"stop between passes":   {stop: at(61*time.Minute + 200*time.Millisecond), passes: []time.Duration{0, time.Hour, 2 * time.Hour}},
		"15 s after the launch": {stop: launch.Add(15 * time.Second), passes: everyMinute(time.Hour)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			nu := NodeUsage{NodeID: "n", GPUs: 8, PricePerHour: price, Start: launch, End: tt.stop, Origin: launch,
				Allocations: []Allocation{{JobID: "j", GPUs: 8, Start: launch.Add(10 * time.Second)}}}
			var total model.Money
			var secs int64
			for i := 0; i+1 < len(tt.passes); i++ {
				for _, e := range Meter([]NodeUsage{nu}, at(tt.passes[i]), at(tt.passes[i+1])) {
					total += e.Cost
					if e.Kind == model.LedgerIdle {
						secs += e.Seconds
					}
				}
			}
			billed := int64(tt.stop.Sub(launch) / time.Second)
			want := (int64(price)*billed + 1800) / 3600
			if diff := cmp.Diff([2]int64{billed, want}, [2]int64{secs, int64(total)}); diff != "" {
				t.Errorf("[seconds, µ$] (-bill +ledger)\n%s", diff)
			}
		})
	}
}

func everyMinute(d time.Duration) []time.Duration {
	var out []time.Duration
	for s := time.Duration(0); s <= d; s += time.Minute {
		out = append(out, s)
	}
	return out
}
