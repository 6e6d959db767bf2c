package advisor

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/catalog"
)

func mustResolve(t *testing.T, p Profile) workload {
	t.Helper()
	w, fe := resolve(p)
	if fe != nil {
		t.Fatalf("resolving %+v: %v", p, fe)
	}
	return w
}

// groundTruth is testdata/groundtruth.json: published figures, each with
// its source, the request that expresses it (the same document `gpufleet
// advise -f` reads), the metric read from the answer, the expected value
// and a relative tolerance.
type groundTruth struct {
	Comment string `json:"comment"`
	// Floors are, per kind, the least share of check cases within
	// tolerance; the test fails below them.
	Floors map[string]float64 `json:"floors"`
	Cases  []truthCase        `json:"cases"`
}

type truthCase struct {
	ID      string  `json:"id"`
	Kind    string  `json:"kind"`  // memory, fit, throughput, serving, time, cost
	Split   string  `json:"split"` // fit or check
	Source  string  `json:"source"`
	Request Request `json:"request"`
	Metric  string  `json:"metric"`
	Expect  float64 `json:"expect"`
	Tol     float64 `json:"tol"`
	Note    string  `json:"note,omitempty"`
	// KnownMiss says why the advisor does not meet this case; such a case
	// counts as a miss, and one that starts passing fails the test so the
	// reason stays true.
	KnownMiss string `json:"knownMiss,omitempty"`
	// Excluded says why a case is not well posed (the source does not
	// state an input the answer depends on). It is still evaluated and
	// printed, but not counted in any accuracy.
	Excluded string `json:"excluded,omitempty"`
	// Tokens is the sequence length a per-sequence metric (kvCacheGiB) is
	// read at.
	Tokens float64 `json:"tokens,omitempty"`
}

func loadGroundTruth(t *testing.T) groundTruth {
	t.Helper()
	data, err := os.ReadFile("testdata/groundtruth.json")
	if err != nil {
		t.Fatal(err)
	}
	var gt groundTruth
	if err := json.Unmarshal(data, &gt); err != nil {
		t.Fatalf("groundtruth.json: %v", err)
	}
	return gt
}

// evaluate answers a case the way `gpufleet advise -f` does: rank the
// catalog with the case's request, and read the metric off the first row.
func evaluate(t *testing.T, cat *catalog.Catalog, c truthCase) (float64, error) {
	r := c.Request
	r.Explain, r.Limit = true, 1
	if fe := r.Validate(cat.KnownGPU); len(fe) > 0 {
		return 0, fe.Err()
	}
	res, err := Rank(r.Profile, r.Options(cat.Offers(), cat.Accelerator, Calibration{}))
	if err != nil {
		return 0, err
	}
	if c.Metric == "fits" {
		if len(res.Rows) > 0 {
			return 1, nil
		}
		return 0, nil
	}
	if c.Metric == "kvCacheBytesPerToken" {
		return float64(res.Workload.KVCachePerTokenBytes), nil
	}
	if c.Metric == "kvCacheGiB" {
		return float64(res.Workload.KVCachePerTokenBytes) * c.Tokens / gib, nil
	}
	if len(res.Rows) == 0 {
		msg := "no offer fits"
		if res.Shortfall != nil {
			msg = res.Shortfall.Message
		}
		return math.NaN(), fmt.Errorf("%s", msg)
	}
	row := res.Rows[0]
	m, tm := row.Memory, row.Timing
	states := float64(m.WeightsBytes + m.GradientsBytes + m.OptimizerBytes + m.AdaptersBytes + m.AdapterOptimizerBytes + m.QuantConstantsBytes)
	switch c.Metric {
	case "modelStatesGiB":
		return states / gib, nil
	case "modelStatesMiB":
		return states / (1 << 20), nil
	case "modelStatesGB":
		return states / 1e9, nil
	case "hostGiBPerNode":
		return float64(m.HostBytesPerNode) / gib, nil
	case "servingWeightsGB":
		return float64(m.WeightsBytes) * float64(row.Plan.TP) / 1e9, nil
	case "quantBitsPerLinearParam":
		w := mustResolve(t, r.Profile)
		return float64(m.QuantConstantsBytes) * 8 / (w.params - w.embed), nil
	case "servingTokensPerSecondPerGPU":
		return row.TokensPerSecond / float64(row.GPUs), nil
	case "achievedTFLOPS":
		return tm.RatePerGPU / 1e12, nil
	case "tokensPerSecondPerGPU":
		w := mustResolve(t, r.Profile)
		return float64(w.SequenceLength*w.GlobalBatch) / tm.StepTime / float64(row.GPUs), nil
	case "hours":
		return row.Hours, nil
	case "modelFLOPsGPUHours":
		return res.Workload.ModelFLOPs / (tm.RatePerGPU * tm.Goodput) / 3600, nil
	case "modelFLOPsSteadyGPUHours":
		// Model FLOPs at the advisor's per-GPU rate, no goodput: what a
		// source that projects GPU-hours from its measured throughput states.
		return res.Workload.ModelFLOPs / tm.RatePerGPU / 3600, nil
	case "modelFLOPsSteadyCost":
		if r.PricePerGPUHour <= 0 {
			return 0, fmt.Errorf("modelFLOPsSteadyCost needs pricePerGPUHour")
		}
		return res.Workload.ModelFLOPs / tm.RatePerGPU / 3600 * r.PricePerGPUHour, nil
	case "modelFLOPsCost":
		// The GPU-hours above at the write-up's stated price per GPU-hour.
		if r.PricePerGPUHour <= 0 {
			return 0, fmt.Errorf("modelFLOPsCost needs pricePerGPUHour")
		}
		return res.Workload.ModelFLOPs / (tm.RatePerGPU * tm.Goodput) / 3600 * r.PricePerGPUHour, nil
	case "cost":
		return row.Cost, nil
	case "steadyGPUHours":
		// Steps × step time × GPUs, without goodput: the GPU-hours a source
		// projects from its measured step time at a stated scale.
		return tm.Steps * tm.StepTime * float64(row.GPUs) / 3600, nil
	case "steadyGPUHoursCost":
		if r.PricePerGPUHour <= 0 {
			return 0, fmt.Errorf("steadyGPUHoursCost needs pricePerGPUHour")
		}
		return tm.Steps * tm.StepTime * float64(row.GPUs) / 3600 * r.PricePerGPUHour, nil
	case "steadyHours":
		// Steps × step time, without goodput: what a source that projects
		// "steps × seconds per iteration" states.
		return tm.Steps * tm.StepTime / 3600, nil
	case "steadyCost":
		return row.PricePerHour * float64(row.Nodes) * tm.Steps * tm.StepTime / 3600, nil
	}
	return 0, fmt.Errorf("unknown metric %q", c.Metric)
}

