package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
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
	for _, p := range e.Preempting {
		row(tw, "PREEMPTING", fmt.Sprintf("%s (work lost %s)", p.JobID, p.WorkLost.Round(time.Second)))
	}
	if c := e.Candidate; c != nil && len(c.Offers) > 0 {
		o := c.Offers[0]
		row(tw, "NEW CAPACITY", fmt.Sprintf("%d × %s %s/%s %s $%.2f/h, expected cost to finish $%.2f", c.Instances, o.InstanceType, o.Provider, o.Region, o.CapacityType, o.PricePerHour, c.ExpectedCost))
	}
	fmt.Fprintln(tw)
	row(tw, "SCOPE", "WHY NOT")
	for _, r := range e.Verdict.Reasons {
		row(tw, r.Scope, r.Message)
	}
}
