package purchase

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRecommend(t *testing.T) {
	t.Parallel()
	// 100 hours: 60 at 10 GPUs, 40 at 20 GPUs; interruptible 5 GPUs always.
	usage := make([]float64, 100)
	intr := make([]float64, 100)
	for i := range usage {
		usage[i] = 10
		if i >= 60 {
			usage[i] = 20
		}
		intr[i] = 5
	}
	tests := map[string]struct {
		in   Input
		want Recommendation
	}{
		"discount below the upper share commits the base": {
			// d = 0.3: P(u > k) ≤ 0.7 first holds at k = 10.
			in: Input{GPUModel: "H100", Usage: usage, Interruptible: intr, OnDemand: 2, Term: Term{Months: 12, Discount: 0.3}, SpotPrice: 1, SpotOverhead: 0.1},
			want: Recommendation{GPUModel: "H100", Commit: 10, Utilisation: 1, Coverage: 1000.0 / 1400,
				OnDemandCost: 2800, MixedCost: 10*1.4*100 + 2*400, SavingsPercent: 100 * (2800 - 2200) / 2800.0,
				SpotShare: 200.0 / 400, SpotSaving: 200 * (2 - 1.1)},
		},
		"deep discount commits the peak": {
			// d = 0.7: P(u > k) ≤ 0.3 needs k = 20 (40% of hours exceed 10).
			in: Input{GPUModel: "L4", Usage: usage, OnDemand: 1, Term: Term{Months: 36, Discount: 0.7, Upfront: 1}},
			want: Recommendation{GPUModel: "L4", Commit: 20, Utilisation: 1400.0 / 2000, Coverage: 1,
				OnDemandCost: 1400, MixedCost: 20 * 0.3 * 100, SavingsPercent: 100 * (1400 - 600) / 1400.0,
				// upfront 0.3·20·730·36 = 157,680; monthly saving 1·1400/(100/730) = 10,220.
				BreakEvenMonths: 157680 / 10220.0},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Recommend(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got.Reason = ""
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestCommitIsOptimal(t *testing.T) {
	t.Parallel()
	usage := make([]float64, 24*30)
	for i := range usage {
		usage[i] = float64(8 + (i*7919)%13) // 8..20, spread
	}
	for _, d := range []float64{0.1, 0.3, 0.5, 0.8} {
		rec, err := Recommend(Input{Usage: usage, OnDemand: 3, Term: Term{Months: 12, Discount: d}})
		if err != nil {
			t.Fatal(err)
		}
		cost := func(k int) float64 {
			v := float64(k) * 3 * (1 - d) * float64(len(usage))
			for _, u := range usage {
				v += 3 * math.Max(0, u-float64(k))
			}
			return v
		}
		for k := 0; k <= 21; k++ {
			if cost(k) < cost(rec.Commit)-1e-6 {
				t.Errorf("d=%v: commit %d costs %v, but %d costs %v", d, rec.Commit, cost(rec.Commit), k, cost(k))
			}
		}
	}
}
