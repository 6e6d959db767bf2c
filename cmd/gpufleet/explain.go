package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newExplainCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "explain JOB",
		Short: "Say why a job waits: queue position, reasons per node group and offer, estimated start",
		Example: `  gpufleet explain j-abc123
  gpufleet explain j-abc123 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := newClient(g.dataDir)
			if err != nil {
				return err
			}
			e, err := c.Explain(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, e, func(tw *tabwriter.Writer) {
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
			})
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
