package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func newExplainCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "explain JOB",
		Short: "Say why a job waits: queue position, reasons per node group and offer, estimated start",
		Example: `  gpufleet explain j-abc123
  gpufleet explain j-abc123 -o json`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.Explanation, error) {
		return c.Explain(ctx, args[0])
	}, explainTable)
}

// explainTable renders an explanation: the job's place in its queue and, for
// a pending job, why each scope cannot take it.
func explainTable(tw *tabwriter.Writer, e *api.Explanation) {
	row(tw, "JOB", e.JobID)
	row(tw, "STATE", e.State)
	row(tw, "QUEUE", e.Queue)
	if !e.Pending {
		row(tw, "REASON", dash(e.Reason))
		for _, r := range e.Placement {
			row(tw, "PLACED", r.Scope+" "+r.Message)
		}
		return
	}
	if e.Verdict == nil {
		row(tw, "VERDICT", "not yet considered by a scheduling pass; try again in a second")
		return
	}
	row(tw, "POSITION", e.Verdict.Position)
	if e.Verdict.EstimatedStart != nil {
		row(tw, "ESTIMATED START", fmt.Sprintf("%s (in %s)", e.Verdict.EstimatedStart.Format(time.RFC3339), time.Until(*e.Verdict.EstimatedStart).Round(time.Second)))
	}
	if at := e.Verdict.RetryAt; at != nil {
		row(tw, "BACKING OFF", fmt.Sprintf("after a failed attempt; next try at %s (in %s)", at.Format(time.RFC3339), max(time.Until(*at), 0).Round(time.Second)))
	}
	for _, p := range e.Preempting {
		row(tw, "PREEMPTING", fmt.Sprintf("%s (work lost %s)", p.JobID, p.WorkLost.Round(time.Second)))
	}
	if c := e.Candidate; c != nil && len(c.Offers) > 0 {
		row(tw, "NEW CAPACITY", candidateLine(c))
	}
	for _, b := range e.LaunchBackoffs {
		what := "LAUNCH BACK-OFF"
		if b.ForJob {
			what = "LAUNCH FAILED"
		}
		row(tw, what, fmt.Sprintf("%s: %d failed launches; not tried before %s (in %s)", b.Offer, b.Failures, b.Until.Format(time.RFC3339), max(time.Until(b.Until), 0).Round(time.Second)))
	}
	for _, u := range e.Unavailable {
		o := u.Offer
		what := fmt.Sprintf("%s/%s/%s %s %s", o.Provider, o.Region, o.Zone, o.InstanceType, o.CapacityType)
		if u.Kind == model.UnavailableQuota {
			what = fmt.Sprintf("%s/%s for pool %s", o.Provider, o.Region, u.Pool)
		}
		row(tw, "UNAVAILABLE", fmt.Sprintf("%s: %s until %s (in %s)", what, u.Kind, u.Until.Format(time.RFC3339), max(time.Until(u.Until), 0).Round(time.Second)))
	}
	fmt.Fprintln(tw)
	row(tw, "SCOPE", "WHY NOT")
	for _, r := range e.Verdict.Reasons {
		row(tw, r.Scope, r.Message)
	}
}

// candidateLine describes the best new capacity for a job. The expected
// cost to finish is shown only when the job has a runtime estimate (or
// limit): without one the scheduler ranks offers on an assumed runtime,
// and a dollar figure would read as a prediction it is not.
func candidateLine(c *scheduler.Candidate) string {
	o := c.Offers[0]
	s := fmt.Sprintf("%d × %s %s/%s %s $%.2f/h", c.Instances, o.InstanceType, o.Provider, o.Region, o.CapacityType, o.PricePerHour)
	if !o.PriceAsOf.IsZero() {
		s += fmt.Sprintf(" (live price as of %s)", o.PriceAsOf.Format(time.RFC3339))
	}
	if c.RuntimeAssumed {
		return s + "; no expected cost to finish without a runtime estimate (set spec.estimate.runtime or limits.runtime)"
	}
	return s + fmt.Sprintf(", expected cost to finish $%.2f", c.ExpectedCost)
}
