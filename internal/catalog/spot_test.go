package catalog

import (
	"math"
	"testing"
)

func TestInterruptionRate(t *testing.T) {
	t.Parallel()
	// Expected interruptions per instance-hour for a monthly probability p.
	perHour := func(p float64) float64 { return -math.Log(1-p) / 730 }
	tests := map[string]struct {
		band int
		want float64
	}{
		"<5% reads as 2.5%":   {0, perHour(0.025)},
		"5-10% reads as 7.5%": {1, perHour(0.075)},
		"10-15%":              {2, perHour(0.125)},
		"15-20%":              {3, perHour(0.175)},
		">20% reads as 25%":   {4, perHour(0.25)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := interruptionRate(tt.band); math.Abs(got-tt.want) > 1e-15 {
				t.Errorf("interruptionRate(%d) = %g, want %g", tt.band, got, tt.want)
			}
		})
	}
	// About one interruption per 2,500 instance-hours in the top band.
	if got := 1 / interruptionRate(4); got < 2500 || got > 2600 {
		t.Errorf("mean hours between interruptions in band 4 = %.0f, want about 2,538", got)
	}
}

func TestSpotBand(t *testing.T) {
	t.Parallel()
	bands := map[bandKey]int{{"p5.48xlarge", "us-east-1"}: 4}
	tests := map[string]struct {
		provider, instanceType, region string
		want                           int
	}{
		"aws listed":             {"aws", "p5.48xlarge", "us-east-1", 4},
		"aws other region":       {"aws", "p5.48xlarge", "us-west-2", defaultSpotBand},
		"other cloud, same name": {"gcp", "p5.48xlarge", "us-east-1", defaultSpotBand},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := spotBand(bands, tt.provider, tt.instanceType, tt.region); got != tt.want {
				t.Errorf("spotBand = %d, want %d", got, tt.want)
			}
		})
	}
}
