package cost

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// IdleMode says how a report shows idle cost.
type IdleMode string

// Idle modes.
const (
	// IdleShown reports idle as its own rows, grouped like the rest with
	// attribution fields reading IdleGroup.
	IdleShown IdleMode = "shown"
	// IdleShared adds each node's idle cost to the allocations on it, in
	// proportion to their cost; idle on nodes with no allocations stays in
	// idle rows.
	IdleShared IdleMode = "shared"
	// IdleHidden leaves idle out: the total is allocation cost only.
	IdleHidden IdleMode = "hidden"
)

// IdleGroup is the value of job attribution fields (project, user, queue,
// tags) on idle rows.
const IdleGroup = "__idle__"

// Fields a report can group by; "tag:KEY" groups by a tag.
var groupFields = []string{"kind", "project", "user", "queue", "capacityType", "priceSource", "gpuModel", "provider", "region", "pool"}

// Query asks for a report.
type Query struct {
	From, To time.Time
	// Step splits the window into rows of this length from From; zero is
	// one row for the whole window. A step of whole days makes calendar
	// days in Location: rows start at its midnights (From is floored to
	// one), 23 or 25 hours long across a daylight-saving change.
	Step time.Duration
	// Location is the time zone of day steps; nil means UTC.
	Location *time.Location
	// GroupBy lists fields (kind, project, user, queue, capacityType,
	// priceSource, gpuModel, provider, region, pool) or "tag:KEY".
	GroupBy []string
	Idle    IdleMode
	// Scope, when set, keeps only work in scope (and drops idle).
	Scope *model.BudgetScope
	// Projects, when not nil, keeps only work of these projects and drops
	// idle, which belongs to no project: what a caller may see of others'
	// spend is nothing.
	Projects map[string]bool
}

// Validate returns every problem with the query.
func (q Query) Validate() error {
	var fe model.FieldErrors
	if !q.To.After(q.From) {
		fe.Add("to", "must be after from")
	}
	if q.Step < 0 || q.Step > 0 && q.Step%time.Hour != 0 {
		fe.Add("step", "must be a whole number of hours")
	}
	for i, g := range q.GroupBy {
		if !strings.HasPrefix(g, "tag:") && !slices.Contains(groupFields, g) || g == "tag:" {
			fe.Add(fmt.Sprintf("groupBy[%d]", i), fmt.Sprintf("%q is not a field (want one of %s, or tag:KEY)", g, strings.Join(groupFields, ", ")))
		}
	}
	switch q.Idle {
	case "", IdleShown, IdleShared, IdleHidden:
	default:
		fe.Add("idle", `must be "shown", "shared" or "hidden"`)
	}
	return fe.Err()
}

// Row is one group in one step.
type Row struct {
	Start time.Time
	// Group holds the values of Query.GroupBy, in order.
	Group         []string
	Cost          model.Money
	EffectiveCost model.Money
	MeasuredCost  model.Money
	GPUHours      float64
}

// Report is the answer to a Query. Rows are sorted by Start, then Group.
type Report struct {
	Query Query
	Rows  []Row
	Total model.Money
}

func groupValue(d *Dims, f string) string {
	idle := d.Kind == model.LedgerIdle
	pick := func(s string) string {
		if idle {
			return IdleGroup
		}
		return s
	}
	switch f {
	case "kind":
		return string(d.Kind)
	case "project":
		return pick(d.Project)
	case "user":
		return pick(d.User)
	case "queue":
		return pick(d.Queue)
	case "capacityType":
		return string(d.CapacityType)
	case "priceSource":
		return string(d.PriceSource)
	case "gpuModel":
		return d.GPUModel
	case "provider":
		return d.Provider
	case "region":
		return d.Region
	case "pool":
		return d.Pool
	}
	return pick(d.Tags[strings.TrimPrefix(f, "tag:")])
}

