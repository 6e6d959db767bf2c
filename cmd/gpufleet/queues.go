package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
)

func newQueuesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet queues list
  gpufleet queues get research`,
		Use:     "queues",
		Aliases: []string{"queue"},
		Short:   "List, inspect, apply and delete queues (quota, cohort, fair-share weight)",
	}
	cmd.AddCommand(newQueuesListCmd(g), newQueuesGetCmd(g), newQueuesApplyCmd(g), newQueuesDeleteCmd(g))
	return cmd
}

func quotaSummary(q api.QueueView) string {
	if len(q.Spec.Quota) == 0 {
		return "unlimited"
	}
	keys := make([]string, 0, len(q.Spec.Quota))
	for k := range q.Spec.Quota {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		l := q.Spec.Quota[k]
		s := fmt.Sprintf("%s=%g/%g", k, q.Use[k], l.Nominal)
		if l.BorrowingLimit != nil {
			s += fmt.Sprintf("(+%g)", *l.BorrowingLimit)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func useSummary(use map[string]float64) string {
	if len(use) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(use))
	for k := range use {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%gx%s", use[k], k))
	}
	return strings.Join(parts, " ")
}

func newQueuesListCmd(g *globals) *cobra.Command {
	return listCommand(g, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List queues with their quota and use",
		Example: `  gpufleet queues list
  gpufleet queues list -o yaml`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]api.QueueView, error) {
		return c.Queues(ctx)
	}, func(tw *tabwriter.Writer, qs []api.QueueView) {
		row(tw, "NAME", "COHORT", "WEIGHT", "QUOTA (used/nominal)", "IN USE", "PENDING")
		for _, q := range qs {
			row(tw, q.Name, dash(q.Spec.Cohort), q.Spec.EffectiveWeight(), quotaSummary(q), useSummary(q.Use), q.Pending)
		}
	})
}

func newQueuesGetCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "get QUEUE",
		Short: "Show one queue",
		Example: `  gpufleet queues get research
  gpufleet queues get default -o json`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.QueueView, error) {
		return c.Queue(ctx, args[0])
	}, func(tw *tabwriter.Writer, q *api.QueueView) {
		row(tw, "NAME", q.Name)
		row(tw, "COHORT", dash(q.Spec.Cohort))
		row(tw, "WEIGHT", q.Spec.EffectiveWeight())
		row(tw, "QUOTA", quotaSummary(*q))
		row(tw, "IN USE", useSummary(q.Use))
		row(tw, "PENDING", q.Pending)
		row(tw, "DECAYED GPU-HOURS", fmt.Sprintf("%.1f", q.DecayedUsage))
	})
}

func newQueuesApplyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f queue.yaml",
		Short: "Create or replace a queue from a Queue manifest",
		Long: `Create or replace a queue from a manifest of kind Queue:

  apiVersion: gpufleet.dev/v1
  kind: Queue
  metadata: {name: research}
  spec:
    cohort: ml            # queues of one cohort lend each other unused quota
    weight: 2             # fair-share weight (default 1)
    quota:                # GPUs per model; "*" counts any model not listed
      H100: {nominal: 16, borrowingLimit: 8}
      "*": {nominal: 4}

A queue without quota is unlimited. Changing quota affects new admissions;
running work is reclaimed only when a lender in the cohort needs its GPUs.`,
		Example: `  gpufleet queues apply -f research.yaml
  cat queue.yaml | gpufleet queues apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("give the manifest with -f FILE (or -f - for stdin)")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", file, err)
			}
			var head struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(data, &head); err != nil || head.Metadata.Name == "" {
				return fmt.Errorf("%s: the manifest needs metadata.name (see gpufleet queues apply --help)", file)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q, err := c.PutQueue(cmd.Context(), head.Metadata.Name, data, "application/yaml")
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s applied (version %d)\n", q.Name, q.Version)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "Queue manifest (YAML or JSON); - reads stdin")
	return cmd
}

func newQueuesDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete QUEUE",
		Aliases: []string{"rm"},
		Short:   "Delete a queue that has no running work",
		Example: `  gpufleet queues delete research`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteQueue(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s deleted\n", args[0])
			return nil
		},
	}
}
