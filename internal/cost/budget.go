package cost

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Scope selects the spend a budget covers. Every field that is set must
// match; at least one must be set.
type Scope struct {
	Project string `json:"project,omitempty"`
	Queue   string `json:"queue,omitempty"`
	// Tags is a selector such as {"team": "nlp"}: every pair must be on
	// the job.
	Tags map[string]string `json:"tags,omitempty"`
}

// Matches reports whether work with these attributes is in the scope.
func (s Scope) Matches(project, queue string, tags map[string]string) bool {
	if s.Project != "" && s.Project != project || s.Queue != "" && s.Queue != queue {
		return false
	}
	for k, v := range s.Tags {
		if tags[k] != v {
			return false
		}
	}
	return true
}

// String is a stable, human-readable key: "project=nlp,tag:team=ml".
func (s Scope) String() string {
	var parts []string
	if s.Project != "" {
		parts = append(parts, "project="+s.Project)
	}
	if s.Queue != "" {
		parts = append(parts, "queue="+s.Queue)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Tags)) {
		parts = append(parts, "tag:"+k+"="+s.Tags[k])
	}
	return strings.Join(parts, ",")
}

// PeriodKind is how often a budget resets.
type PeriodKind string

// Period kinds.
const (
	Monthly PeriodKind = "monthly"
	Weekly  PeriodKind = "weekly"
)

// Period is a budget's reset cycle, in UTC.
type Period struct {
	Kind PeriodKind `json:"kind"`
	// StartDay is the day a period begins: 1–28 for monthly (so every
	// month has it; 0 reads as 1), 0–6 for weekly (0 = Sunday, as
	// time.Weekday).
	StartDay int `json:"startDay,omitempty"`
}

// Bounds returns the period containing now: [start, end), midnight UTC.
func (p Period) Bounds(now time.Time) (start, end time.Time) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch p.Kind {
	case Weekly:
		back := (int(day.Weekday()) - p.StartDay + 7) % 7
		start = day.AddDate(0, 0, -back)
		return start, start.AddDate(0, 0, 7)
	default:
		sd := max(p.StartDay, 1)
		start = time.Date(now.Year(), now.Month(), sd, 0, 0, 0, 0, time.UTC)
		if start.After(now) {
			start = start.AddDate(0, -1, 0)
		}
		return start, start.AddDate(0, 1, 0)
	}
}

// Action is what a threshold does when crossed.
type Action string

// Actions. Each implies the ones before it in severity only where said:
// stop-all also blocks new work in scope; stop-spot does not.
const (
	// ActionNotify only reports the firing (the shell sends webhooks).
	ActionNotify Action = "notify"
	// ActionBlockNew makes admission refuse new jobs in scope until the
	// period ends.
	ActionBlockNew Action = "block-new"
	// ActionStopSpot stops running spot jobs in scope.
	ActionStopSpot Action = "stop-spot"
	// ActionStopAll stops every running job in scope and blocks new ones.
	ActionStopAll Action = "stop-all"
)

// Basis is what a threshold compares against.
type Basis string

// Bases.
const (
	// Actual is spend so far in the period.
	Actual Basis = "actual"
	// Forecast is spend so far plus the forecast for the rest of the
	// period (the forecast's mean).
	Forecast Basis = "forecast"
)

// Threshold is one trigger of a budget.
type Threshold struct {
	// Percent of the amount, e.g. 80; taken to two decimals.
	Percent float64 `json:"percent"`
	Action  Action  `json:"action"`
	// Basis defaults to actual.
	Basis Basis `json:"basis,omitempty"`
}

// Budget caps spend in a scope per period.
type Budget struct {
	Name       string      `json:"name"`
	Scope      Scope       `json:"scope"`
	Amount     model.Money `json:"amount"`
	Period     Period      `json:"period"`
	Thresholds []Threshold `json:"thresholds,omitempty"`
	// Hard makes admission refuse a job whose worst-case cost would take
	// actual spend past 100% of Amount.
	Hard bool `json:"hard,omitempty"`
}

// Validate returns every problem, each with a field path under spec.
func (b *Budget) Validate() error {
	var fe model.FieldErrors
	if b.Name == "" {
		fe.Add("metadata.name", "must be set")
	}
	if b.Scope.Project == "" && b.Scope.Queue == "" && len(b.Scope.Tags) == 0 {
		fe.Add("spec.scope", "must set project, queue or tags")
	}
	for k := range b.Scope.Tags {
		if k == "" {
			fe.Add("spec.scope.tags", "keys must not be empty")
		}
	}
	if b.Amount <= 0 {
		fe.Add("spec.amount", "must be > 0")
	}
	switch b.Period.Kind {
	case Monthly:
		if b.Period.StartDay < 0 || b.Period.StartDay > 28 {
			fe.Add("spec.period.startDay", "must be 1–28 for a monthly period")
		}
	case Weekly:
		if b.Period.StartDay < 0 || b.Period.StartDay > 6 {
			fe.Add("spec.period.startDay", "must be 0–6 (Sunday–Saturday) for a weekly period")
		}
	default:
		fe.Add("spec.period.kind", `must be "monthly" or "weekly"`)
	}
	for i, t := range b.Thresholds {
		p := fmt.Sprintf("spec.thresholds[%d]", i)
		if !(t.Percent > 0) || t.Percent > 10_000 || math.IsInf(t.Percent, 0) {
			fe.Add(p+".percent", "must be > 0 and at most 10000")
		}
		switch t.Action {
		case ActionNotify, ActionBlockNew, ActionStopSpot, ActionStopAll:
		default:
			fe.Add(p+".action", `must be one of notify, block-new, stop-spot, stop-all`)
		}
		switch t.Basis {
		case "", Actual, Forecast:
		default:
			fe.Add(p+".basis", `must be "actual" or "forecast"`)
		}
	}
	return fe.Err()
}

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
	Scope     Scope
	Action    Action
	Basis     Basis
	Percent   float64
	Limit     model.Money
	Spent     model.Money
	Amount    model.Money
	PeriodEnd time.Time
}

// Block is a scope that admission refuses until Until.
type Block struct {
	Budget string
	Scope  Scope
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
	Budgets []Budget
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
	slices.SortStableFunc(budgets, func(a, b Budget) int { return strings.Compare(a.Name, b.Name) })
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
				basis = Actual
			}
			if basis == Forecast {
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
			if (t.Action == ActionBlockNew || t.Action == ActionStopAll) && !blocked {
				blocked = true
				ev.Blocks = append(ev.Blocks, Block{Budget: b.Name, Scope: b.Scope, Until: end, Reason: why})
			}
			if t.Action == ActionStopSpot || t.Action == ActionStopAll {
				for _, r := range in.Running {
					if stopped[r.JobID] || !b.Scope.Matches(r.Project, r.Queue, r.Tags) {
						continue
					}
					if t.Action == ActionStopSpot && r.CapacityType != model.Spot {
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
	Budgets []Budget
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
