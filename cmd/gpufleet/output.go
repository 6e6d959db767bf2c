package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// outputFlag adds -o/--output to a read command.
func outputFlag(cmd *cobra.Command, target *string) {
	cmd.Flags().StringVarP(target, "output", "o", "table", "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
}

func checkOutput(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want table, json or yaml", format)
}

// render writes v as JSON or YAML, or calls table for the table format.
func render(w io.Writer, format string, v any, table func(tw *tabwriter.Writer)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		out, err := yaml.JSONToYAML(data)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes tab-separated cells.
func row(tw io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

// readCommand makes cmd a read command: it takes -o table|json|yaml, finds
// the server, fetches with get and renders the result, as a table with table
// or as JSON/YAML. Every read command shares this shape.
func readCommand[T any](g *globals, cmd *cobra.Command, get func(ctx context.Context, c *client.Client, args []string) (T, error), table func(*tabwriter.Writer, T)) *cobra.Command {
	var out string
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(out); err != nil {
			return err
		}
		c, err := g.client()
		if err != nil {
			return err
		}
		v, err := get(cmd.Context(), c, args)
		if err != nil {
			return err
		}
		return render(cmd.OutOrStdout(), out, v, func(tw *tabwriter.Writer) { table(tw, v) })
	}
	outputFlag(cmd, &out)
	return cmd
}
