package efficiency

// Report is how a job's live attempt uses its GPUs: the view the
// controller serves and the API shows.
type Report struct {
	Attempt string  `json:"attempt"`
	Verdict Verdict `json:"verdict"`
	// SMActive is the mean SM activity over the verdict's window; absent
	// when unknown.
	SMActive *float64 `json:"smActive,omitempty"`
	// CostMicros is the allocated cost of the attempt so far, from the
	// price of its nodes; EffectiveCostMicros is the part of it that
	// bought SM activity (cost × SM active). Both are absent when the
	// nodes have no price or SM activity is unknown.
	CostMicros          *int64 `json:"costMicros,omitempty"`
	EffectiveCostMicros *int64 `json:"effectiveCostMicros,omitempty"`
	// Source is the telemetry source of the attempt's first node.
	Source string `json:"source,omitempty"`
}
