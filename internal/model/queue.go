package model

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"time"
)

// AnyGPU is the quota key that counts GPUs of every model not listed on
// their own.
const AnyGPU = "*"

// Queue is a named share of the fleet (DESIGN.md §2): a nominal quota of
// GPUs per model, a cohort whose members lend each other what they leave
// unused, and a weight for fair share. Treat a published *Queue as immutable.
type Queue struct {
	Name string    `json:"name"`
	Spec QueueSpec `json:"spec"`
	// Version increases with every committed change.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// QueueSpec is what an operator declares; manifests of kind Queue carry it.
type QueueSpec struct {
	// Cohort names the group of queues that lend each other unused quota;
	// empty means the queue borrows from no one and lends to no one.
	Cohort string `json:"cohort,omitempty"`
	// Weight scales the queue's fair share (default 1).
	Weight float64 `json:"weight,omitempty"`
	// Quota maps a GPU model (or "*" for any model not listed) to the
	// queue's nominal GPUs and how many more it may borrow. An empty Quota
	// means unlimited: the queue is bounded only by the fleet.
	Quota map[string]GPUQuota `json:"quota,omitempty"`
}

// GPUQuota is one line of a queue's quota, in GPUs (fractions allowed for
// shared GPUs).
type GPUQuota struct {
	Nominal float64 `json:"nominal"`
	// BorrowingLimit caps what the queue may use above Nominal from its
	// cohort's unused quota; nil means no cap beyond what the cohort has.
	BorrowingLimit *float64 `json:"borrowingLimit,omitempty"`
}

// Clone returns a deep copy.
func (q *Queue) Clone() *Queue {
	c := *q
	if q.Spec.Quota != nil {
		c.Spec.Quota = make(map[string]GPUQuota, len(q.Spec.Quota))
		for k, v := range q.Spec.Quota {
			if v.BorrowingLimit != nil {
				l := *v.BorrowingLimit
				v.BorrowingLimit = &l
			}
			c.Spec.Quota[k] = v
		}
	}
	return &c
}

// EffectiveWeight is Weight, or 1 when unset.
func (s *QueueSpec) EffectiveWeight() float64 {
	if s.Weight <= 0 {
		return 1
	}
	return s.Weight
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidName reports whether s is a valid object name: lower-case letters,
// digits and dashes, 1–63 characters, starting and ending alphanumeric.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate reports every problem in s, with paths under prefix (usually
// "spec"). knownGPU says whether a GPU model exists; nil accepts any name.
func (s *QueueSpec) Validate(prefix string, knownGPU func(string) bool) FieldErrors {
	var fe FieldErrors
	p := func(f string) string { return prefix + "." + f }
	if s.Cohort != "" && !ValidName(s.Cohort) {
		fe.Add(p("cohort"), "must be lower-case letters, digits and dashes (at most 63)")
	}
	if math.IsNaN(s.Weight) || s.Weight < 0 || s.Weight > 1e6 {
		fe.Add(p("weight"), "must be between 0 and 1000000 (0 means 1)")
	}
	keys := make([]string, 0, len(s.Quota))
	for k := range s.Quota {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q := s.Quota[k]
		path := fmt.Sprintf("%s[%q]", p("quota"), k)
		if k == "" {
			fe.Add(p("quota"), "GPU model keys must not be empty (use \"*\" for any model)")
			continue
		}
		if k != AnyGPU && knownGPU != nil && !knownGPU(k) {
			fe.Add(path, fmt.Sprintf("unknown GPU model %q (see `gpufleet offers` for the catalog's models, or use \"*\")", k))
		}
		if math.IsNaN(q.Nominal) || q.Nominal < 0 || q.Nominal > 1e7 {
			fe.Add(path+".nominal", "must be between 0 and 10000000 GPUs")
		}
		if l := q.BorrowingLimit; l != nil && (math.IsNaN(*l) || *l < 0 || *l > 1e7) {
			fe.Add(path+".borrowingLimit", "must be between 0 and 10000000 GPUs")
		}
	}
	return fe
}

// PriorityClass names a priority. Higher Value runs first and may preempt
// lower values in the same queue; a class that is not Preemptible is never
// chosen as a victim.
type PriorityClass struct {
	Name        string `json:"name"`
	Value       int    `json:"value"`
	Preemptible bool   `json:"preemptible"`
}

// PriorityClasses are the built-in classes a job's spec.priority names.
// "normal" is the default.
var PriorityClasses = []PriorityClass{
	{Name: "low", Value: 0, Preemptible: true},
	{Name: "normal", Value: 100, Preemptible: true},
	{Name: "high", Value: 1000, Preemptible: true},
	{Name: "critical", Value: 10000, Preemptible: false},
}

// PriorityClassSpec is what a PriorityClass manifest declares: an admin's
// class beside (or in place of) a built-in one of the same name.
type PriorityClassSpec struct {
	// Value orders jobs (higher first) and decides preemption: a job may
	// preempt preemptible work of a lower value in its queue.
	Value int `json:"value"`
	// Preemptible says whether work of this class may be stopped for
	// higher-value work. Required: a class says which it is.
	Preemptible *bool `json:"preemptible"`
}

// MaxPriorityValue bounds a declared class's value either way.
const MaxPriorityValue = 1_000_000_000

// Validate reports every problem in s, with paths under prefix.
func (s *PriorityClassSpec) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	if s.Value < -MaxPriorityValue || s.Value > MaxPriorityValue {
		fe.Add(prefix+".value", fmt.Sprintf("must be between %d and %d", -MaxPriorityValue, MaxPriorityValue))
	}
	if s.Preemptible == nil {
		fe.Add(prefix+".preemptible", "is required: true (work of this class may be preempted) or false")
	}
	return fe
}

// ResolvePriorityClass returns the class called name: a declared one
// (the fleet's PriorityClass documents) first, else a built-in one.
func ResolvePriorityClass(declared []PriorityClass, name string) (PriorityClass, bool) {
	for _, c := range declared {
		if c.Name == name {
			return c, true
		}
	}
	return LookupPriorityClass(name)
}

// PriorityClassNames lists the built-in classes, then the declared ones
// that are not built-in, for messages.
func PriorityClassNames(declared []PriorityClass) []string {
	names := make([]string, 0, len(PriorityClasses)+len(declared))
	for _, c := range PriorityClasses {
		names = append(names, c.Name)
	}
	for _, c := range declared {
		if _, builtin := LookupPriorityClass(c.Name); !builtin {
			names = append(names, c.Name)
		}
	}
	return names
}

// LookupPriorityClass returns the built-in class called name.
func LookupPriorityClass(name string) (PriorityClass, bool) {
	for _, c := range PriorityClasses {
		if c.Name == name {
			return c, true
		}
	}
	return PriorityClass{}, false
}

// Dependency makes a job wait for another: On "ok" waits for it to succeed
// (and fails the wait if it ends otherwise); "any" waits for it to end.
type Dependency struct {
	Job string `json:"job"`
	On  string `json:"on,omitempty"`
}

// Dependency conditions.
const (
	AfterOK  = "ok"
	AfterAny = "any"
)