// TestGroundTruth checks the advisor against the published cases and
// reports accuracy by kind and split; the check split may not fall below
// its recorded floor.
func TestGroundTruth(t *testing.T) {
	t.Parallel()
	gt := loadGroundTruth(t)
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	type tally struct{ ok, total int }
	by := map[[2]string]*tally{}
	seen := map[string]bool{}
	var lines, excluded []string
	counted := 0
	for _, c := range gt.Cases {
		if c.Excluded == "" {
			counted++
		}
		if seen[c.ID] {
			t.Errorf("duplicate case id %q", c.ID)
		}
		seen[c.ID] = true
		if c.Source == "" || (c.Split != "fit" && c.Split != "check") || c.Tol < 0 {
			t.Errorf("%s: needs a source, split fit or check, and tol >= 0", c.ID)
		}
		got, err := evaluate(t, cat, c)
		rel := math.Abs(got/c.Expect - 1)
		if c.Expect == 0 {
			rel = math.Abs(got)
		}
		within := err == nil && rel <= c.Tol+1e-9
		if c.Excluded != "" {
			excluded = append(excluded, fmt.Sprintf("%-62s %-10s want %-10.4g got %-10.4g off %6.1f%% (not counted: %s)", c.ID, c.Kind, c.Expect, got, rel*100, c.Excluded))
			continue
		}
		k := by[[2]string{c.Kind, c.Split}]
		if k == nil {
			k = &tally{}
			by[[2]string{c.Kind, c.Split}] = k
		}
		k.total++
		if within {
			k.ok++
		}
		if within && c.KnownMiss != "" {
			t.Errorf("%s is listed as a known miss but is within tolerance now; update groundtruth.json and docs/advisor.md", c.ID)
		}
		status := "ok"
		switch {
		case err != nil:
			status = "ERROR " + err.Error()
		case !within && c.KnownMiss != "":
			status = "known miss"
		case !within:
			status = "MISS"
		}
		lines = append(lines, fmt.Sprintf("%-62s %-10s %-5s want %-10.4g got %-10.4g off %6.1f%% tol %3.0f%% %s", c.ID, c.Kind, c.Split, c.Expect, got, rel*100, c.Tol*100, status))
	}
	if counted < 60 {
		t.Errorf("ground truth has %d counted cases, want at least 60", counted)
	}
	keys := make([][2]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	var summary []string
	for _, k := range keys {
		v := by[k]
		share := float64(v.ok) / float64(v.total)
		summary = append(summary, fmt.Sprintf("%s/%s %d/%d (%.0f%%)", k[0], k[1], v.ok, v.total, share*100))
		if k[1] == "check" {
			floor, ok := gt.Floors[k[0]]
			if !ok {
				t.Errorf("no recorded floor for check kind %s (now %.3f)", k[0], share)
			} else if share+1e-9 < floor {
				t.Errorf("check accuracy for %s is %.3f, below its recorded floor %.3f", k[0], share, floor)
			}
		}
	}
	t.Logf("accuracy: %s\n%s\nexcluded (ill-posed, evaluated, not counted):\n%s", strings.Join(summary, ", "), strings.Join(lines, "\n"), strings.Join(excluded, "\n"))
}

// TestGroundTruthDropoutStated keeps docs/advisor.md's "Ground-truth dropout
// rule": every case states its model's dropout, either through a preset
// (which carries the published value) or as model.dropout with the config it
// came from named in the note.
func TestGroundTruthDropoutStated(t *testing.T) {
	for _, c := range loadGroundTruth(t).Cases {
		p := c.Request.Profile
		if p.Preset != "" {
			pre, ok := LookupPreset(p.Preset)
			if !ok {
				t.Errorf("%s: unknown preset %q", c.ID, p.Preset)
				continue
			}
			if pre.Model.Dropout == nil && p.Model.Dropout == nil {
				t.Errorf("%s: preset %q states no dropout and the case sets none", c.ID, p.Preset)
			}
			continue
		}
		if p.Model.Dropout == nil {
			t.Errorf("%s: model.dropout unset; take it from the model's published config (docs/advisor.md, \"Ground-truth dropout rule\")", c.ID)
			continue
		}
		if !strings.Contains(c.Note, "dropout") {
			t.Errorf("%s: model.dropout %g set but the note names no config for it", c.ID, *p.Model.Dropout)
		}
	}
}
