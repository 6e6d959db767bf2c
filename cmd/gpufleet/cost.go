package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/cost/purchase"
	"github.com/gpufleet/gpufleet/internal/model"
)

func newCostCmd(g *globals) *cobra.Command {
	var (
		out, window, step, idle, tz string
		by                          []string
		includeIdle                 bool
	)
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "Show what was spent, grouped by project, queue, tag and more",
		Long: `Show metered cost over a window ending now, from the ledger's rollups.

Rows group by any of: kind, project, user, queue, capacityType, priceSource,
gpuModel, provider, region, pool, and tag:KEY (a job tag such as tag:team).
Idle cost (GPUs paid for that no job held) is left out unless --include-idle
shows it as its own rows ("__idle__"), or --idle shared spreads each node's
idle cost over the jobs that ran on it.`,
		Example: `  gpufleet cost
  gpufleet cost --window 30d --by project,tag:team --include-idle
  gpufleet cost --window 7d --by queue --step 1d -o csv > spend.csv
  gpufleet cost --window 7d --step 1d --tz America/New_York
  gpufleet cost --by project --idle shared -o json
  gpufleet cost forecast --days 14
  gpufleet cost purchase --lookback 60d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "csv" {
				if err := checkOutput(out); err != nil {
					return fmt.Errorf("%w (or csv)", err)
				}
			}
			mode, err := idleMode(idle, includeIdle, cmd.Flags().Changed("idle"))
			if err != nil {
				return err
			}
			loc, err := time.LoadLocation(tz)
			if err != nil {
				return fmt.Errorf("--tz %q: not a time zone; use an IANA name such as UTC, Europe/Berlin or America/New_York", tz)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q := client.CostQuery{Window: window, By: by, Step: step, TZ: tz, Idle: mode}
			if out == "csv" {
				return c.CostCSV(cmd.Context(), q, cmd.OutOrStdout())
			}
			rep, err := c.Cost(cmd.Context(), q)
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, rep, func(tw *tabwriter.Writer) { costTable(tw, rep, step != "", loc) })
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "table", "output format: table, json, yaml, csv or jsonpath=TEMPLATE")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml", "csv"}, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.Flags().StringVar(&window, "window", "30d", "how far back from now (e.g. 30d, 12h)")
	cmd.Flags().StringSliceVar(&by, "by", nil, "group by these fields, comma-separated (kind, project, user, queue, capacityType, priceSource, gpuModel, provider, region, pool, tag:KEY)")
	cmd.Flags().StringVar(&step, "step", "", "one row per group per step (whole hours, e.g. 1d, 6h); default one row per group. Whole days start at midnight in --tz")
	cmd.Flags().StringVar(&tz, "tz", "UTC", "time zone of day steps and of the START column (IANA name, e.g. Europe/Berlin)")
	cmd.Flags().BoolVar(&includeIdle, "include-idle", false, `show idle cost as its own rows ("__idle__"); same as --idle shown`)
	cmd.Flags().StringVar(&idle, "idle", "", "idle cost: shown (own rows), shared (spread over each node's jobs) or hidden (default hidden)")
	_ = cmd.RegisterFlagCompletionFunc("idle", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"shown", "shared", "hidden"}, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.AddCommand(newCostForecastCmd(g), newCostPurchaseCmd(g))
	return cmd
}

// idleMode resolves --idle and --include-idle: hidden by default.
func idleMode(idle string, include, idleSet bool) (string, error) {
	switch {
	case idleSet && include && idle != string(cost.IdleShown):
		return "", fmt.Errorf("--include-idle shows idle as its own rows; it contradicts --idle %s", idle)
	case include:
		return string(cost.IdleShown), nil
	case !idleSet:
		return string(cost.IdleHidden), nil
	}
	switch cost.IdleMode(idle) {
	case cost.IdleShown, cost.IdleShared, cost.IdleHidden:
		return idle, nil
	}
	return "", fmt.Errorf("--idle %q: want shown, shared or hidden", idle)
}

func costTable(tw *tabwriter.Writer, rep *api.CostReport, steps bool, loc *time.Location) {
	head := []any{}
	if steps {
		head = append(head, "START")
	}
	for _, f := range rep.GroupBy {
		head = append(head, strings.ToUpper(f))
	}
	head = append(head, "COST", "EFFECTIVE", "GPU-HOURS")
	row(tw, head...)
	for _, r := range rep.Rows {
		cells := []any{}
		if steps {
			cells = append(cells, r.Start.In(loc).Format("2006-01-02 15:04"))
		}
		for _, f := range rep.GroupBy {
			cells = append(cells, dash(r.Group[f]))
		}
		eff := "-"
		if r.MeasuredCost > 0 {
			eff = dollars(r.EffectiveCost)
		}
		cells = append(cells, dollars(r.Cost), eff, strconv.FormatFloat(r.GPUHours, 'f', 1, 64))
		row(tw, cells...)
	}
	total := []any{"TOTAL"}
	for range len(head) - 4 {
		total = append(total, "")
	}
	row(tw, append(total, dollars(rep.Total))...)
}

// dollars rounds to the cent for tables (the ledger keeps micro-dollars).
func dollars(m model.Money) string {
	c := (int64(m) + 5000) / 10000
	if m < 0 {
		c = (int64(m) - 5000) / 10000
	}
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s$%d.%02d", sign, c/100, c%100)
}

func newCostForecastCmd(g *globals) *cobra.Command {
	var (
		out  string
		days int
	)
	cmd := &cobra.Command{
		Use:   "forecast",
		Short: "Forecast each budget's spend to the end of its period",
		Long: `Forecast daily spend for every budget to the end of its period (at most --days
days from today), with a 95% prediction interval and the model used: Holt-Winters
with weekly seasonality; a flat mean with a wide interval under 14 days of history;
on a scope's first day, its run rate so far with a wider one.`,
		Example: `  gpufleet cost forecast
  gpufleet cost forecast --days 30 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if days < 0 || days > 366 {
				return fmt.Errorf("--days %d: want 0–366", days)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			bs, err := c.CostForecast(cmd.Context(), days)
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), out, items(bs), func(tw *tabwriter.Writer) {
				if len(bs) == 0 {
					row(tw, "No budgets: declare one with `gpufleet apply` (kind: Budget).")
					return
				}
				row(tw, "BUDGET", "AMOUNT", "SPENT", "FORECAST", "PERIOD END", "METHOD")
				for _, b := range bs {
					row(tw, b.Budget.Name, dollars(b.Budget.Amount), dollars(b.Actual), dollars(b.Forecast), b.PeriodEnd.Format(time.DateOnly), dash(b.Method))
				}
				for _, b := range bs {
					row(tw, "")
					row(tw, "DAY ("+b.Budget.Name+")", "MEAN", "LOW", "HIGH")
					for _, d := range b.Daily {
						row(tw, d.Day.Format(time.DateOnly), dollars(d.Mean), dollars(d.Lower), dollars(d.Upper))
					}
				}
			})
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().IntVar(&days, "days", 0, "at most this many days from today (0: to each budget's period end)")
	return cmd
}

func newCostPurchaseCmd(g *globals) *cobra.Command {
	var out, lookback string
	cmd := &cobra.Command{
		Use:   "purchase",
		Short: "Recommend committed (reserved) GPUs per model from recent usage",
		Long: `Recommend how many GPUs of each model to commit to, from hourly usage over the
lookback: the level that minimises cost at the commitment discount, with its
utilisation, coverage, savings and the share of the rest that could run on spot.`,
		Example: `  gpufleet cost purchase
  gpufleet cost purchase --lookback 60d -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			days, err := strconv.Atoi(strings.TrimSuffix(lookback, "d"))
			if err != nil || days != 7 && days != 30 && days != 60 {
				return fmt.Errorf("--lookback %q: want 7d, 30d or 60d", lookback)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			l, err := c.CostPurchase(cmd.Context(), days)
			if err != nil {
				return err
			}
			// A list like the others ({"items": [...]}), with the
			// lookback it was computed over.
			doc := struct {
				LookbackDays int                       `json:"lookbackDays"`
				Items        []purchase.Recommendation `json:"items"`
			}{l.LookbackDays, items(l.Recommendations).Items}
			return render(cmd.OutOrStdout(), out, doc, func(tw *tabwriter.Writer) {
				if len(l.Recommendations) == 0 {
					row(tw, fmt.Sprintf("No GPU usage in the last %d days.", l.LookbackDays))
					return
				}
				row(tw, "GPU", "COMMIT", "UTILISATION", "COVERAGE", "ON-DEMAND", "MIXED", "SAVINGS", "BREAK-EVEN", "SPOT SHARE", "NOTE")
				for _, r := range l.Recommendations {
					be := "-"
					switch {
					case r.BreakEvenMonths < 0:
						be = "never"
					case r.BreakEvenMonths > 0:
						be = fmt.Sprintf("%.1f mo", r.BreakEvenMonths)
					}
					row(tw, r.GPUModel, r.Commit, pct(r.Utilisation), pct(r.Coverage), usd(r.OnDemandCost), usd(r.MixedCost),
						fmt.Sprintf("%.1f%%", r.SavingsPercent), be, pct(r.SpotShare), dash(r.Reason))
				}
			})
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().StringVar(&lookback, "lookback", "30d", "usage history to size the commitment on: 7d, 30d or 60d")
	return cmd
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func usd(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("$%.2f", f)
}

func newBudgetsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "budgets",
		Aliases: []string{"budget"},
		Short:   "Show budgets: spend, forecast and fired thresholds this period",
		Long: `Budgets are declared as fleet documents (kind: Budget) with 'gpufleet apply';
these commands show their state.`,
		Example: `  gpufleet budgets list
  gpufleet budgets get nlp-monthly -o yaml`,
	}
	cmd.AddCommand(newBudgetsListCmd(g), newBudgetsGetCmd(g))
	return cmd
}

