package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/efficiency"
)

// efficiencyRows adds a job's efficiency and effective cost to `jobs get`.
func efficiencyRows(tw *tabwriter.Writer, e *efficiency.Report) {
	if e == nil {
		return
	}
	src := ""
	if e.Source == "simulated" {
		src = " (simulated telemetry)"
	}
	row(tw, "Efficiency:", string(e.Verdict.Class)+src)
	for _, f := range e.Verdict.Findings {
		row(tw, "", string(f.Class)+": "+f.Reason)
	}
	row(tw, "SM active:", pctOrDash(e.SMActive))
	// The ledger's all-attempt cost is the "Cost:" line; this one is the
	// running attempt's, beside what its GPUs actually did.
	row(tw, "Attempt cost:", microsOrDash(e.CostMicros))
	row(tw, "Effective cost:", microsOrDash(e.EffectiveCostMicros)+" (attempt cost × SM active)")
}

func pctOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100**v)
}

func microsOrDash(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("$%.4f", float64(*v)/1e6)
}

func newJobsTopCmd(g *globals) *cobra.Command {
	var (
		once     bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of running jobs: efficiency, SM activity, cost and effective cost",
		Example: `  gpufleet jobs top            # refreshes every 2s; q or Ctrl-C quits
  gpufleet jobs top --once     # one table, for scripts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if once {
				return topFrame(cmd.Context(), c, out)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, quit := context.WithCancel(ctx)
			defer quit()
			if restore, ok := rawInput(); ok {
				defer restore()
				go func() { // q, Q or Ctrl-C quits; the terminal is raw
					r := bufio.NewReader(os.Stdin)
					for {
						b, err := r.ReadByte()
						if err != nil || b == 'q' || b == 'Q' || b == 3 {
							quit()
							return
						}
					}
				}()
			}
			fmt.Fprint(out, "\x1b[?25l") // hide the cursor
			defer fmt.Fprint(out, "\x1b[?25h\n")
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				var b strings.Builder
				if err := topFrame(ctx, c, &b); err != nil && ctx.Err() == nil {
					fmt.Fprintf(&b, "error: %v\n", err)
				}
				fmt.Fprint(out, "\x1b[H\x1b[2J"+strings.ReplaceAll(b.String(), "\n", "\r\n")+"\r\nq to quit")
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
			}
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one table and exit")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval")
	return cmd
}

// topFrame writes one table of the running jobs.
func topFrame(ctx context.Context, c *client.Client, w io.Writer) error {
	jobs, err := c.ListJobs(ctx, client.ListOptions{States: []string{"running"}, Limit: 50})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "gpufleet jobs top — %s — %d running\n\n", time.Now().Format(time.TimeOnly), len(jobs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row(tw, "JOB", "NAME", "GPUS", "CLASS", "SM ACTIVE", "COST", "EFFECTIVE", "IDLE SINCE")
	for _, j := range jobs {
		var v *api.JobView
		v, err := c.Job(ctx, j.ID)
		if err != nil {
			return err
		}
		cls, sm, cost, eff, idle := "unknown", "-", "-", "-", "-"
		if e := v.Efficiency; e != nil {
			cls, sm, cost, eff = string(e.Verdict.Class), pctOrDash(e.SMActive), microsOrDash(e.CostMicros), microsOrDash(e.EffectiveCostMicros)
			if e.Source == "simulated" {
				cls += "*"
			}
			if !e.Verdict.IdleSince.IsZero() {
				idle = e.Verdict.IdleSince.Local().Format(time.TimeOnly)
			}
		}
		row(tw, j.ID, dash(j.Name), gpuSummary(j), cls, sm, cost, eff, idle)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n* simulated telemetry (demo GPUs)")
	return nil
}

// rawInput puts a terminal stdin into raw mode so single keys arrive; ok is
// false when stdin is not a terminal.
func rawInput() (restore func(), ok bool) {
	fd := int(os.Stdin.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, false
	}
	raw := *old
	raw.Lflag &^= unix.ECHO | unix.ICANON | unix.ISIG
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, true
}
