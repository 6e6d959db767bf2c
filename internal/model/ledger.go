package model

import "time"

// PriceSource says where a node's price came from.
type PriceSource string

// Price sources.
const (
	// PriceCatalog is the provider's list price from the catalog.
	PriceCatalog PriceSource = "catalog"
	// PriceCustom is a price per hour given in the custom price file.
	PriceCustom PriceSource = "custom"
	// PriceAmortized is owned hardware: purchase price spread over its
	// amortisation period, plus running costs, from the custom price file.
	PriceAmortized PriceSource = "amortized"
)

// LedgerKind tells allocation entries from idle entries.
type LedgerKind string

// Ledger entry kinds.
const (
	LedgerAllocation LedgerKind = "allocation"
	LedgerIdle       LedgerKind = "idle"
)

// LedgerEntry is one ledger row: an allocation's or a node's idle share of one
// node over one metering pass.
type LedgerEntry struct {
	Kind         LedgerKind
	NodeID       string
	Pool         string
	Provider     string
	Region       string
	InstanceType string
	GPUModel     string
	CapacityType CapacityType
	PriceSource  PriceSource
	PricePerHour Money

	// Attribution; empty on idle entries.
	JobID     string
	AttemptID string
	Attempt   int
	Project   string
	User      string
	Queue     string
	Tags      map[string]string

	// GPUs and CPU held (for idle: the capacity left unallocated at the end
	// of the pass is not tracked; see GPUSeconds).
	GPUs float64
	CPU  float64
	// From and To bound the metered overlap, whole seconds.
	From, To time.Time
	Seconds  int64
	// GPUSeconds is GPUs held × seconds; for idle, the node's GPU-seconds
	// not held by any allocation.
	GPUSeconds float64
	Cost       Money
	// EffectiveCost is Cost × SMActive where Telemetry is set, rounded half
	// up to the micro-dollar; it is an estimate, never summed into Cost.
	EffectiveCost Money
	SMActive      float64
	Telemetry     bool
}

// FiredKey names one threshold of one budget in one period. The shell
// stores the set of fired keys (a store table) so each fires once per
// period across restarts; a new period has new keys, which re-arms them.
type FiredKey struct {
	Budget      string
	Threshold   int
	PeriodStart time.Time
}
