package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/server"
)

const fleetHelp = `A fleet is a set of manifests (apiVersion: gpufleet.dev/v1) of kind NodePool,
Queue and Project, in YAML (several documents per file, separated by ---) or
JSON files. -f takes files or directories (their *.yaml, *.yml and *.json
files); repeat it to combine. The set is the whole fleet: an object declared
before and missing now is deleted. See examples/fleet for a sample.`

// readFleet parses the -f paths locally, so problems name the file and
// document ("pools.yaml[1].spec.min"), and returns the request body.
func readFleet(files []string) (api.FleetRequest, error) {
	if len(files) == 0 {
		return api.FleetRequest{}, fmt.Errorf("give the fleet's manifests with -f FILE_OR_DIR")
	}
	var known func(string) bool
	if cat, err := catalog.Load(); err == nil {
		known = cat.KnownGPU
	}
	set, problems, err := manifest.ParseDocuments(files, manifest.Checks{KnownGPU: known, Pool: server.PoolChecks().CheckPool})
	if err != nil {
		return api.FleetRequest{}, err
	}
	if len(problems) > 0 {
		return api.FleetRequest{}, fmt.Errorf("the fleet is invalid:\n  %s", strings.ReplaceAll(problems.Err().Error(), "; ", "\n  "))
	}
	docs, _ := set.Documents()
	return api.FleetRequest{Documents: docs}, nil
}

func newPlanCmd(g *globals) *cobra.Command {
	var (
		files   []string
		out     string
		pending bool
	)
	cmd := &cobra.Command{
		Use:   "plan (-f PATH | --pending)",
		Short: "Show what applying a fleet's manifests would create, update and delete, and what it costs",
		Long: `Show what applying a fleet's manifests would change against the current
revision: + create, ~ update (with each changed field), - delete, and each
node pool's cost per hour at its min and max size.

` + fleetHelp + `

A pool's price: a sim pool's nodes cost the cheapest catalog offer it may
launch (its GPUs, clouds, regions, instance types and capacity types, spot
included when allowed); a static pool's, its machines' declared prices
(cheapest first); a kubernetes pool's, pricePerGPUHour × gpusPerNode.

--pending shows, on a server that follows a git repository (--gitops-repo,
docs/gitops.md), the repository's head commit and the plan of its documents
against the fleet: what autoApply would apply, or has not yet.`,
		Example: `  gpufleet plan -f examples/fleet
  gpufleet plan -f pools.yaml -f queues.yaml -o json
  gpufleet plan --pending`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if pending {
				if len(files) > 0 {
					return fmt.Errorf("--pending plans the server's git repository: give it without -f")
				}
				return planPending(cmd, g, out)
			}
			req, err := readFleet(files)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			p, err := c.Plan(cmd.Context(), req)
			if err != nil {
				return err
			}
			if out != "table" {
				return render(cmd.OutOrStdout(), out, p, nil)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "Plan against revision %d:\n\n", p.BaseRevision)
			writePlan(w, p.Result)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "manifest file or directory (repeatable)")
	cmd.Flags().BoolVar(&pending, "pending", false, "show the plan of the git repository's head the server follows (GitOps)")
	outputFlag(cmd, &out)
	return cmd
}

// writeGitDrift prints one line comparing the fleet with the head of the
// git repository the server follows.
func writeGitDrift(w io.Writer, st *gitops.Status) {
	switch {
	case st.Head == nil:
		fmt.Fprintf(w, "GitOps: no commit of %s fetched yet (%s)\n", st.URL, cmpOr(st.Error, "waiting for the first poll"))
	case st.InSync:
		fmt.Fprintf(w, "GitOps: the fleet matches %s@%s\n", st.Branch, st.Head.SHA[:min(12, len(st.Head.SHA))])
	case st.Pending != nil:
		fmt.Fprintf(w, "GitOps: the fleet differs from %s@%s in %d documents (gpufleet plan --pending)\n", st.Branch, st.Head.SHA[:min(12, len(st.Head.SHA))], len(st.Pending.Changes))
	}
}

