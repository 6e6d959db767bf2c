package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/catalog"
)

// Dynamic shell completion: arguments named JOB, NODE, QUEUE or PROJECT
// in a command's Use, and the --queue, --project and --gpu flags, complete
// from the server (job ids with their name and state) or, for GPU models,
// from the embedded catalog. A server that does not answer within two
// seconds completes nothing rather than hanging the shell.

// completeTimeout bounds a completion's call to the server.
const completeTimeout = 2 * time.Second

type completer func(ctx context.Context, c *client.Client) ([]string, error)

func completeJobs(ctx context.Context, c *client.Client) ([]string, error) {
	jobs, err := c.ListJobs(ctx, client.ListOptions{Limit: 200})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, fmt.Sprintf("%s\t%s %s", j.ID, cmpOr(j.Name, "-"), j.State))
	}
	return out, nil
}

func completeNodes(ctx context.Context, c *client.Client) ([]string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(nodes.Nodes))
	for _, n := range nodes.Nodes {
		out = append(out, fmt.Sprintf("%s\t%s", n.ID, n.State))
	}
	return out, nil
}

func completeQueues(ctx context.Context, c *client.Client) ([]string, error) {
	qs, err := c.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out, nil
}

func completeProjects(ctx context.Context, c *client.Client) ([]string, error) {
	ps, err := c.Projects(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p.Name != "*" {
			out = append(out, fmt.Sprintf("%s\t%s", p.Name, p.Role))
		}
	}
	return out, nil
}

// completeGPUs lists the catalog's GPU models with their memory.
func completeGPUs(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	cat, err := catalog.Load()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	// --gpu takes a comma-separated list: complete its last element.
	head := ""
	if i := strings.LastIndex(prefix, ","); i >= 0 {
		head = prefix[:i+1]
	}
	seen := map[string]bool{}
	var out []string
	for _, a := range cat.Accelerators() {
		if seen[a.Name] {
			continue
		}
		seen[a.Name] = true
		desc := a.Vendor
		if a.Memory > 0 {
			desc = fmt.Sprintf("%s %s", a.Vendor, a.Memory)
		}
		out = append(out, head+a.Name+"\t"+desc)
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// fromServer turns a completer into a cobra completion function; it
// completes only the first n positional arguments (n < 0: all).
func fromServer(g *globals, n int, f completer) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if n >= 0 && len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := g.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
		defer cancel()
		out, err := f(ctx, c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// addCompletions wires dynamic completion into every command of the tree.
func addCompletions(root *cobra.Command, g *globals) {
	byArg := map[string]completer{"JOB": completeJobs, "NODE": completeNodes, "QUEUE": completeQueues, "PROJECT": completeProjects}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.ValidArgsFunction == nil {
			fields := strings.Fields(c.Use)
			if len(fields) > 1 {
				arg := strings.Trim(fields[1], "[]")
				many := strings.HasSuffix(arg, "...")
				if f, ok := byArg[strings.TrimSuffix(arg, "...")]; ok {
					n := 1
					if many {
						n = -1
					}
					c.ValidArgsFunction = fromServer(g, n, f)
				}
			}
		}
		for name, f := range map[string]completer{"queue": completeQueues, "project": completeProjects} {
			if fl := c.LocalFlags().Lookup(name); fl != nil {
				if _, ok := c.GetFlagCompletionFunc(name); !ok {
					_ = c.RegisterFlagCompletionFunc(name, fromServer(g, -1, f))
				}
			}
		}
		if fl := c.LocalFlags().Lookup("gpu"); fl != nil {
			if _, ok := c.GetFlagCompletionFunc("gpu"); !ok {
				_ = c.RegisterFlagCompletionFunc("gpu", completeGPUs)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	_ = root.RegisterFlagCompletionFunc("project", fromServer(g, -1, completeProjects))
}
