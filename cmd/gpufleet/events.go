package main

import (
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
)

func newEventsCmd(g *globals) *cobra.Command {
	var out, kind, job, node, since string
	var follow bool
	var limit int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show launches, failures, failovers, notices, drains, requeues and terminations",
		Example: `  gpufleet events
  gpufleet events -f --kind launch,launch-failed,failover,notice
  gpufleet events --job j-abc123 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			for k, v := range map[string]string{"kind": kind, "job": job, "node": node, "since": since} {
				if v != "" {
					q.Set(k, v)
				}
			}
			q.Set("limit", strconv.Itoa(limit))
			table := func(list api.EventList, header bool) func(tw *tabwriter.Writer) {
				return func(tw *tabwriter.Writer) {
					if header {
						row(tw, "SEQ", "TIME", "KIND", "OBJECT", "MESSAGE")
					}
					for _, e := range list.Events {
						row(tw, e.Seq, e.Time.Local().Format("15:04:05"), e.Kind, e.Object, e.Message)
					}
				}
			}
			list, err := c.Events(cmd.Context(), q)
			if err != nil {
				return err
			}
			if err := render(cmd.OutOrStdout(), out, items(list.Events), table(list, true)); err != nil || !follow {
				return err
			}
			var last uint64
			if n := len(list.Events); n > 0 {
				last = list.Events[n-1].Seq
			}
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
				q.Set("after", fmt.Sprint(last))
				list, err := c.Events(cmd.Context(), q)
				if err != nil {
					return err
				}
				if len(list.Events) == 0 {
					continue
				}
				last = list.Events[len(list.Events)-1].Seq
				if err := render(cmd.OutOrStdout(), out, items(list.Events), table(list, false)); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().StringVar(&kind, "kind", "", "comma-separated event kinds")
	cmd.Flags().StringVar(&job, "job", "", "only events of this job")
	cmd.Flags().StringVar(&node, "node", "", "only events of this node")
	cmd.Flags().StringVar(&since, "since", "", "RFC 3339 time or duration such as 1h")
	cmd.Flags().IntVar(&limit, "limit", 100, "most events to show first")
	outputFlag(cmd, &out)
	return cmd
}

func newNodesInterruptCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Example: `  gpufleet nodes list
  gpufleet nodes interrupt n-abcdefghij`,
		Use:   "interrupt NODE",
		Short: "Inject a spot notice for a node's instance (sim clouds; a drill or demo)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			nt, err := c.InterruptNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: %s notice for instance %s, stops at %s\n", args[0], nt.Reason, nt.InstanceID, nt.Deadline.Local().Format(time.RFC3339))
			return nil
		},
	}
}