// planPending prints the GitOps status: the head commit, and the plan of
// its documents when the fleet does not match them.
func planPending(cmd *cobra.Command, g *globals, out string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	st, err := c.GitOps(cmd.Context())
	if err != nil {
		return err
	}
	if out != "table" {
		return render(cmd.OutOrStdout(), out, st, nil)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "Repository %s, branch %s, path %s (autoApply %t)\n", st.URL, st.Branch, cmpOr(st.Path, "/"), st.AutoApply)
	if st.Head != nil {
		fmt.Fprintf(w, "Head %s by %s: %s\n", st.Head.SHA, st.Head.Author, st.Head.Subject)
	}
	if st.Applied > 0 {
		fmt.Fprintf(w, "Applied as revision %d\n", st.Applied)
	}
	if st.Error != "" {
		fmt.Fprintf(w, "Last poll failed: %s\n", st.Error)
	}
	switch {
	case st.Head == nil:
		fmt.Fprintln(w, "\nNo commit fetched yet.")
	case st.InSync:
		fmt.Fprintln(w, "\nThe fleet matches the head's documents.")
	case st.Pending != nil:
		fmt.Fprintf(w, "\nPending against revision %d:\n\n", st.BaseRevision)
		writePlan(w, *st.Pending)
	}
	return nil
}

// writePlan prints changes the way terraform does.
func writePlan(w io.Writer, r fleet.Result) {
	counts := map[fleet.Action]int{}
	for _, ch := range r.Changes {
		counts[ch.Action]++
		sign := map[fleet.Action]string{fleet.Create: "+", fleet.Update: "~", fleet.Delete: "-"}[ch.Action]
		fmt.Fprintf(w, "  %s %s %s", sign, ch.Kind, ch.Name)
		switch {
		case ch.Cost != nil && ch.OldCost != nil && *ch.Cost != *ch.OldCost:
			fmt.Fprintf(w, "    %s → %s", costText(ch.OldCost), costText(ch.Cost))
		case ch.Cost != nil:
			fmt.Fprintf(w, "    %s", costText(ch.Cost))
		case ch.OldCost != nil:
			fmt.Fprintf(w, "    (was %s)", costText(ch.OldCost))
		}
		fmt.Fprintln(w)
		for _, f := range ch.Fields {
			switch {
			case f.Old == nil:
				fmt.Fprintf(w, "      + %s: %s\n", f.Path, f.New)
			case f.New == nil:
				fmt.Fprintf(w, "      - %s: %s\n", f.Path, f.Old)
			default:
				fmt.Fprintf(w, "      ~ %s: %s → %s\n", f.Path, f.Old, f.New)
			}
		}
	}
	if len(r.Changes) == 0 {
		fmt.Fprintln(w, "  No changes: the fleet matches the manifests.")
	}
	fmt.Fprintf(w, "\nPlan: %d to create, %d to update, %d to delete. Declared pools: $%.2f/h at min, $%.2f/h at max.\n",
		counts[fleet.Create], counts[fleet.Update], counts[fleet.Delete], r.MinPerHour, r.MaxPerHour)
}

func costText(c *fleet.Cost) string {
	if c.Unknown != "" {
		return "cost unknown: " + c.Unknown
	}
	s := fmt.Sprintf("$%.2f/h at min … $%.2f/h at max", c.MinPerHour, c.MaxPerHour)
	if o := c.Offer; o != nil {
		s += fmt.Sprintf(" (%s %s %s %s at $%.2f/h)", o.Provider, o.InstanceType, o.Region, o.CapacityType, o.PricePerHour)
	}
	return s
}

