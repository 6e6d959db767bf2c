package model

import "time"

// Unavailability kinds, after the provider error that set them.
const (
	// UnavailableCapacity: the offer (instance type × zone × capacity
	// type) had no capacity (provider.IsInsufficientCapacity).
	UnavailableCapacity = "insufficient-capacity"
	// UnavailableQuota: the pool's provider region is out of quota
	// (provider.IsQuotaExceeded): no offer of that region is launched
	// for the pool.
	UnavailableQuota = "quota-exceeded"
)

// Unavailable is one thing a provider said it cannot sell now, until
// Until (`gpufleet offers --unavailable`, explain).
type Unavailable struct {
	Kind string `json:"kind"`
	// Pool is the pool whose launch was refused; a capacity entry holds
	// for every pool, a quota entry for this pool only.
	Pool string `json:"pool"`
	// Offer is the refused offer; for a quota entry its Provider and
	// Region are what is out.
	Offer  Offer     `json:"offer"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// Key identifies the entry: the offer (provider/region/zone/instance
// type/capacity type) for capacity; the pool, provider and region for
// quota.
func (u Unavailable) Key() string {
	o := u.Offer
	if u.Kind == UnavailableQuota {
		return u.Kind + "/" + u.Pool + "/" + o.Provider + "/" + o.Region
	}
	return u.Kind + "/" + o.Provider + "/" + o.Region + "/" + o.Zone + "/" + o.InstanceType + "/" + string(o.CapacityType)
}
