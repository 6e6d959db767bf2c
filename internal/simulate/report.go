package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Named is a result with the name of the fleet it ran on.
type Named struct {
	Fleet string `json:"fleet"`
	*Result
}

// WriteTable writes runs side by side: one row per total, one column per
// fleet.
func WriteTable(w io.Writer, runs []Named) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(name string, f func(r *Result) string) {
		fmt.Fprint(tw, name)
		for _, r := range runs {
			fmt.Fprint(tw, "\t", f(r.Result))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "FLEET")
	for _, r := range runs {
		fmt.Fprint(tw, "\t", r.Fleet)
	}
	fmt.Fprintln(tw)
	row("trace", func(r *Result) string { return fmt.Sprintf("%s (seed %d)", r.Trace, r.Seed) })
	row("jobs", func(r *Result) string { return fmt.Sprint(r.Jobs) })
	row("completed", func(r *Result) string { return fmt.Sprint(r.Completed) })
	row("failed", func(r *Result) string { return fmt.Sprint(r.Failed) })
	row("unfinished", func(r *Result) string { return fmt.Sprint(r.Unfinished) })
	row("wait mean", func(r *Result) string { return dur(r.WaitMean) })
	row("wait p50", func(r *Result) string { return dur(r.WaitP50) })
	row("wait p95", func(r *Result) string { return dur(r.WaitP95) })
	row("wait p99", func(r *Result) string { return dur(r.WaitP99) })
	row("GPU utilisation", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.GPUUtilisation) })
	row("cost", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostUSD) })
	row("  on-demand", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["on-demand"]) })
	row("  spot", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["spot"]) })
	row("  reserved", func(r *Result) string { return fmt.Sprintf("$%.2f", r.CostByCapacity["reserved"]) })
	row("instances", func(r *Result) string { return fmt.Sprint(r.Instances) })
	row("interruptions", func(r *Result) string { return fmt.Sprint(r.Interruptions) })
	row("preemptions", func(r *Result) string { return fmt.Sprint(r.Preemptions) })
	row("lost work", func(r *Result) string { return dur(r.LostWork) })
	row("simulated", func(r *Result) string { return dur(r.Simulated) })
	row("wall clock", func(r *Result) string { return r.Wall.Round(time.Millisecond).String() })
	row("digest", func(r *Result) string { return r.Digest[:16] })
	return tw.Flush()
}

// WriteJSON writes runs as a JSON array (durations in nanoseconds, as Go
// encodes them).
func WriteJSON(w io.Writer, runs []Named) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(runs)
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
