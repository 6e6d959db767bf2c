package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/controller"
)

func newNodesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "nodes",
		Aliases: []string{"node"},
		Short:   "Inspect the machines that run jobs",
	}
	list := readCommand(g, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List nodes, their GPUs and how many are free",
		Example: `  gpufleet nodes list
  gpufleet nodes list -o json`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) (api.NodeList, error) {
		return c.Nodes(ctx)
	}, func(tw *tabwriter.Writer, nodes api.NodeList) {
		row(tw, "ID", "NAME", "STATE", "PROVIDER", "GPUS", "FREE", "CPU", "MEMORY", "GPU SOURCE", "AGE")
		for _, n := range nodes.Nodes {
			row(tw, n.ID, n.Name, n.State, n.Provider, gpuList(n), len(n.GPUs)-len(n.GPUHolders), n.CPU, n.Memory.Human(), dash(n.GPUSource), age(n.RegisteredAt))
		}
	})
	cmd.AddCommand(list, newNodesInterruptCmd(g))
	return cmd
}

// gpuList summarises a node's GPUs as "8×H100 (80Gi)".
func gpuList(n controller.NodeInfo) string {
	if len(n.GPUs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d×%s (%s)", len(n.GPUs), n.GPUs[0].Model, n.GPUs[0].Memory.Human())
}