func newBudgetsListCmd(g *globals) *cobra.Command {
	return listCommand(g, &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List budgets with their spend this period",
		Example: `  gpufleet budgets list
  gpufleet budgets list -o json`,
		Args: cobra.NoArgs,
	}, func(ctx context.Context, c *client.Client, _ []string) ([]model.BudgetStatus, error) {
		return c.Budgets(ctx)
	}, func(tw *tabwriter.Writer, bs []model.BudgetStatus) {
		row(tw, "NAME", "SCOPE", "AMOUNT", "SPENT", "USED", "FORECAST", "PERIOD", "FIRED", "BLOCKED")
		for _, b := range bs {
			row(tw, b.Budget.Name, dash(b.Budget.Scope.String()), dollars(b.Budget.Amount), dollars(b.Actual), pct(b.Ratio),
				dollars(b.Forecast), b.PeriodStart.Format(time.DateOnly)+"…"+b.PeriodEnd.Format(time.DateOnly), firedList(b), yesNo(b.Blocked))
		}
	})
}

func newBudgetsGetCmd(g *globals) *cobra.Command {
	return readCommand(g, &cobra.Command{
		Use:   "get NAME",
		Short: "Show one budget, its thresholds and its daily forecast",
		Example: `  gpufleet budgets get nlp-monthly
  gpufleet budgets get nlp-monthly -o json`,
		Args: cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, args []string) (*model.BudgetStatus, error) {
		return c.Budget(ctx, args[0])
	}, budgetTable)
}

