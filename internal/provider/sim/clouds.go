package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// cloudDefaults are one simulated cloud's published behaviour; doc.go gives
// the source of each figure.
type cloudDefaults struct {
	bootMin, bootMax time.Duration
	noticeLead       time.Duration
}

var clouds = map[string]cloudDefaults{
	"aws":    {100 * time.Second, 150 * time.Second, 120 * time.Second},
	"gcp":    {130 * time.Second, 160 * time.Second, 30 * time.Second},
	"azure":  {320 * time.Second, 380 * time.Second, 30 * time.Second},
	"oci":    {120 * time.Second, 180 * time.Second, 30 * time.Second},
	"lambda": {180 * time.Second, 300 * time.Second, 30 * time.Second},
	"vast":   {60 * time.Second, 180 * time.Second, 30 * time.Second},
}

// otherCloud stands in for a cloud the table does not know (offers a test
// made up).
var otherCloud = cloudDefaults{120 * time.Second, 180 * time.Second, 30 * time.Second}

func defaultsFor(cloud string) cloudDefaults {
	if d, ok := clouds[cloud]; ok {
		return d
	}
	return otherCloud
}

const (
	// DefaultQuota is the GPUs each cloud allows per GPU model, counted
	// separately for on-demand and spot, unless a scenario says otherwise.
	DefaultQuota = 256

	// Default capacity: each offer holds 16, 32, 64 or 128 GPUs (chosen
	// from the seed and the offer), so at least one instance and up to 128
	// single-GPU instances or 16 eight-GPU ones.
	minCapacityGPUs = 16
	capacitySteps   = 4

	// neverHours caps an exponential draw: an interruption further out than
	// this (about 114 years) is no interruption.
	neverHours = 1e6
)

// offerKey identifies an offer; price and rate are attributes of it.
type offerKey struct {
	provider, region, zone, instanceType, gpu string
	gpuCount                                  int
	gpuMemory                                 model.Bytes
	capacityType                              model.CapacityType
}

func keyOf(o model.Offer) offerKey {
	return offerKey{o.Provider, o.Region, o.Zone, o.InstanceType, o.GPU, o.GPUCount, o.GPUMemory, o.CapacityType}
}

func (k offerKey) String() string {
	return fmt.Sprintf("%s/%s/%s/%s/%s/%d/%d/%s", k.provider, k.region, k.zone, k.instanceType, k.gpu, k.gpuCount, k.gpuMemory, k.capacityType)
}

// unit returns a number in [0, 1) that depends only on seed and parts:
// FNV-1a over them, finished with SplitMix64 so that nearby inputs give
// unrelated outputs.
func unit(seed int64, parts ...string) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	x := h.Sum64() + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// exponential turns u in [0, 1) into a draw from an exponential
// distribution with rate per hour, or false when it falls past neverHours.
func exponential(u, rate float64) (time.Duration, bool) {
	if rate <= 0 {
		return 0, false
	}
	h := -math.Log1p(-u) / rate
	if h > neverHours || math.IsNaN(h) {
		return 0, false
	}
	return time.Duration(h * float64(time.Hour)), true
}

// microUSD is the charge for whole seconds at a price per hour: the price
// is first rounded to integer micro-dollars per hour, then
// seconds × that / 3600 is rounded half up, so a bill is exact integer
// arithmetic from one rounding of the catalog's float price.
func microUSD(pricePerHour float64, seconds int64) int64 {
	perHour := int64(math.Round(pricePerHour * 1e6))
	return (seconds*perHour + 1800) / 3600
}
