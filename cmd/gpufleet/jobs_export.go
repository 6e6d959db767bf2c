package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/trace"
)

func newJobsExportCmd(g *globals) *cobra.Command {
	var (
		format, file string
		allProjects  bool
		limit        int
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the server's finished jobs as a trace for 'gpufleet simulate'",
		Long: `Write the server's ended jobs in gpufleet's JSONL trace format (docs/simulate.md):
submission times from the earliest, GPUs, replicas, GPU models, queue, project,
tags, checkpoint interval, and as runtime the time from the job's first start to
its end. Jobs that never ran are left out. Replay the file with
'gpufleet simulate -f FLEET --trace FILE'.`,
		Example: `  gpufleet jobs export --format trace -o history.jsonl
  gpufleet jobs export --format trace --all-projects > all.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "trace" {
				return usageError{fmt.Errorf("--format %q: only trace is supported", format)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			opts := client.ListOptions{States: []string{"succeeded", "failed", "cancelled", "stopped-early"}, Limit: limit}
			if !allProjects {
				opts.Project = g.defaultProject()
			}
			jobs, err := c.ListJobs(cmd.Context(), opts)
			if err != nil {
				return err
			}
			tr := trace.FromJobs("export", jobs)
			var w io.Writer = cmd.OutOrStdout()
			if file != "" && file != "-" {
				f, err := os.Create(file)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			if err := trace.Write(w, tr); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d jobs written (%d not run)\n", len(tr.Jobs), tr.Skipped["never ran"])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "trace", "output format: trace (gpufleet's JSONL trace)")
	f.StringVarP(&file, "output", "o", "-", "file to write (- for stdout)")
	f.BoolVarP(&allProjects, "all-projects", "A", false, "export the jobs of every project you can see")
	f.IntVar(&limit, "limit", 100000, "most jobs to export, newest first")
	return cmd
}