// Report aggregates the rollup. It reads daily cells when From and To are
// midnight UTC and Step is zero or whole days, hourly cells otherwise
// (From floored and To ceiled to the hour). With a step of whole days,
// From is first floored to midnight in q.Location and rows are calendar
// days there (an hour cell counts in the day its start falls in, which
// only matters in zones offset by part of an hour). Invalid queries
// return the Validate error.
func (r *Rollup) Report(q Query) (Report, error) {
	if err := q.Validate(); err != nil {
		return Report{}, err
	}
	if q.Idle == "" {
		q.Idle = IdleShown
	}
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	days := int(q.Step / (24 * time.Hour))
	if q.Step%(24*time.Hour) != 0 {
		days = 0
	}
	if days > 0 {
		q.From = midnight(q.From, loc)
	}
	from := q.From.Unix()
	if q.Step%(24*time.Hour) != 0 || q.From.Unix()%86400 != 0 || q.To.Unix()%86400 != 0 {
		from = floorDiv(from, 3600) * 3600
	}
	step := int64(q.Step / time.Second)
	// stepOf is the row of a cell starting at start (Unix seconds), and
	// startOf a row's start.
	stepOf := func(start int64) int64 {
		if step == 0 {
			return 0
		}
		return (start - from) / step
	}
	startOf := func(si int64) time.Time { return time.Unix(from+si*step, 0).UTC() }
	if days > 0 {
		y, m, d := q.From.In(loc).Date()
		day0 := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		stepOf = func(start int64) int64 {
			y, m, d := time.Unix(start, 0).In(loc).Date()
			return int64(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Sub(day0)/(24*time.Hour)) / int64(days)
		}
		startOf = func(si int64) time.Time { return time.Date(y, m, d+int(si)*days, 0, 0, 0, 0, loc) }
	}

	// Group ids are memoised per dimension set, so each cell costs one
	// slice lookup.
	groupOf := make([]int32, len(r.dims))
	for i := range groupOf {
		groupOf[i] = -1
	}
	groupIDs := map[string]int32{}
	var groups [][]string
	type rowKey struct {
		step  int64
		group int32
	}
	acc := map[rowKey]*Row{}
	var total model.Money
	vals := make([]string, len(q.GroupBy))
	r.each(q.From, q.To, func(start int64, id uint32, d *Dims, c *Cell) {
		if q.Scope != nil && (d.Kind == model.LedgerIdle || !q.Scope.Matches(d.Project, d.Queue, d.Tags)) {
			return
		}
		if q.Projects != nil && (d.Kind == model.LedgerIdle || !q.Projects[d.Project]) {
			return
		}
		cost := c.Cost
		switch q.Idle {
		case IdleHidden:
			if d.Kind == model.LedgerIdle {
				return
			}
		case IdleShared:
			if d.Kind == model.LedgerIdle {
				cost -= c.IdleShare
			} else {
				cost += c.IdleShare
			}
		}
		g := groupOf[id]
		if g < 0 {
			for i, f := range q.GroupBy {
				vals[i] = groupValue(d, f)
			}
			k := strings.Join(vals, "\x00")
			var ok bool
			if g, ok = groupIDs[k]; !ok {
				g = int32(len(groups))
				groupIDs[k] = g
				groups = append(groups, slices.Clone(vals))
			}
			groupOf[id] = g
		}
		si := stepOf(start)
		rk := rowKey{si, g}
		row := acc[rk]
		if row == nil {
			rs := q.From
			if step > 0 {
				rs = startOf(si)
			}
			row = &Row{Start: rs, Group: groups[g]}
			acc[rk] = row
		}
		row.Cost += cost
		row.EffectiveCost += c.EffectiveCost
		row.MeasuredCost += c.MeasuredCost
		row.GPUHours += c.GPUSeconds / 3600
		total += cost
	})
	rep := Report{Query: q, Total: total, Rows: make([]Row, 0, len(acc))}
	for _, row := range acc {
		rep.Rows = append(rep.Rows, *row)
	}
	slices.SortFunc(rep.Rows, func(a, b Row) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return slices.Compare(a.Group, b.Group)
	})
	return rep, nil
}

// midnight is the start of t's day in loc.
func midnight(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}
