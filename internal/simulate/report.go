package simulate

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Named is a result with the name of the fleet (variant) it ran on.
type Named struct {
	Fleet string `json:"fleet"`
	*Result
}

// rows are the report's lines: a name and the value of one run.
var rows = []struct {
	name string
	f    func(r *Result) string
}{
	{"trace", func(r *Result) string { return fmt.Sprintf("%s (seed %d)", r.Trace, r.Seed) }},
	{"jobs", func(r *Result) string { return fmt.Sprint(r.Jobs) }},
	{"completed", func(r *Result) string { return fmt.Sprint(r.Completed) }},
	{"failed", func(r *Result) string { return fmt.Sprint(r.Failed) }},
	{"unfinished", func(r *Result) string { return fmt.Sprint(r.Unfinished) }},
	{"wait mean", func(r *Result) string { return dur(r.WaitMean) }},
	{"wait p50", func(r *Result) string { return dur(r.WaitP50) }},
	{"wait p95", func(r *Result) string { return dur(r.WaitP95) }},
	{"wait p99", func(r *Result) string { return dur(r.WaitP99) }},
	{"JCT mean", func(r *Result) string { return dur(r.JCTMean) }},
	{"JCT p50", func(r *Result) string { return dur(r.JCTP50) }},
	{"JCT p95", func(r *Result) string { return dur(r.JCTP95) }},
	{"JCT p99", func(r *Result) string { return dur(r.JCTP99) }},
	{"missed deadlines", func(r *Result) string { return fmt.Sprintf("%d of %d", r.MissedDeadlines, r.Deadlines) }},
	{"GPU utilisation", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.GPUUtilisation) }},
	{"cost", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostUSD) }},
	{"  on-demand", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["on-demand"]) }},
	{"  spot", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["spot"]) }},
	{"  reserved", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["reserved"]) }},
	{"  owned", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["owned"]) }},
	{"owned machines", func(r *Result) string { return fmt.Sprintf("%d (%d GPUs)", r.OwnedMachines, r.OwnedGPUs) }},
	{"instances", func(r *Result) string { return fmt.Sprint(r.Instances) }},
	{"  peak at once", func(r *Result) string { return fmt.Sprintf("%d (%d GPUs)", r.PeakInstances, r.PeakGPUs) }},
	{"  launches refused", refusalText},
	{"interruptions", func(r *Result) string { return fmt.Sprint(r.Interruptions) }},
	{"preemptions", func(r *Result) string { return fmt.Sprint(r.Preemptions) }},
	{"lost work", func(r *Result) string { return dur(r.LostWork) }},
	{"purchase mix", purchaseText},
	{"  saving vs on-demand", purchaseSaving},
	{"simulated", func(r *Result) string { return dur(r.Simulated) }},
	{"steps", func(r *Result) string { return fmt.Sprint(r.Steps) }},
	{"wall clock", func(r *Result) string { return r.Wall.Round(time.Millisecond).String() }},
	{"digest", func(r *Result) string { return r.Digest[:16] }},
}

