package model

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// BudgetScope selects the spend a budget covers. Every field that is set must
// match; at least one must be set.
type BudgetScope struct {
	Project string `json:"project,omitempty"`
	Queue   string `json:"queue,omitempty"`
	// Tags is a selector such as {"team": "nlp"}: every pair must be on
	// the job.
	Tags map[string]string `json:"tags,omitempty"`
}

// Matches reports whether work with these attributes is in the scope.
func (s BudgetScope) Matches(project, queue string, tags map[string]string) bool {
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
func (s BudgetScope) String() string {
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
	PeriodMonthly PeriodKind = "monthly"
	PeriodWeekly  PeriodKind = "weekly"
)

// BudgetPeriod is a budget's reset cycle, in UTC.
type BudgetPeriod struct {
	Kind PeriodKind `json:"kind"`
	// StartDay is the day a period begins: 1–28 for monthly (so every
	// month has it; 0 reads as 1), 0–6 for weekly (0 = Sunday, as
	// time.Weekday).
	StartDay int `json:"startDay,omitempty"`
}

// Bounds returns the period containing now: [start, end), midnight UTC.
func (p BudgetPeriod) Bounds(now time.Time) (start, end time.Time) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch p.Kind {
	case PeriodWeekly:
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

// BudgetAction is what a threshold does when crossed.
type BudgetAction string

// Actions. Each implies the ones before it in severity only where said:
// stop-all also blocks new work in scope; stop-spot does not.
const (
	// ActionNotify only reports the firing (the shell sends webhooks).
	ActionNotify BudgetAction = "notify"
	// ActionBlockNew makes admission refuse new jobs in scope until the
	// period ends.
	ActionBlockNew BudgetAction = "block-new"
	// ActionStopSpot stops running spot jobs in scope.
	ActionStopSpot BudgetAction = "stop-spot"
	// ActionStopAll stops every running job in scope and blocks new ones.
	ActionStopAll BudgetAction = "stop-all"
)

// BudgetBasis is what a threshold compares against.
type BudgetBasis string

// Bases.
const (
	// BasisActual is spend so far in the period.
	BasisActual BudgetBasis = "actual"
	// BasisForecast is spend so far plus the forecast for the rest of the
	// period (the forecast's mean).
	BasisForecast BudgetBasis = "forecast"
)

// BudgetThreshold is one trigger of a budget.
type BudgetThreshold struct {
	// Percent of the amount, e.g. 80; taken to two decimals.
	Percent float64      `json:"percent"`
	Action  BudgetAction `json:"action"`
	// Basis defaults to actual.
	Basis BudgetBasis `json:"basis,omitempty"`
}

// Budget caps spend in a scope per period.
type Budget struct {
	Name       string            `json:"name"`
	Scope      BudgetScope       `json:"scope"`
	Amount     Money             `json:"amount"`
	Period     BudgetPeriod      `json:"period"`
	Thresholds []BudgetThreshold `json:"thresholds,omitempty"`
	// Hard makes admission refuse a job whose worst-case cost would take
	// actual spend past 100% of Amount.
	Hard bool `json:"hard,omitempty"`
}

// Validate returns every problem, each with a field path under spec.
func (b *Budget) Validate() error {
	var fe FieldErrors
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
	case PeriodMonthly:
		if b.Period.StartDay < 0 || b.Period.StartDay > 28 {
			fe.Add("spec.period.startDay", "must be 1–28 for a monthly period")
		}
	case PeriodWeekly:
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
		case "", BasisActual, BasisForecast:
		default:
			fe.Add(p+".basis", `must be "actual" or "forecast"`)
		}
	}
	return fe.Err()
}