func budgetTable(tw *tabwriter.Writer, b *model.BudgetStatus) {
	row(tw, "Name:", b.Budget.Name)
	row(tw, "Scope:", dash(b.Budget.Scope.String()))
	row(tw, "Amount:", dollars(b.Budget.Amount)+" per "+string(b.Budget.Period.Kind)+" period"+map[bool]string{true: " (hard)"}[b.Budget.Hard])
	row(tw, "Period:", b.PeriodStart.Format(time.DateOnly)+" to "+b.PeriodEnd.Format(time.DateOnly))
	row(tw, "Spent:", fmt.Sprintf("%s (%s)", dollars(b.Actual), pct(b.Ratio)))
	row(tw, "Forecast:", dollars(b.Forecast)+" by the period end"+map[bool]string{true: " (" + b.Method + ")"}[b.Method != ""])
	if b.Note != "" {
		row(tw, "Note:", b.Note)
	}
	row(tw, "Blocked:", yesNo(b.Blocked))
	if b.Webhook != "" {
		row(tw, "Webhook:", b.Webhook)
	}
	if len(b.Budget.Thresholds) > 0 {
		row(tw, "")
		row(tw, "THRESHOLD", "ACTION", "BASIS", "FIRED")
		for i, t := range b.Budget.Thresholds {
			basis := string(t.Basis)
			if basis == "" {
				basis = "actual"
			}
			row(tw, fmt.Sprintf("%g%%", t.Percent), t.Action, basis, yesNo(slices.Contains(b.Fired, i)))
		}
	}
	if len(b.Daily) > 0 {
		row(tw, "")
		row(tw, "DAY", "MEAN", "LOW", "HIGH")
		for _, d := range b.Daily {
			row(tw, d.Day.Format(time.DateOnly), dollars(d.Mean), dollars(d.Lower), dollars(d.Upper))
		}
	}
}

