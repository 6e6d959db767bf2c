package catalog

import "math"

// The AWS Spot Advisor files each instance type, per region, in one of five
// bands by the share of its instances that AWS interrupted over the trailing
// month: <5%, 5-10%, 10-15%, 15-20% and >20%.
const (
	spotBands = 5

	// defaultSpotBand stands in where no band is known: every spot offer of
	// GCP, Azure and OCI (the shared data has no interruption figures for
	// them, so no cloud gets a different guess) and the AWS types missing
	// from the Advisor snapshot. It is the median band (15-20%) of AWS's
	// accelerated Linux instance types in that snapshot, so unknown capacity
	// is neither the safest nor the riskiest choice on offer.
	defaultSpotBand = 3

	// hoursPerMonth is the month the Advisor's share refers to: 8,760 h / 12.
	hoursPerMonth = 730
)

// spotBand returns the Advisor band of an AWS instance type in a region, or
// defaultSpotBand.
func spotBand(bands map[bandKey]int, provider, instanceType, region string) int {
	if provider == "aws" {
		if b, ok := bands[bandKey{instanceType, region}]; ok {
			return b
		}
	}
	return defaultSpotBand
}

// interruptionRate converts an Advisor band into expected interruptions per
// instance-hour. The band's midpoint p is read as the probability that an
// instance running a whole month is interrupted at least once, with
// interruptions arriving at a constant rate λ (a Poisson process):
// 1-p = exp(-λ·730h), so λ = -ln(1-p)/730h. The open top band (>20%) is
// taken as 20-30%, midpoint 25%: the Advisor does not say how far above 20%
// it reaches, and 25% continues the other bands' 5-point width rather than
// inventing a tail.
func interruptionRate(band int) float64 {
	midpoint := [spotBands]float64{0.025, 0.075, 0.125, 0.175, 0.25}[band]
	return -math.Log1p(-midpoint) / hoursPerMonth
}
