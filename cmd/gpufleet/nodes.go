package main

import (
	"cmp"
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newNodesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet nodes list
  gpufleet nodes list -o json`,
		Use:     "nodes",
		Aliases: []string{"node"},
		Short:   "Inspect the machines that run jobs",
	}
	list := listCommand(g, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List nodes, their GPUs and how many are free",
		Example: `  gpufleet nodes list
  gpufleet nodes list -o json`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]model.NodeInfo, error) {
		l, err := c.Nodes(ctx)
		return l.Nodes, err
	}, func(tw *tabwriter.Writer, nodes []model.NodeInfo) {
		row(tw, "ID", "NAME", "STATE", "PROVIDER", "GPUS", "FREE", "CPU", "MEMORY", "GPU SOURCE", "AGE")
		for _, n := range nodes {
			row(tw, n.ID, n.Name, n.State, n.Provider, gpuList(n), len(n.GPUs)-len(n.GPUHolders), n.CPU, n.Memory.Human(), dash(n.GPUSource), age(n.RegisteredAt))
		}
	})
	get := readCommand(g, &cobra.Command{
		Use:   "get NODE",
		Short: "Show a node's GPUs and the attempts holding them (another project's attempt shows as \"in use\")",
		Example: `  gpufleet nodes get node-1
  gpufleet nodes get node-1 -o json`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (model.NodeInfo, error) {
		nodes, err := c.Nodes(ctx)
		if err != nil {
			return model.NodeInfo{}, err
		}
		for _, n := range nodes.Nodes {
			if n.ID == args[0] || n.Name == args[0] {
				return n, nil
			}
		}
		return model.NodeInfo{}, fmt.Errorf("no node %q: gpufleet nodes list shows them", args[0])
	}, func(tw *tabwriter.Writer, n model.NodeInfo) {
		row(tw, "GPU", "MODEL", "MEMORY", "UUID", "HELD BY", "JOB", "PROJECT", "USER")
		for _, gpu := range n.GPUs {
			held, h := "free", n.Holders[gpu.Index]
			if h.InUse {
				held = cmp.Or(h.AttemptID, model.HolderInUse)
			}
			row(tw, gpu.Index, gpu.Model, gpu.Memory.Human(), gpu.UUID, held, dash(h.JobID), dash(h.Project), dash(h.User))
		}
	})
	cmd.AddCommand(list, get, newNodesInterruptCmd(g))
	return cmd
}

// gpuList summarises a node's GPUs as "8×H100 (80Gi)".
func gpuList(n model.NodeInfo) string {
	if len(n.GPUs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d×%s (%s)", len(n.GPUs), n.GPUs[0].Model, n.GPUs[0].Memory.Human())
}