func firedList(b model.BudgetStatus) string {
	var s []string
	for _, i := range b.Fired {
		if i < len(b.Budget.Thresholds) {
			s = append(s, fmt.Sprintf("%g%%", b.Budget.Thresholds[i].Percent))
		}
	}
	return dash(strings.Join(s, ","))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newMetricCmd() *cobra.Command {
	var step int64
	cmd := &cobra.Command{
		Use:   "metric --step N NAME=VALUE...",
		Short: "Report a training step's metrics from inside a job",
		Long: `Report metrics for the job this command runs in, so that its early-stop policy
(spec.earlyStop) can act on them. It reads GPUFLEET_SERVER, GPUFLEET_JOB_ID and
GPUFLEET_JOB_TOKEN, which gpufleet sets in every job's environment, and pins
GPUFLEET_CA, which it sets when the server is https. It prints
nothing unless the policy triggers; in stop mode the job then gets its
checkpoint signal.`,
		Example: `  # in a job's script
  gpufleet metric --step "$step" loss=0.731 accuracy=0.82`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("step") {
				return errors.New("--step is required: the training step these values belong to")
			}
			server, job, token := os.Getenv("GPUFLEET_SERVER"), os.Getenv("GPUFLEET_JOB_ID"), os.Getenv("GPUFLEET_JOB_TOKEN")
			if server == "" || job == "" || token == "" {
				return errors.New("gpufleet metric runs inside a gpufleet job: GPUFLEET_SERVER, GPUFLEET_JOB_ID and GPUFLEET_JOB_TOKEN must be set (gpufleet sets them for every job)")
			}
			values := make(map[string]float64, len(args))
			var bad []string
			for _, a := range args {
				k, v, ok := strings.Cut(a, "=")
				f, err := strconv.ParseFloat(v, 64)
				if !ok || k == "" || err != nil {
					bad = append(bad, fmt.Sprintf("%q: want NAME=NUMBER", a))
					continue
				}
				values[k] = f
			}
			if len(bad) > 0 {
				return errors.New(strings.Join(bad, "; "))
			}
			hc, err := httpClientFor(server, "") // pins GPUFLEET_CA, which jobs get when the server is https
			if err != nil {
				return err
			}
			v, err := client.New(server, token, hc).ReportMetrics(cmd.Context(), job, api.MetricReport{Step: step, Values: values})
			if err != nil {
				return err
			}
			if v.Triggered {
				what := "early stop (alert)"
				if v.Stop {
					what = "early stop: the job is being stopped"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "gpufleet: %s: %s\n", what, v.Reason)
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&step, "step", 0, "training step (repeating a step replaces its values)")
	return cmd
}
