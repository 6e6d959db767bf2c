package forecast

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDaily(t *testing.T) {
	t.Parallel()
	weekly := []float64{100, 100, 100, 100, 100, 20, 20} // weekday / weekend
	var trend []float64
	for d := 0; d < 56; d++ {
		trend = append(trend, weekly[d%7]+float64(d))
	}
	tests := map[string]struct {
		series     []float64
		method     string
		wantMean   []float64 // first 7 days, within tol
		tol        float64
		wantSigma0 bool
	}{
		"seasonal with trend": {
			series: trend, method: "holt-winters additive, weekly seasonality",
			wantMean: []float64{156, 157, 158, 159, 160, 81, 82}, tol: 3,
		},
		"short history falls back to the mean": {
			series: []float64{10, 20, 30}, method: "mean (short history)",
			wantMean: []float64{20, 20, 20, 20, 20, 20, 20}, tol: 1e-9,
		},
		"empty": {series: nil, method: "mean (short history)", wantMean: make([]float64, 7), tol: 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := Daily(tt.series, 14, Options{})
			if diff := cmp.Diff(tt.method, r.Method); diff != "" {
				t.Errorf("method (-want +got)\n%s", diff)
			}
			for i, w := range tt.wantMean {
				p := r.Points[i]
				if math.Abs(p.Mean-w) > tt.tol {
					t.Errorf("day %d: mean %.2f, want %.2f ± %g", i, p.Mean, w, tt.tol)
				}
				if p.Lower > p.Mean || p.Upper < p.Mean || p.Lower < 0 {
					t.Errorf("day %d: bad interval %+v", i, p)
				}
			}
			if n := len(r.Points); n != 14 {
				t.Errorf("%d points, want 14", n)
			}
			if r.Points[13].Upper-r.Points[13].Lower < r.Points[0].Upper-r.Points[0].Lower {
				t.Error("interval should widen with the horizon")
			}
		})
	}
}

func FuzzDaily(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, 20)
	f.Fuzz(func(t *testing.T, a, b, c float64, n int) {
		n = (n%60 + 60) % 60
		s := make([]float64, n)
		for i := range s {
			s[i] = []float64{a, b, c}[i%3]
		}
		for _, p := range Daily(s, 10, Options{Level: 0.9}).Points {
			if p.Lower < 0 || p.Lower > p.Mean || p.Mean > p.Upper || math.IsNaN(p.Mean) && !math.IsNaN(a+b+c) {
				if !math.IsInf(a+b+c, 0) && !math.IsNaN(a+b+c) && math.Abs(a)+math.Abs(b)+math.Abs(c) < 1e100 {
					t.Fatalf("bad point %+v", p)
				}
			}
		}
	})
}
