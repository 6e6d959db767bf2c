package advisor

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// maxNodesLimit bounds Request.MaxNodes: 4,096 nodes of 8 GPUs is a
// 32,768-GPU cluster, twice Llama 3's 16,384-GPU pre-training.
const maxNodesLimit = 4096

// Request is the document `gpufleet advise -f` reads and POST /v1/advise
// accepts: a workload profile and how to rank offers for it.
type Request struct {
	Profile Profile `json:"profile"`
	// GPUs, Providers, Regions (path patterns) and Capacity (on-demand,
	// spot, reserved) filter the offers; empty means all.
	GPUs      []string `json:"gpus,omitempty"`
	Providers []string `json:"providers,omitempty"`
	Regions   []string `json:"regions,omitempty"`
	Capacity  []string `json:"capacity,omitempty"`
	// InstanceTypes are instance-type patterns (e.g. "p4d.*").
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// ReservedTerm is 1y (default), 3y or none.
	ReservedTerm string         `json:"reservedTerm,omitempty"`
	Deadline     model.Duration `json:"deadline,omitempty"`
	MaxNodes     int            `json:"maxNodes,omitempty"`
	// Limit is the most rows to return (default 50; -1 means all).
	Limit   int  `json:"limit,omitempty"`
	Explain bool `json:"explain,omitempty"`
	// MeasuredTFLOPS and MeasuredTokensPerSecond are a training job's own
	// measured rate per GPU (model TFLOP/s, or tokens/s per GPU, e.g. from
	// its step time); either replaces the utilisation model for every
	// offer ranked, so filter to the GPU it was measured on.
	MeasuredTFLOPS          float64 `json:"measuredTFLOPS,omitempty"`
	MeasuredTokensPerSecond float64 `json:"measuredTokensPerSecond,omitempty"`
	// PricePerGPUHour, when set, replaces every ranked offer's listed price
	// with this USD rate per GPU-hour (a negotiated rate, owned hardware's
	// cost, or the price a published cost write-up assumed).
	PricePerGPUHour float64 `json:"pricePerGPUHour,omitempty"`
}

// Validate checks the request's own fields and its profile, returning
// every problem with its path.
func (r Request) Validate(knownGPU func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	for _, e := range r.Profile.Validate() {
		fe.Add("profile."+e.Path, e.Message)
	}
	for i, g := range r.GPUs {
		if knownGPU != nil && !knownGPU(g) {
			fe.Add(fmt.Sprintf("gpus[%d]", i), fmt.Sprintf("unknown GPU model %q (see gpufleet offers)", g))
		}
	}
	providers := []string{"aws", "gcp", "azure", "oci", "lambda", "vast"}
	for i, p := range r.Providers {
		if !slices.Contains(providers, strings.ToLower(p)) {
			fe.Add(fmt.Sprintf("providers[%d]", i), "must be one of "+strings.Join(providers, ", "))
		}
	}
	for i, c := range r.Capacity {
		switch strings.ToLower(c) {
		case "on-demand", "spot", "reserved":
		default:
			fe.Add(fmt.Sprintf("capacity[%d]", i), "must be on-demand, spot or reserved")
		}
	}
	switch r.ReservedTerm {
	case "", "1y", "3y", "none":
	default:
		fe.Add("reservedTerm", "must be 1y, 3y or none")
	}
	for i, p := range r.InstanceTypes {
		if _, err := path.Match(p, ""); err != nil {
			fe.Add(fmt.Sprintf("instanceTypes[%d]", i), "bad pattern: "+err.Error())
		}
	}
	if r.Deadline < 0 {
		fe.Add("deadline", "must be >= 0")
	}
	if r.MaxNodes < 0 || r.MaxNodes > maxNodesLimit {
		fe.Add("maxNodes", fmt.Sprintf("must be between 1 and %d (0 means 64)", maxNodesLimit))
	}
	if r.MeasuredTFLOPS < 0 || r.MeasuredTFLOPS > 1e5 || math.IsNaN(r.MeasuredTFLOPS) {
		fe.Add("measuredTFLOPS", "must be between 0 and 100000")
	}
	if r.MeasuredTokensPerSecond < 0 || math.IsNaN(r.MeasuredTokensPerSecond) || math.IsInf(r.MeasuredTokensPerSecond, 0) {
		fe.Add("measuredTokensPerSecond", "must be a finite number >= 0")
	}
	if r.MeasuredTFLOPS > 0 && r.MeasuredTokensPerSecond > 0 {
		fe.Add("measuredTokensPerSecond", "give measuredTFLOPS or measuredTokensPerSecond, not both")
	}
	if (r.MeasuredTFLOPS > 0 || r.MeasuredTokensPerSecond > 0) && !r.Profile.Task.Training() {
		fe.Add("measuredTFLOPS", "measured rates apply to training workloads")
	}
	if r.PricePerGPUHour < 0 || r.PricePerGPUHour > 1e4 || math.IsNaN(r.PricePerGPUHour) {
		fe.Add("pricePerGPUHour", "must be between 0 and 10000 USD per GPU-hour (0: the offers' listed prices)")
	}
	if r.Limit < -1 {
		fe.Add("limit", "must be >= -1 (-1 means all)")
	}
	return fe
}

// Options turns the request into Rank's options over the given offers.
func (r Request) Options(offers []model.Offer, acc func(string) (catalog.Accelerator, bool), cal Calibration) Options {
	return Options{
		Offers: offers, Accelerator: acc, Calibration: cal,
		GPUs: r.GPUs, Providers: r.Providers, Regions: r.Regions, Capacity: r.Capacity, InstanceTypes: r.InstanceTypes,
		ReservedTerm: r.ReservedTerm, Deadline: r.Deadline.D(), MaxNodes: r.MaxNodes,
		Limit: r.Limit, Explain: r.Explain,
		MeasuredTFLOPS: r.MeasuredTFLOPS, MeasuredTokensPerSecond: r.MeasuredTokensPerSecond,
		PricePerGPUHour: r.PricePerGPUHour,
	}
}
