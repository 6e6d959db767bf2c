package efficiency

import (
	"math"
	"testing"
)

func TestEffectiveCost(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		alloc int64
		sm    float64
		want  int64
	}{
		"a third, quantised to ppm": {3_000_000, 1.0 / 3, 999_999},
		"idle":                      {98_320_000, 0.03, 2_949_600},
		"rounds half up":            {1, 0.5, 1},
		"below a half":              {1, 0.4999, 0},
		"negative (credit)":         {-3, 0.5, -2},
		"clamped above":             {500, 1.7, 500},
		"clamped below":             {500, -0.2, 0},
		"unknown":                   {500, math.NaN(), 0},
		"huge":                      {math.MaxInt64, 0.5, math.MaxInt64/2 + 1},
		"min":                       {math.MinInt64, 0.999_999_9, math.MinInt64},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := EffectiveCost(tt.alloc, tt.sm); got != tt.want {
				t.Errorf("EffectiveCost(%d, %v) = %d, want %d", tt.alloc, tt.sm, got, tt.want)
			}
		})
	}
}

func FuzzEffectiveCost(f *testing.F) {
	f.Add(int64(3_000_000), 0.5)
	f.Add(int64(math.MinInt64), 0.9999999)
	f.Add(int64(math.MaxInt64), 1e-7)
	f.Fuzz(func(t *testing.T, alloc int64, sm float64) {
		got := EffectiveCost(alloc, sm)
		if (alloc >= 0 && (got < 0 || got > alloc)) || (alloc < 0 && (got > 0 || got < alloc)) {
			t.Fatalf("EffectiveCost(%d, %v) = %d, outside [0, alloc]", alloc, sm, got)
		}
		if !math.IsNaN(sm) && sm > 0 && sm < 1 && math.Abs(float64(alloc)) < 1e12 {
			want := float64(alloc) * math.Floor(sm*1e6+0.5) / 1e6
			if math.Abs(float64(got)-want) > 0.5000001 {
				t.Fatalf("EffectiveCost(%d, %v) = %d, want about %v", alloc, sm, got, want)
			}
		}
	})
}
