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
	"golang.org/x/term"

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
		out      string
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of running jobs: efficiency, SM activity, cost and effective cost",
		Long: `A live view of the running jobs, redrawn every --interval on a terminal (q or
Ctrl-C quits). When standard output is not a terminal it writes plain tables one
after the other, without terminal escapes; --once prints one and exits, and
-o json or -o yaml print one snapshot ({"items": [...]}) and exit.`,
		Example: `  gpufleet jobs top            # refreshes every 2s; q or Ctrl-C quits
  gpufleet jobs top --once     # one table, for scripts
  gpufleet jobs top -o json    # one snapshot as JSON`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if once || out != "table" {
				rows, err := topRows(cmd.Context(), c)
				if err != nil {
					return err
				}
				return render(w, out, items(rows), func(tw *tabwriter.Writer) { topTable(tw, rows) })
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, quit := context.WithCancel(ctx)
			defer quit()
			tty := isTerminal(w)
			if restore, ok := rawInput(); ok && tty {
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
			if tty {
				fmt.Fprint(w, "\x1b[?25l") // hide the cursor
				defer fmt.Fprint(w, "\x1b[?25h\n")
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				var b strings.Builder
				if err := topFrame(ctx, c, &b); err != nil && ctx.Err() == nil {
					fmt.Fprintf(&b, "error: %v\n", err)
				}
				if tty {
					fmt.Fprint(w, "\x1b[H\x1b[2J"+strings.ReplaceAll(b.String(), "\n", "\r\n")+"\r\nq to quit")
				} else {
					fmt.Fprintln(w, b.String())
				}
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
	outputFlag(cmd, &out)
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// topRow is one running job in `jobs top`.
type topRow struct {
	Job                 string     `json:"job"`
	Name                string     `json:"name,omitempty"`
	GPUs                string     `json:"gpus"`
	Class               string     `json:"class"`
	SMActive            *float64   `json:"smActive,omitempty"`
	CostMicros          *int64     `json:"costMicros,omitempty"`
	EffectiveCostMicros *int64     `json:"effectiveCostMicros,omitempty"`
	IdleSince           *time.Time `json:"idleSince,omitempty"`
	Simulated           bool       `json:"simulated,omitempty"`
}

// topRows reads the running jobs with their efficiency in one request.
func topRows(ctx context.Context, c *client.Client) ([]topRow, error) {
	list, err := c.JobSummaries(ctx, client.ListOptions{States: []string{"running"}, Limit: 50})
	if err != nil {
		return nil, err
	}
	rows := make([]topRow, 0, len(list.Jobs))
	for _, j := range list.Jobs {
		r := topRow{Job: j.ID, Name: j.Name, GPUs: gpuSummary(j), Class: "unknown"}
		if e := list.Summaries[j.ID].Efficiency; e != nil {
			r.Class, r.SMActive, r.CostMicros, r.EffectiveCostMicros = string(e.Verdict.Class), e.SMActive, e.CostMicros, e.EffectiveCostMicros
			r.Simulated = e.Source == "simulated"
			if !e.Verdict.IdleSince.IsZero() {
				t := e.Verdict.IdleSince
				r.IdleSince = &t
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func topTable(tw *tabwriter.Writer, rows []topRow) {
	row(tw, "JOB", "NAME", "GPUS", "CLASS", "SM ACTIVE", "COST", "EFFECTIVE", "IDLE SINCE")
	sim := false
	for _, r := range rows {
		cls, idle := r.Class, "-"
		if r.Simulated {
			cls += "*"
			sim = true
		}
		if r.IdleSince != nil {
			idle = r.IdleSince.Local().Format(time.TimeOnly)
		}
		row(tw, r.Job, dash(r.Name), r.GPUs, cls, pctOrDash(r.SMActive), microsOrDash(r.CostMicros), microsOrDash(r.EffectiveCostMicros), idle)
	}
	if sim {
		row(tw, "")
		row(tw, "* simulated telemetry (demo GPUs)")
	}
}

// topFrame writes one table of the running jobs with a heading.
func topFrame(ctx context.Context, c *client.Client, w io.Writer) error {
	rows, err := topRows(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "gpufleet jobs top — %s — %d running\n\n", time.Now().Format(time.TimeOnly), len(rows))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	topTable(tw, rows)
	return tw.Flush()
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
