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
	var buf [160]byte
	return string(u.AppendKey(buf[:0]))
}

// AppendKey appends u.Key() to b: a map lookup by
// m[string(u.AppendKey(buf[:0]))] allocates nothing.
func (u Unavailable) AppendKey(b []byte) []byte {
	o := u.Offer
	b = append(append(b, u.Kind...), '/')
	if u.Kind == UnavailableQuota {
		b = append(append(b, u.Pool...), '/')
		b = append(append(b, o.Provider...), '/')
		return append(b, o.Region...)
	}
	b = append(append(b, o.Provider...), '/')
	b = append(append(b, o.Region...), '/')
	b = append(append(b, o.Zone...), '/')
	b = append(append(b, o.InstanceType...), '/')
	return append(b, o.CapacityType...)
}
