package cost

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Spend is a scope's money in the current period of one budget.
type Spend struct {
	// Actual is spend from the period start to now.
	Actual model.Money
	// Forecast is Actual plus the forecast mean for the rest of the
	// period; zero means no forecast (forecast thresholds do not fire).
	Forecast model.Money
}

// Firing is a threshold crossed for the first time in a period.
type Firing struct {
	Key       model.FiredKey
	Budget    string
	Scope     model.BudgetScope
	Action    model.BudgetAction
	Basis     model.BudgetBasis
	Percent   float64
	Limit     model.Money
	Spent     model.Money
	Amount    model.Money
	PeriodEnd time.Time
}

// Block is a scope that admission refuses until Until.
type Block struct {
	Budget string
	Scope  model.BudgetScope
	Until  time.Time
	Reason string
}

// Running is a job the stop actions may pick.
type Running struct {
	JobID        string
	Project      string
	Queue        string
	Tags         map[string]string
	CapacityType model.CapacityType
}

// Stop is a decision to stop a running job.
type Stop struct {
	JobID  string
	Budget string
	Reason string
}

// Evaluation is the outcome of one budget pass. Firings are new this
// pass (persist their keys, notify); Blocks and Stops hold for every
// threshold that has fired in the current period, so the pass is
// idempotent and a job started after the firing is still caught.
type Evaluation struct {
	Firings []Firing
	Blocks  []Block
	Stops   []Stop
}

// EvaluateInput is everything a budget pass needs.
type EvaluateInput struct {
	Budgets []model.Budget
	// Spend is keyed by budget name, for each budget's current period.
	Spend map[string]Spend
	// Fired is the set of keys already fired; not modified.
	Fired   map[model.FiredKey]bool
	Running []Running
	Now     time.Time
}

