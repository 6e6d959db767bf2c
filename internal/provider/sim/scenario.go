package sim

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Scenario overrides the simulation's defaults. The zero value changes
// nothing. See doc.go for the YAML schema.
type Scenario struct {
	// Clouds holds per-cloud settings keyed by catalog provider name.
	Clouds map[string]CloudSpec `json:"clouds,omitempty"`
	// Offers are rules applied to every offer they match, in order; a later
	// rule overrides what an earlier one set, field by field.
	Offers []OfferRule `json:"offers,omitempty"`
}

// CloudSpec overrides one cloud's defaults.
type CloudSpec struct {
	BootDelay  *Range          `json:"bootDelay,omitempty"`
	NoticeLead *model.Duration `json:"noticeLead,omitempty"`
	// Quota is GPUs per GPU model, counted separately for on-demand and
	// spot; the key "*" covers models not named.
	Quota map[string]int `json:"quota,omitempty"`
}

// Range is a closed interval of durations; a draw is uniform in it.
type Range struct {
	Min model.Duration `json:"min"`
	Max model.Duration `json:"max"`
}

// OfferRule sets the behaviour of the offers Match selects.
type OfferRule struct {
	Match Match `json:"match"`
	// Capacity is how many instances of the offer can run at once.
	Capacity *int `json:"capacity,omitempty"`
	// InterruptionRate replaces the catalog's spot rate, in interruptions
	// per instance-hour; it applies to spot offers only.
	InterruptionRate *float64 `json:"interruptionRate,omitempty"`
	// InterruptAfter issues the spot notice this long after launch, instead
	// of a random draw.
	InterruptAfter *model.Duration `json:"interruptAfter,omitempty"`
	BootDelay      *Range          `json:"bootDelay,omitempty"`
	Fail           *Failure        `json:"fail,omitempty"`
}

// Match selects offers. Each field is a path.Match pattern ("us-*",
// "p5.*"); an empty field matches anything.
type Match struct {
	Cloud        string `json:"cloud,omitempty"`
	Region       string `json:"region,omitempty"`
	Zone         string `json:"zone,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	GPU          string `json:"gpu,omitempty"`
	// CapacityType is on-demand, spot or reserved.
	CapacityType model.CapacityType `json:"capacityType,omitempty"`
}

// Failure injects launch errors on an offer.
type Failure struct {
	// First fails the offer's first N launch attempts.
	First int `json:"first,omitempty"`
	// Probability fails each later attempt with this chance, drawn from
	// the seed, the offer and the attempt number.
	Probability float64 `json:"probability,omitempty"`
	// Error is the kind: insufficient-capacity (the default),
	// quota-exceeded or transient.
	Error string `json:"error,omitempty"`
}

// Failure kinds.
const (
	FailInsufficientCapacity = "insufficient-capacity"
	FailQuotaExceeded        = "quota-exceeded"
	FailTransient            = "transient"
)

// ParseScenario decodes a YAML (or JSON) scenario strictly and validates
// it. Its error is a model.FieldErrors listing every problem by path.
func ParseScenario(data []byte) (*Scenario, error) {
	var s Scenario
	if fe := manifest.DecodeYAML(data, &s); len(fe) > 0 {
		return nil, fe.Err()
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate reports every problem with s that does not need the catalog,
// as a model.FieldErrors.
func (s *Scenario) Validate() error {
	var fe model.FieldErrors
	names := make([]string, 0, len(s.Clouds))
	for name := range s.Clouds {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c := s.Clouds[name]
		p := keyPath("clouds", name)
		if name == "" {
			fe.Add("clouds", "a cloud name must not be empty")
		}
		validateRange(&fe, p+".bootDelay", c.BootDelay)
		if c.NoticeLead != nil && *c.NoticeLead <= 0 {
			fe.Add(p+".noticeLead", "must be > 0")
		}
		for gpu, n := range c.Quota {
			if gpu == "" {
				fe.Add(p+".quota", "a GPU model must not be empty")
			}
			if n < 0 {
				fe.Add(keyPath(p+".quota", gpu), "must be >= 0")
			}
		}
	}
	for i, r := range s.Offers {
		p := "offers[" + strconv.Itoa(i) + "]"
		m := r.Match
		for field, pat := range map[string]string{"cloud": m.Cloud, "region": m.Region, "zone": m.Zone, "instanceType": m.InstanceType, "gpu": m.GPU} {
			if _, err := path.Match(pat, ""); err != nil {
				fe.Add(p+".match."+field, fmt.Sprintf("%q is not a valid pattern", pat))
			}
		}
		switch m.CapacityType {
		case "", model.OnDemand, model.Spot, model.Reserved:
		default:
			fe.Add(p+".match.capacityType", fmt.Sprintf("%q is not on-demand, spot or reserved", m.CapacityType))
		}
		if r.Capacity == nil && r.InterruptionRate == nil && r.InterruptAfter == nil && r.BootDelay == nil && r.Fail == nil {
			fe.Add(p, "sets nothing; want capacity, interruptionRate, interruptAfter, bootDelay or fail")
		}
		if r.Capacity != nil && *r.Capacity < 0 {
			fe.Add(p+".capacity", "must be >= 0")
		}
		if r.InterruptionRate != nil && (!(*r.InterruptionRate >= 0) || math.IsInf(*r.InterruptionRate, 0)) {
			fe.Add(p+".interruptionRate", "must be a finite number >= 0")
		}
		if r.InterruptAfter != nil && *r.InterruptAfter <= 0 {
			fe.Add(p+".interruptAfter", "must be > 0")
		}
		validateRange(&fe, p+".bootDelay", r.BootDelay)
		if f := r.Fail; f != nil {
			if f.First < 0 {
				fe.Add(p+".fail.first", "must be >= 0")
			}
			if !(f.Probability >= 0 && f.Probability <= 1) {
				fe.Add(p+".fail.probability", "must be between 0 and 1")
			}
			switch f.Error {
			case "", FailInsufficientCapacity, FailQuotaExceeded, FailTransient:
			default:
				fe.Add(p+".fail.error", fmt.Sprintf("%q is not %s, %s or %s", f.Error, FailInsufficientCapacity, FailQuotaExceeded, FailTransient))
			}
			if f.First == 0 && f.Probability == 0 {
				fe.Add(p+".fail", "fails nothing; want first > 0 or probability > 0")
			}
		}
	}
	return fe.Err()
}

func validateRange(fe *model.FieldErrors, p string, r *Range) {
	switch {
	case r == nil:
	case r.Min < 0:
		fe.Add(p+".min", "must be >= 0")
	case r.Max < r.Min:
		fe.Add(p+".max", "must be >= min")
	}
}

// matches reports whether the rule selects o.
func (m Match) matches(o model.Offer) bool {
	glob := func(pat, s string) bool {
		if pat == "" {
			return true
		}
		ok, _ := path.Match(pat, s)
		return ok
	}
	return glob(m.Cloud, o.Provider) && glob(m.Region, o.Region) && glob(m.Zone, o.Zone) &&
		glob(m.InstanceType, o.InstanceType) && glob(m.GPU, o.GPU) &&
		(m.CapacityType == "" || m.CapacityType == o.CapacityType)
}

// keyPath appends a map key to a field path as the manifest package writes
// it: ".key" for plain keys, `["key"]` for any other.
func keyPath(p, key string) string {
	plain := key != ""
	for _, c := range key {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			plain = false
		}
	}
	if plain {
		return p + "." + key
	}
	return p + "[" + strconv.Quote(key) + "]"
}
