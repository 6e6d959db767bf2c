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
	cmd := readCommand(g, &cobra.Command{
		Use:   "explain JOB",
		Short: "Say why a job waits (queue position, reasons per node group and offer, estimated start), or why a service has its replicas",
		Example: `  gpufleet explain j-abc123
  gpufleet explain j-abc123 -o json
  gpufleet explain service llm`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.Explanation, error) {
		return c.Explain(ctx, args[0])
	}, explainTable)
	cmd.AddCommand(newExplainServiceCmd(g))
	return cmd
}

func newExplainServiceCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:     "service SERVICE",
		Aliases: []string{"svc"},
		Short:   "Say why a service has the replicas it has: its policy, what the autoscaler measures now, its recent decisions and their reasons",
		Long: `Shows a service's autoscaling policy, the load the autoscaler reads now (requests in
flight, requests per second, p95 latency), the replica count it decided and each
replica's state, and its latest decisions (the service-scale events) with their
reasons, oldest first. A replica that is pending waits for the scheduler:
` + "`gpufleet explain JOB`" + ` says why.`,
		Example: `  gpufleet explain service llm
  gpufleet explain service llm -o json`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.ServiceView, error) {
		return c.Service(ctx, args[0])
	}, explainServiceTable)
}

// explainServiceTable renders why a service has its replicas.
func explainServiceTable(tw *tabwriter.Writer, s *api.ServiceView) {
	a, r := s.Spec.Autoscaling, s.Spec.Replicas
	row(tw, "SERVICE", s.Name)
	switch a.Metric {
	case "":
		row(tw, "POLICY", fmt.Sprintf("fixed at %d replicas (no autoscaling metric)", r.Target))
	case model.ScaleOnLatency:
		row(tw, "POLICY", fmt.Sprintf("p95 latency (time to first byte) at %s, ±10%%; %d to %d replicas", time.Duration(a.Target*float64(time.Second)), r.Min, r.Max))
	default:
		row(tw, "POLICY", fmt.Sprintf("%s at %g per ready replica; %d to %d replicas", a.Metric, a.Target, r.Min, r.Max))
	}
	if a.Metric != "" {
		row(tw, "WINDOWS", fmt.Sprintf("scale up after %s, down after %s of the metric asking for it", a.ScaleUpWindow, a.ScaleDownWindow))
	}
	p95 := "-"
	if s.Load.LatencySamples > 0 {
		p95 = fmt.Sprintf("%s over %d requests", time.Duration(s.Load.P95Seconds*float64(time.Second)).Round(time.Millisecond), s.Load.LatencySamples)
	}
	row(tw, "LOAD NOW", fmt.Sprintf("%d in flight (%d waiting for a replica), %.3g requests/s, p95 %s", s.InFlight, s.Load.Waiting, s.Load.Rate, p95))
	row(tw, "REPLICAS", fmt.Sprintf("%d desired, %d ready", s.Desired, s.Ready))
	for _, rep := range s.Replicas {
		line := fmt.Sprintf("%s %s (job %s), generation %d", rep.State, dash(rep.Address), rep.JobState, rep.Generation)
		if rep.State == model.ReplicaPending {
			line += "; why it waits: gpufleet explain " + rep.Job
		}
		row(tw, fmt.Sprintf("REPLICA %d", rep.Slot), rep.Job+" "+line)
	}
	fmt.Fprintln(tw)
	if len(s.Decisions) == 0 {
		row(tw, "DECISIONS", "none recorded (the count has stayed where it began)")
		return
	}
	row(tw, "TIME", "DECISION")
	for _, e := range s.Decisions {
		row(tw, e.Time.Format(time.RFC3339), e.Message)
	}
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