// Evaluate runs one budget pass (the controller calls it every minute):
//
//  1. For each budget, find its current period from Now.
//  2. For each threshold, it is crossed when the basis amount reaches
//     Percent of Amount (Percent rounds the limit down to the micro-dollar).
//  3. A crossed threshold whose key is not in Fired is a new Firing.
//  4. Every threshold fired in this period (before or now) is active:
//     block-new and stop-all block the scope; stop-spot lists running spot
//     jobs in scope, stop-all all running jobs in scope.
//
// Output is sorted by budget name, then threshold order, then job id.
func Evaluate(in EvaluateInput) Evaluation {
	var ev Evaluation
	budgets := slices.Clone(in.Budgets)
	slices.SortStableFunc(budgets, func(a, b model.Budget) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range budgets {
		start, end := b.Period.Bounds(in.Now)
		sp := in.Spend[b.Name]
		blocked := false
		stopped := map[string]bool{}
		for i, t := range b.Thresholds {
			key := model.FiredKey{Budget: b.Name, Threshold: i, PeriodStart: start}
			limit := Percent(b.Amount, t.Percent)
			basis, spent := t.Basis, sp.Actual
			if basis == "" {
				basis = model.BasisActual
			}
			if basis == model.BasisForecast {
				spent = sp.Forecast
			}
			active := in.Fired[key]
			if !active && spent > 0 && spent >= limit {
				active = true
				ev.Firings = append(ev.Firings, Firing{Key: key, Budget: b.Name, Scope: b.Scope, Action: t.Action,
					Basis: basis, Percent: t.Percent, Limit: limit, Spent: spent, Amount: b.Amount, PeriodEnd: end})
			}
			if !active {
				continue
			}
			why := fmt.Sprintf("budget %s (%s): %s spend reached %g%% of %s this period (%s); %s until %s",
				b.Name, b.Scope, basis, t.Percent, b.Amount.USD(), spent.USD(), t.Action, end.Format(time.DateOnly))
			if (t.Action == model.ActionBlockNew || t.Action == model.ActionStopAll) && !blocked {
				blocked = true
				ev.Blocks = append(ev.Blocks, Block{Budget: b.Name, Scope: b.Scope, Until: end, Reason: why})
			}
			if t.Action == model.ActionStopSpot || t.Action == model.ActionStopAll {
				for _, r := range in.Running {
					if stopped[r.JobID] || !b.Scope.Matches(r.Project, r.Queue, r.Tags) {
						continue
					}
					if t.Action == model.ActionStopSpot && r.CapacityType != model.Spot {
						continue
					}
					stopped[r.JobID] = true
					ev.Stops = append(ev.Stops, Stop{JobID: r.JobID, Budget: b.Name, Reason: why})
				}
			}
		}
	}
	slices.SortStableFunc(ev.Stops, func(a, b Stop) int {
		if c := strings.Compare(a.Budget, b.Budget); c != 0 {
			return c
		}
		return strings.Compare(a.JobID, b.JobID)
	})
	return ev
}

// Request is a job asking for admission, as budgets see it.
type Request struct {
	JobID   string
	Project string
	Queue   string
	Tags    map[string]string
	// GPUs is the job's total GPUs (replicas × per replica).
	GPUs float64
	// PricePerGPUHour is the highest price per GPU-hour the job could be
	// placed at (its max price, or the dearest eligible offer).
	PricePerGPUHour model.Money
	// MaxDuration is the runtime limit (spec.limits.runtime); zero means
	// none, which a hard budget in scope refuses (see Admit).
	MaxDuration time.Duration
}

// WorstCase is GPUs × price per GPU-hour × max duration, rounded up to
// the micro-dollar (a bound must not be optimistic).
func (r Request) WorstCase() model.Money {
	if r.GPUs <= 0 || r.PricePerGPUHour <= 0 || r.MaxDuration <= 0 {
		return 0
	}
	v := math.Ceil(r.GPUs * float64(r.PricePerGPUHour) * r.MaxDuration.Hours())
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return model.Money(v)
}

// AdmissionState is what admission needs from the last budget pass.
type AdmissionState struct {
	Budgets []model.Budget
	Blocks  []Block
	// Spend is keyed by budget name, as in EvaluateInput.
	Spend map[string]Spend
	Now   time.Time
}

// Admission is admission's verdict: OK, or refused with a Reason that
// names the budget (for `gpufleet explain` and the API's answer). Field,
// when set, is the job field whose change would admit it.
type Admission struct {
	OK     bool
	Reason string
	Field  string
}

// FieldRuntimeLimit is the job field a hard budget requires.
const FieldRuntimeLimit = "spec.limits.runtime"

// Admit decides whether budgets allow a new job. Refusing is a verdict,
// not an error. Blocks whose Until has passed are ignored: a new period
// re-admits. A hard budget bounds every GPU job in its scope by its worst
// case, so it refuses one without a runtime limit (there is no worst case
// to bound), naming spec.limits.runtime: there is no way past a hard
// budget. The check is skipped only while no price is known.
func Admit(r Request, st AdmissionState) Admission {
	for _, bl := range st.Blocks {
		if !st.Now.Before(bl.Until) {
			continue
		}
		if bl.Scope.Matches(r.Project, r.Queue, r.Tags) {
			return Admission{Reason: "blocked by " + bl.Reason}
		}
	}
	wc := r.WorstCase()
	for _, b := range st.Budgets {
		if !b.Hard || r.GPUs <= 0 || !b.Scope.Matches(r.Project, r.Queue, r.Tags) {
			continue
		}
		if r.MaxDuration <= 0 {
			return Admission{Field: FieldRuntimeLimit, Reason: fmt.Sprintf(
				"budget %s (%s) is hard: a GPU job in its scope must set %s, which bounds its worst-case cost (GPUs × price × runtime); "+
					"set it, e.g. limits: {runtime: 12h} or gpufleet run --runtime 12h", b.Name, b.Scope, FieldRuntimeLimit)}
		}
		if wc == 0 {
			continue
		}
		spent := st.Spend[b.Name].Actual
		if spent > b.Amount-wc { // spent + wc > amount without overflow
			_, end := b.Period.Bounds(st.Now)
			return Admission{Reason: fmt.Sprintf("budget %s (%s) is hard: worst-case cost %s (%g GPUs × %s/GPU-hour × %s) on top of %s spent would exceed %s before %s",
				b.Name, b.Scope, wc.USD(), r.GPUs, r.PricePerGPUHour.USD(), r.MaxDuration, spent.USD(), b.Amount.USD(), end.Format(time.DateOnly))}
		}
	}
	return Admission{OK: true}
}
