package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newJobsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Example: `  gpufleet jobs list
  gpufleet jobs get j-abcdefghij
  gpufleet jobs logs j-abcdefghij --follow
  gpufleet jobs cancel j-abcdefghij`,
		Use:     "jobs",
		Aliases: []string{"job"},
		Short:   "List, inspect, follow and cancel jobs",
	}
	cmd.AddCommand(newJobsListCmd(g), newJobsGetCmd(g), newJobsLogsCmd(g), newJobsCancelCmd(g), newJobsTopCmd(g), newJobsExportCmd(g))
	return cmd
}

func newJobsListCmd(g *globals) *cobra.Command {
	var (
		out, array, user, queue string
		states                  []string
		limit                   int
		all, allProjects, watch bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List jobs, newest first",
		Long: `List jobs, newest first: by default the unfinished jobs of the context's default
project (every project the token may read when there is none, or with -A).
-o wide adds project, user, queue and priority; -w keeps watching and prints a
line for each job whose state or reason changes.`,
		Example: `  gpufleet jobs list
  gpufleet jobs list --state running,queued -o json
  gpufleet jobs list --all --limit 50 --user alice --queue research
  gpufleet jobs list -A -o wide
  gpufleet jobs list -o jsonpath='{.items[*].id}'
  gpufleet jobs list -w
  gpufleet jobs list --all --array j-abcdefghij     # the tasks of an array job`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "wide" {
				if err := checkOutput(out); err != nil {
					return usageError{fmt.Errorf("%w (or wide)", err)}
				}
			}
			for _, st := range states {
				if !slices.Contains(model.JobStates, model.JobState(st)) {
					var valid []string
					for _, v := range model.JobStates {
						valid = append(valid, string(v))
					}
					return usageError{fmt.Errorf("--state %q: not a job state; valid states: %s", st, strings.Join(valid, ", "))}
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if len(states) == 0 && !all {
				states = []string{"queued", "admitted", "provisioning", "running"}
			}
			opts := client.ListOptions{States: states, Array: array, Limit: limit, User: user, Queue: queue}
			if !allProjects {
				opts.Project = g.defaultProject()
			}
			jobs, err := c.ListJobs(cmd.Context(), opts)
			if err != nil {
				return err
			}
			wide := out == "wide"
			header := func(tw *tabwriter.Writer) {
				if wide {
					row(tw, "ID", "NAME", "PROJECT", "USER", "QUEUE", "PRIORITY", "STATE", "GPUS", "ATTEMPTS", "AGE", "REASON")
				} else {
					row(tw, "ID", "NAME", "STATE", "GPUS", "ATTEMPTS", "AGE", "REASON")
				}
			}
			line := func(tw *tabwriter.Writer, j *model.Job) {
				reason := dash(truncate(j.Reason, 60))
				if wide {
					row(tw, j.ID, dash(j.Name), j.Project, dash(j.User), j.Spec.Queue, dash(j.Spec.Priority), j.State, gpuSummary(j), j.Attempts, age(j.SubmittedAt), reason)
				} else {
					row(tw, j.ID, dash(j.Name), j.State, gpuSummary(j), j.Attempts, age(j.SubmittedAt), reason)
				}
			}
			format := out
			if wide {
				format = "table"
			}
			if err := render(cmd.OutOrStdout(), format, items(jobs), func(tw *tabwriter.Writer) {
				header(tw)
				for _, j := range jobs {
					line(tw, j)
				}
			}); err != nil || !watch {
				return err
			}
			return watchJobs(cmd, c, opts, jobs, format, func(tw *tabwriter.Writer, j *model.Job) { line(tw, j) })
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "table", "output format: table, wide, json, yaml or jsonpath=TEMPLATE")
	completeOutput(cmd, "table", "wide", "json", "yaml", "jsonpath=")
	fl.StringSliceVar(&states, "state", nil, "only jobs in these states (default: unfinished jobs)")
	fl.BoolVarP(&all, "all", "a", false, "include finished jobs")
	fl.BoolVarP(&allProjects, "all-projects", "A", false, "every project the token may read, not only the default project")
	fl.StringVar(&user, "user", "", "only jobs this user submitted")
	fl.StringVar(&queue, "queue", "", "only jobs of this queue")
	fl.BoolVarP(&watch, "watch", "w", false, "after the list, print each job whose state or reason changes (every 2s) until interrupted")
	fl.IntVar(&limit, "limit", 100, "most jobs to show")
	fl.StringVar(&array, "array", "", "only the tasks of this array job")
	_ = cmd.RegisterFlagCompletionFunc("state", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var s []string
		for _, st := range model.JobStates {
			s = append(s, string(st))
		}
		return s, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// watchJobs polls the list and prints each job whose state or reason
// changed since it was last shown (a JSON or YAML document per change in
// those formats), until the command's context ends.
func watchJobs(cmd *cobra.Command, c *client.Client, opts client.ListOptions, first []*model.Job, format string, line func(*tabwriter.Writer, *model.Job)) error {
	// Finished jobs must stay visible to report their end.
	opts.States = nil
	seen := map[string]string{}
	key := func(j *model.Job) string { return string(j.State) + "\x00" + j.Reason }
	for _, j := range first {
		seen[j.ID] = key(j)
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-cmd.Context().Done():
			return nil
		case <-tick.C:
		}
		jobs, err := c.ListJobs(cmd.Context(), opts)
		if err != nil {
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		}
		for i := len(jobs) - 1; i >= 0; i-- { // oldest change first
			j := jobs[i]
			k := key(j)
			old, known := seen[j.ID]
			if old == k || (!known && j.State.Terminal() && len(first) > 0 && j.SubmittedAt.Before(first[len(first)-1].SubmittedAt)) {
				continue
			}
			seen[j.ID] = k
			if format != "table" {
				if err := render(cmd.OutOrStdout(), format, j, nil); err != nil {
					return err
				}
				continue
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			line(tw, j)
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
}

func newJobsGetCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "get JOB",
		Short: "Show a job, its attempts and why it waits",
		Example: `  gpufleet jobs get j-abcdefghij
  gpufleet jobs get j-abcdefghij -o yaml`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*api.JobView, error) {
		return c.Job(ctx, args[0])
	}, jobTable)
}

func jobTable(tw *tabwriter.Writer, v *api.JobView) {
	j := v.Job
	row(tw, "ID:", j.ID)
	row(tw, "Name:", dash(j.Name))
	row(tw, "Project:", j.Project)
	row(tw, "User:", dash(j.User))
	row(tw, "State:", j.State)
	if j.Reason != "" {
		row(tw, "Reason:", j.Reason)
	}
	if j.ExitCode != nil {
		row(tw, "Exit code:", *j.ExitCode)
	}
	row(tw, "Queue:", j.Spec.Queue)
	row(tw, "Resources:", fmt.Sprintf("%d × %s", j.Spec.Replicas, replicaResources(j.Spec.Resources)))
	row(tw, "Command:", strings.Join(j.Spec.Run.Command, " "))
	row(tw, "Submitted:", j.SubmittedAt.Local().Format(time.RFC3339)+" ("+age(j.SubmittedAt)+" ago)")
	if len(j.Tags) > 0 {
		var tags []string
		for k, val := range j.Tags {
			tags = append(tags, k+"="+val)
		}
		sort.Strings(tags)
		row(tw, "Tags:", strings.Join(tags, ","))
	}
	if v.Cost != nil {
		row(tw, "Cost:", fmt.Sprintf("%s across %d attempts", dollars(v.Cost.Total), j.Attempts))
	}
	efficiencyRows(tw, v.Efficiency)
	if j.State == model.JobQueued && j.RetryAt != nil && time.Until(*j.RetryAt) > 0 {
		row(tw, "Backing off:", fmt.Sprintf("after %d failures; next try at %s (in %s)", j.Failures, j.RetryAt.Local().Format(time.RFC3339), time.Until(*j.RetryAt).Round(time.Second)))
	}
	if v.Pending != nil {
		row(tw, "Queue position:", v.Pending.Position)
		for _, r := range v.Pending.Reasons {
			row(tw, "Waiting:", r.Scope+": "+r.Message)
		}
	}
	if len(v.AttemptDetails) > 0 {
		row(tw, "")
		row(tw, "ATTEMPT", "STATE", "NODES", "GPUS", "STARTED", "ENDED", "EXIT", "REASON")
		for _, a := range v.AttemptDetails {
			var nodes, gpus []string
			for _, r := range a.Replicas {
				nodes = append(nodes, r.NodeID)
				gpus = append(gpus, ints(r.GPUs))
			}
			row(tw, a.Number, a.State, strings.Join(nodes, ","), dash(strings.Join(gpus, ";")), timeOrDash(a.StartedAt), timeOrDash(a.EndedAt), codeOrDash(a.ExitCode), dash(a.Reason))
		}
	}
	if av := v.Array; av != nil {
		var counts []string
		for _, st := range model.JobStates {
			if n := av.States[st]; n > 0 {
				counts = append(counts, fmt.Sprintf("%d %s", n, st))
			}
		}
		row(tw, "Tasks:", fmt.Sprintf("%d (%s)", av.Size, strings.Join(counts, ", ")))
		row(tw, "")
		row(tw, "INDEX", "TASK", "STATE", "ATTEMPTS", "REASON")
		for _, t := range av.Tasks {
			row(tw, t.ArrayIndex, t.ID, t.State, t.Attempts, dash(truncate(t.Reason, 60)))
		}
	}
}

func newJobsLogsCmd(g *globals) *cobra.Command {
	var (
		o      client.LogOptions
		follow bool
		task   int
	)
	cmd := &cobra.Command{
		Use:   "logs JOB",
		Short: "Print a job's output (stdout and stderr)",
		Long: `Prints a job's output. For an array job it prints every task's, each line
prefixed with [task N], or one task's with --task N (or name the task, ID-N).
A queued job that has not started has no output yet: it says so, and why it waits.`,
		Example: `  gpufleet jobs logs j-abcdefghij
  gpufleet jobs logs -f j-abcdefghij            # follow until the job ends
  gpufleet jobs logs --attempt 1 --rank 2 j-abcdefghij
  gpufleet jobs logs j-abcdefghij --task 3      # task 3 of an array job
  gpufleet jobs logs -f j-abcdefghij            # an array: every task, lines prefixed [task N]`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			id := args[0]
			v, err := c.Job(cmd.Context(), id)
			if err != nil {
				return err
			}
			if v.Array != nil {
				if cmd.Flags().Changed("task") {
					if task < 0 || task >= v.Array.Size {
						return usageError{fmt.Errorf("--task %d: array %s has tasks 0 to %d", task, id, v.Array.Size-1)}
					}
					id = fmt.Sprintf("%s-%d", id, task)
				} else {
					return arrayLogs(cmd, c, v.Array, o, follow)
				}
			} else if cmd.Flags().Changed("task") {
				return usageError{fmt.Errorf("--task: %s is not an array job", id)}
			}
			if follow && o.Attempt == 0 {
				_, err := followJob(cmd, c, id, o.Rank, cmd.OutOrStdout())
				return err
			}
			if id != args[0] {
				if v, err = c.Job(cmd.Context(), id); err != nil {
					return err
				}
			}
			if v.Attempts == 0 && o.Attempt == 0 {
				why := ""
				if line, _ := waitingLine("", v); line != "" {
					why = " (" + line + ")"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: %s is %s and has no logs yet%s; follow it with `gpufleet jobs logs -f %s`\n", id, v.State, why, id)
				return nil
			}
			o.Follow = follow
			_, err = c.Logs(cmd.Context(), id, o, cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the output until the job ends (across attempts)")
	cmd.Flags().IntVar(&o.Attempt, "attempt", 0, "attempt number (default: the latest)")
	cmd.Flags().IntVar(&o.Rank, "rank", 0, "replica rank of a multi-replica job")
	cmd.Flags().IntVar(&task, "task", 0, "for an array job: only this task's output (default: every task's, prefixed)")
	return cmd
}

// arrayLogs prints every task's output, each line prefixed with its task:
// one task after the other, or with follow all at once, whole lines
// interleaved as they come.
func arrayLogs(cmd *cobra.Command, c *client.Client, av *api.ArrayView, o client.LogOptions, follow bool) error {
	out := &lockedWriter{w: cmd.OutOrStdout()}
	if !follow {
		for _, t := range av.Tasks {
			if t.Attempts == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: task %d (%s) is %s and has no logs yet\n", t.ArrayIndex, t.ID, t.State)
				continue
			}
			pw := &prefixWriter{w: out, prefix: fmt.Sprintf("[task %d] ", t.ArrayIndex)}
			if _, err := c.Logs(cmd.Context(), t.ID, o, pw); err != nil {
				return fmt.Errorf("task %d (%s): %w", t.ArrayIndex, t.ID, err)
			}
			pw.Flush()
		}
		return nil
	}
	errs := make(chan error, len(av.Tasks))
	for _, t := range av.Tasks {
		go func() {
			pw := &prefixWriter{w: out, prefix: fmt.Sprintf("[task %d] ", t.ArrayIndex)}
			_, err := followJob(cmd, c, t.ID, o.Rank, pw)
			pw.Flush()
			if err != nil {
				err = fmt.Errorf("task %d (%s): %w", t.ArrayIndex, t.ID, err)
			}
			errs <- err
		}()
	}
	var first error
	for range av.Tasks {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter writes whole lines, each with prefix; Flush writes a last
// line without its newline.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := append([]byte(p.prefix), p.buf[:i+1]...)
		p.buf = p.buf[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), err
		}
	}
}

// Flush writes what is left of an unfinished last line.
func (p *prefixWriter) Flush() {
	if len(p.buf) > 0 {
		_, _ = p.w.Write(append(append([]byte(p.prefix), p.buf...), '\n'))
		p.buf = nil
	}
}

// followJob streams a job's output attempt after attempt until it ends and
// returns the job.
func followJob(cmd *cobra.Command, c *client.Client, id string, rank int, out io.Writer) (*api.JobView, error) {
	ctx := cmd.Context()
	attempt := 0
	waiting := ""
	for {
		v, err := c.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if line, changed := waitingLine(waiting, v); changed {
			waiting = line
			if line != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: %s waits: %s\n", id, line)
			}
		}
		switch {
		case v.Attempts > attempt:
			attempt++
			if attempt > 1 {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: following attempt %d of %s\n", attempt, id)
			}
			if _, err := c.Logs(ctx, id, client.LogOptions{Attempt: attempt, Rank: rank, Follow: true}, out); err != nil {
				return nil, err
			}
			continue
		case v.State.Terminal():
			return v, nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: stopped following; %s goes on (cancel it with `gpufleet jobs cancel %s`)\n", id, id)
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitingLine is why a queued job waits in one line (its verdict's
// summary), and whether it differs from prev, the line last printed; ""
// once the job no longer waits.
func waitingLine(prev string, v *api.JobView) (string, bool) {
	line := ""
	if v.State == model.JobQueued && v.Pending != nil {
		line = v.Pending.Summary()
		if v.Pending.Position > 0 {
			line = fmt.Sprintf("#%d in queue %s; %s", v.Pending.Position, v.Pending.Queue, line)
		}
	}
	return line, line != prev
}

func newJobsCancelCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "cancel JOB...",
		Short: "Cancel jobs (an array job's id: all its tasks): running replicas get their checkpoint signal, then SIGKILL after the grace period",
		Example: `  gpufleet jobs cancel j-abcdefghij
  gpufleet jobs cancel j-abcdefghij j-klmnopqrst`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var views []*api.JobView
			var failed []string
			var last error
			for _, id := range args {
				v, err := c.Cancel(cmd.Context(), id)
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: cancelling %s: %v\n", id, err)
					failed, last = append(failed, id), err
					continue
				}
				views = append(views, v)
			}
			if len(views) == 0 && out == "table" {
				// Nothing to show: the error says why (and sets the exit code).
				return fmt.Errorf("could not cancel %s: %w", strings.Join(failed, ", "), last)
			}
			err = render(cmd.OutOrStdout(), out, views, func(tw *tabwriter.Writer) {
				row(tw, "ID", "STATE", "NOTE")
				for _, v := range views {
					note := "cancelled"
					if !v.State.Terminal() {
						note = fmt.Sprintf("stopping: %s, then SIGKILL after %s", v.Spec.Checkpoint.Signal, v.Spec.Checkpoint.Grace)
					}
					row(tw, v.ID, v.State, note)
				}
			})
			if err == nil && len(failed) > 0 {
				err = fmt.Errorf("could not cancel %s: %w", strings.Join(failed, ", "), last)
			}
			return err
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func gpuSummary(j *model.Job) string {
	r := j.Spec.Resources
	if r.GPUs == 0 {
		return "0"
	}
	s := fmt.Sprintf("%g", r.GPUs)
	if len(r.GPU.Models) > 0 {
		s += "×" + strings.Join(r.GPU.Models, "|")
	}
	if j.Spec.Replicas > 1 {
		s = fmt.Sprintf("%d×(%s)", j.Spec.Replicas, s)
	}
	return s
}

func replicaResources(r model.Resources) string {
	parts := []string{fmt.Sprintf("%g GPU", r.GPUs)}
	if len(r.GPU.Models) > 0 {
		parts[0] += " " + strings.Join(r.GPU.Models, "|")
	}
	if r.GPU.MinMemory > 0 {
		parts = append(parts, "≥"+r.GPU.MinMemory.String()+" GPU memory")
	}
	if r.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%g CPU", r.CPU))
	}
	if r.Memory > 0 {
		parts = append(parts, r.Memory.String()+" memory")
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("15:04:05")
}

func codeOrDash(c *int) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprint(*c)
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
