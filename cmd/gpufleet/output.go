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
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// outputFlag adds -o/--output to a read command.
func outputFlag(cmd *cobra.Command, target *string) {
	cmd.Flags().StringVarP(target, "output", "o", "table", "output format: table, json, yaml or jsonpath=TEMPLATE")
	completeOutput(cmd, "table", "json", "yaml", "jsonpath=")
}

// completeOutput completes -o with formats.
func completeOutput(cmd *cobra.Command, formats ...string) {
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return formats, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

// checkOutput refuses an output format render cannot write, before the
// command does anything: table, json, yaml, or jsonpath=TEMPLATE with a
// template that parses.
func checkOutput(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	if tmpl, ok := strings.CutPrefix(format, "jsonpath="); ok {
		if _, err := parseJSONPath(tmpl); err != nil {
			return usageError{err}
		}
		return nil
	}
	return usageError{fmt.Errorf("--output %q: want table, json, yaml or jsonpath=TEMPLATE (e.g. -o jsonpath='{.items[*].id}')", format)}
}

// itemList is what every list command prints as JSON or YAML:
// {"items": [...]}, never a bare array nor a key named after the kind, so
// that scripts read every list the same way (.items[]).
type itemList[T any] struct {
	Items []T `json:"items"`
}

// items wraps a list for output; nil becomes an empty list.
func items[T any](list []T) itemList[T] {
	if list == nil {
		list = []T{}
	}
	return itemList[T]{Items: list}
}

// parseJSONPath parses a kubectl-style JSONPath template ({.items[*].id}).
func parseJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	jp := jsonpath.New("output").AllowMissingKeys(true)
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("--output jsonpath=%s: %w", tmpl, err)
	}
	return jp, nil
}

// render writes v as JSON, YAML or a JSONPath template's result, or calls
// table for the table format.
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
	if tmpl, ok := strings.CutPrefix(format, "jsonpath="); ok {
		jp, err := parseJSONPath(tmpl)
		if err != nil {
			return usageError{err}
		}
		// The template sees the JSON document (its field names), as
		// -o json prints it.
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		if err := jp.Execute(w, doc); err != nil {
			return fmt.Errorf("--output jsonpath=%s: %w", tmpl, err)
		}
		return nil
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

// listCommand is readCommand for a list: get returns the items, which print
// as {"items": [...]} in JSON and YAML.
func listCommand[T any](g *globals, cmd *cobra.Command, get func(ctx context.Context, c *client.Client, args []string) ([]T, error), table func(*tabwriter.Writer, []T)) *cobra.Command {
	return readCommand(g, cmd, func(ctx context.Context, c *client.Client, args []string) (itemList[T], error) {
		list, err := get(ctx, c, args)
		return items(list), err
	}, func(tw *tabwriter.Writer, l itemList[T]) { table(tw, l.Items) })
}