func newApplyCmd(g *globals) *cobra.Command {
	var (
		files   []string
		message string
	)
	cmd := &cobra.Command{
		Use:   "apply -f PATH [-m MESSAGE]",
		Short: "Record a fleet's manifests as a new revision and apply them",
		Long: `Record a fleet's manifests as a new revision and apply them: node pools and
projects become the declared ones, declared queues are created or replaced,
and queues the previous revision declared but these manifests drop are
deleted. The revision and its changes are one durable commit. Applying the
current manifests again records nothing.

` + fleetHelp,
		Example: `  gpufleet apply -f examples/fleet -m "add the spot pool"
  gpufleet history`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := readFleet(files)
			if err != nil {
				return err
			}
			req.Message = message
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Apply(cmd.Context(), req)
			if err != nil {
				return err
			}
			writeApplied(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "manifest file or directory (repeatable)")
	cmd.Flags().StringVarP(&message, "message", "m", "", "what this revision changes, for history")
	return cmd
}

func writeApplied(w io.Writer, res *api.ApplyView) {
	if !res.Changed {
		n := 0
		if res.Revision != nil {
			n = res.Revision.Number
		}
		fmt.Fprintf(w, "No changes: the fleet is already at these manifests (revision %d).\n", n)
		return
	}
	writePlan(w, res.Result)
	fmt.Fprintf(w, "\nRevision %d recorded and applied.\n", res.Revision.Number)
}

// revisionList is `gpufleet history` as JSON or YAML: the revisions
// (oldest first) and the number of the current one.
type revisionList struct {
	Current int              `json:"current"`
	Items   []model.Revision `json:"items"`
}

func newHistoryCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "history",
		Short: "List the fleet's revisions",
		Example: `  gpufleet history
  gpufleet history -o yaml
  gpufleet history -o jsonpath='{.current}'`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) (revisionList, error) {
		l, err := c.Revisions(ctx)
		if err != nil {
			return revisionList{}, err
		}
		return revisionList{Current: l.Current, Items: items(l.Revisions).Items}, nil
	}, func(tw *tabwriter.Writer, list revisionList) {
		row(tw, "REVISION", "CREATED", "AUTHOR", "DIGEST", "MESSAGE")
		for i := len(list.Items) - 1; i >= 0; i-- {
			r := list.Items[i]
			num := strconv.Itoa(r.Number)
			if r.Number == list.Current {
				num += " (current)"
			}
			msg := r.Message
			if r.RollbackOf > 0 && msg == "" {
				msg = fmt.Sprintf("rollback to %d", r.RollbackOf)
			}
			if r.Commit != "" {
				msg = strings.TrimSpace(fmt.Sprintf("%s (git %s by %s)", msg, r.Commit[:min(12, len(r.Commit))], r.CommitAuthor))
			}
			row(tw, num, r.CreatedAt.Local().Format("2006-01-02 15:04:05"), dash(r.Author), r.Digest[:min(12, len(r.Digest))], dash(msg))
		}
	})
}

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		to      int
		message string
	)
	cmd := &cobra.Command{
		Use:   "rollback --to N",
		Short: "Re-apply an earlier revision's manifests as a new revision",
		Example: `  gpufleet history
  gpufleet rollback --to 3 -m "undo the pool resize"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < 1 {
				return fmt.Errorf("give the revision to roll back to with --to N (see gpufleet history)")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Rollback(cmd.Context(), api.RollbackRequest{To: to, Message: message})
			if err != nil {
				return err
			}
			writeApplied(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "revision number to re-apply")
	cmd.Flags().StringVarP(&message, "message", "m", "", "why (default: rollback to revision N)")
	return cmd
}

func newDriftCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "drift",
		Short: "Report where the running fleet differs from the declared one",
		Long: `Report where the running fleet differs from the current revision: pools
below min or above max, lost nodes, nodes whose provider instance is gone
(terminated outside gpufleet), instances no node stands for, nodes in no
declared pool, static machines without a node, and declared queues changed
or deleted through the queue API. Exits 0 either way.`,
		Example: `  gpufleet drift
  gpufleet drift -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			rep, err := c.Drift(cmd.Context())
			if err != nil {
				return err
			}
			if out == "table" && rep.GitOps != nil {
				writeGitDrift(cmd.OutOrStdout(), rep.GitOps)
			}
			if out == "table" && len(rep.Findings) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No drift: the running fleet matches revision %d.\n", rep.Revision)
				return nil
			}
			return render(cmd.OutOrStdout(), out, rep, func(tw *tabwriter.Writer) {
				row(tw, "KIND", "NAME", "ISSUE", "DETAIL")
				for _, f := range rep.Findings {
					row(tw, f.Kind, f.Name, f.Issue, f.Detail)
				}
			})
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