// refusalText is the launches the clouds refused, in all and by kind.
func refusalText(r *Result) string {
	total := 0
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.LaunchRefusals)) {
		total += r.LaunchRefusals[k]
		parts = append(parts, fmt.Sprintf("%s %d", k, r.LaunchRefusals[k]))
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// purchaseText is the recommendation in short: per GPU model, the GPUs to
// commit to for a year.
func purchaseText(r *Result) string {
	var parts []string
	for _, p := range r.Purchase {
		if p.Reason != "" && p.Commit == 0 {
			parts = append(parts, p.GPUModel+": -")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: commit %d GPUs (1y, %.0f%% off)", p.GPUModel, p.Commit, 100*p.Discount))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// purchaseSaving is the recommendation's saving against running the
// simulated GPU use all on demand (and what moving interruptible work to
// spot would save on top).
func purchaseSaving(r *Result) string {
	var od, mixed, spot float64
	for _, p := range r.Purchase {
		od += p.OnDemandCost
		mixed += p.MixedCost
		spot += p.SpotSaving
	}
	if od == 0 {
		return "-"
	}
	return fmt.Sprintf("$%.2f of $%.2f (%.1f%%), spot +$%.2f", od-mixed, od, 100*(od-mixed)/od, spot)
}

// WriteTable writes runs side by side: one row per total, one column per
// fleet.
func WriteTable(w io.Writer, runs []Named) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "FLEET")
	for _, r := range runs {
		fmt.Fprint(tw, "\t", r.Fleet)
	}
	fmt.Fprintln(tw)
	for _, row := range rows {
		fmt.Fprint(tw, row.name)
		for _, r := range runs {
			fmt.Fprint(tw, "\t", row.f(r.Result))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteJSON writes runs as a JSON array (durations in nanoseconds, as Go
// encodes them).
func WriteJSON(w io.Writer, runs []Named) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(runs)
}

// WriteCSV writes one row per run: numbers only (durations in seconds,
// money in USD), for spreadsheets.
func WriteCSV(w io.Writer, runs []Named) error {
	cw := csv.NewWriter(w)
	head := []string{"fleet", "trace", "seed", "jobs", "completed", "failed", "unfinished",
		"wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_p99_s", "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s",
		"deadlines", "missed_deadlines", "gpu_utilisation", "cost_usd", "cost_on_demand_usd", "cost_spot_usd", "cost_reserved_usd", "cost_owned_usd",
		"billed_usd", "owned_gpus", "instances", "peak_instances", "peak_gpus", "launches_refused", "interruptions", "preemptions", "lost_work_s", "purchase_on_demand_usd", "purchase_mixed_usd",
		"purchase_spot_saving_usd", "simulated_s", "steps", "wall_s", "digest"}
	if err := cw.Write(head); err != nil {
		return err
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.0f", d.Seconds()) }
	m := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	for _, n := range runs {
		r := n.Result
		var od, mixed, spot float64
		for _, p := range r.Purchase {
			od, mixed, spot = od+p.OnDemandCost, mixed+p.MixedCost, spot+p.SpotSaving
		}
		refused := 0
		for _, v := range r.LaunchRefusals {
			refused += v
		}
		rec := []string{n.Fleet, r.Trace, fmt.Sprint(r.Seed), fmt.Sprint(r.Jobs), fmt.Sprint(r.Completed), fmt.Sprint(r.Failed), fmt.Sprint(r.Unfinished),
			s(r.WaitMean), s(r.WaitP50), s(r.WaitP95), s(r.WaitP99), s(r.JCTMean), s(r.JCTP50), s(r.JCTP95), s(r.JCTP99),
			fmt.Sprint(r.Deadlines), fmt.Sprint(r.MissedDeadlines), fmt.Sprintf("%.4f", r.GPUUtilisation), m(r.CostUSD),
			m(r.CostByCapacity["on-demand"]), m(r.CostByCapacity["spot"]), m(r.CostByCapacity["reserved"]), m(r.CostByCapacity["owned"]), m(r.BilledUSD),
			fmt.Sprint(r.OwnedGPUs), fmt.Sprint(r.Instances), fmt.Sprint(r.PeakInstances), fmt.Sprint(r.PeakGPUs), fmt.Sprint(refused), fmt.Sprint(r.Interruptions), fmt.Sprint(r.Preemptions), s(r.LostWork), m(od), m(mixed), m(spot),
			s(r.Simulated), fmt.Sprint(r.Steps), fmt.Sprintf("%.3f", r.Wall.Seconds()), r.Digest}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet simulate: {{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
figure{margin:1.5em 0}figcaption{font-weight:600;margin-bottom:.3em}svg{max-width:100%;height:auto}
</style></head><body>
<h1>gpufleet simulate: {{.Title}}</h1>
<p>Each fleet ran the same trace and seed through gpufleet's controller and scheduler on a fake clock
(virtual agents, simulated clouds from the embedded catalog). Costs are the controller's ledger.</p>
<table><tr><th>fleet</th>{{range .Runs}}<th>{{.Fleet}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Name}}</td>{{range .Values}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{range .Plots}}<figure><figcaption>{{.Title}}</figcaption>{{.SVG}}</figure>
{{end}}</body></html>
`))

// WriteHTML writes one self-contained page: the table and every plot
// (inline SVG).
func WriteHTML(w io.Writer, title string, runs []Named) error {
	type row struct {
		Name   string
		Values []string
	}
	type fig struct {
		Title string
		SVG   template.HTML
	}
	data := struct {
		Title string
		Runs  []Named
		Rows  []row
		Plots []fig
	}{Title: title, Runs: runs}
	for _, rw := range rows {
		r := row{Name: rw.name}
		for _, n := range runs {
			r.Values = append(r.Values, rw.f(n.Result))
		}
		data.Rows = append(data.Rows, r)
	}
	for _, pl := range Plots {
		svg, err := PlotSVG(pl.Name, runs)
		if err != nil {
			return err
		}
		// Drop the XML prolog: the SVG is inline.
		s := string(svg)
		if i := strings.Index(s, "<svg"); i > 0 {
			s = s[i:]
		}
		data.Plots = append(data.Plots, fig{Title: pl.Title, SVG: template.HTML(s)}) // #nosec: our own SVG
	}
	return page.Execute(w, data)
}

// dur writes d rounded to the second, days spelled out.
func dur(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= 24*time.Hour {
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%s", days, (d - days*24*time.Hour).String())
	}
	return d.String()
}
