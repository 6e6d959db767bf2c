package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/simulate"
	"github.com/gpufleet/gpufleet/internal/trace"
)

func newSimulateCmd() *cobra.Command {
	var (
		fleet, compare, traceName, from, to, speed, out, scenario, plots, html string
		varies                                                                 []string
		seed                                                                   int64
		tick, horizon                                                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a job trace through the real controller on simulated clouds and report wait, utilisation and cost",
		Long: `Replay a job trace on a fleet without running anything: the real controller
and scheduler run on a fake clock advanced from event to event, the fleet's
sim pools scale on simulated clouds from the built-in catalog (spot
interruptions at the catalog's rates), virtual agents register each node and
run each job for its trace runtime. Prints jobs, completed, queue wait
and JCT (mean, p50, p95, p99), missed deadlines, GPU utilisation, cost by
capacity type (from the ledger), interruptions, preemptions, lost work, and
the purchase-mix recommendation computed on the simulated ledger with its
saving against running that use all on demand.

--trace is a built-in subset (` + strings.Join(trace.Names(), ", ") + `; see docs/simulate.md for their
windows and provenance) or a JSONL file in gpufleet's trace format. --from
and --to cut the trace to submissions in [from, to), offsets from its start
("6h", "1d"). --compare runs a second fleet on the same trace and seed and
prints both side by side. --vary pools.NAME.FIELD=V1,V2,... runs one variant
per value (FIELD: spot, the share of the pool's max that may be spot; max;
min; idleTimeout); several --vary flags run every combination. --plots DIR
writes cost over time by capacity type, queue length, utilisation and the
wait CDF as SVG and PNG; --html FILE one self-contained page with the table
and the plots. Every NodePool must use provider sim (bought from the simulated
clouds) or static (owned machines, running from the start; charged at their
pricePerHour under "owned"). The report's "peak at once" and "launches refused"
say when the simulated clouds' quotas or capacity held a fleet below its max;
--scenario raises them. The same seed gives the same report (see its digest).`,
		Example: `  gpufleet simulate -f examples/simulate/spot --trace philly --from 40d --to 41d
  gpufleet simulate -f examples/simulate/philly-cluster --trace philly
  gpufleet simulate -f examples/simulate/philly --scenario examples/simulate/scenarios/philly-aws.yaml --trace philly
  gpufleet simulate -f examples/simulate/ondemand --vary pools.v100.spot=0,0.5,1 --trace philly --to 7d --html report.html
  gpufleet simulate -f fleets/ondemand --compare fleets/spot --trace philly --to 12h --seed 3 --plots plots/
  gpufleet simulate -f fleet/ --trace history.jsonl -o csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "table" && out != "json" && out != "csv" {
				return fmt.Errorf("--output %q: want table, json or csv", out)
			}
			var vs []simulate.Vary
			for _, v := range varies {
				pv, err := simulate.ParseVary(v)
				if err != nil {
					return err
				}
				vs = append(vs, pv)
			}
			if speed != "max" {
				return fmt.Errorf("--speed %q: only max is supported (the clock jumps from event to event)", speed)
			}
			if fleet == "" {
				return fmt.Errorf("give the fleet's manifests with -f FLEET_DIR")
			}
			if traceName == "" {
				return fmt.Errorf("give the trace with --trace %s or --trace FILE.jsonl", strings.Join(trace.Names(), "|"))
			}
			tr, err := loadTrace(traceName)
			if err != nil {
				return err
			}
			var lo, hi model.Duration
			if from != "" {
				if lo, err = model.ParseDuration(from); err != nil {
					return fmt.Errorf("--from: %w", err)
				}
			}
			if to != "" {
				if hi, err = model.ParseDuration(to); err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				if hi <= lo {
					return fmt.Errorf("--to %s is not after --from %s", to, from)
				}
			}
			tr = tr.Window(time.Duration(lo), time.Duration(hi))
			if len(tr.Jobs) == 0 {
				return fmt.Errorf("the trace has no jobs submitted between --from and --to")
			}
			var scn *sim.Scenario
			if scenario != "" {
				data, err := os.ReadFile(scenario)
				if err != nil {
					return fmt.Errorf("--scenario: %w", err)
				}
				if scn, err = sim.ParseScenario(data); err != nil {
					return fmt.Errorf("--scenario %s: %w", scenario, err)
				}
			}
			cat, err := catalog.Load()
			if err != nil {
				return err
			}
			dirs := []string{fleet}
			if compare != "" {
				dirs = append(dirs, compare)
			}
			var runs []simulate.Named
			for _, dir := range dirs {
				set, problems, err := manifest.ParseDocuments([]string{dir}, manifest.Checks{KnownGPU: cat.KnownGPU, Pool: server.PoolChecks().CheckPool})
				if err != nil {
					return err
				}
				if len(problems) > 0 {
					return fmt.Errorf("the fleet %s is invalid:\n  %s", dir, strings.ReplaceAll(problems.Err().Error(), "; ", "\n  "))
				}
				variants, err := simulate.Variants(filepath.Base(filepath.Clean(dir)), set, vs)
				if err != nil {
					return err
				}
				for _, v := range variants {
					res, err := simulate.Run(cmd.Context(), simulate.Config{Fleet: v.Set, Trace: tr, Seed: seed, Tick: tick, Horizon: horizon, Scenario: scn, Catalog: cat})
					if err != nil {
						return fmt.Errorf("simulating %s: %w", v.Name, err)
					}
					runs = append(runs, simulate.Named{Fleet: v.Name, Result: res})
				}
			}
			if plots != "" {
				files, err := simulate.WritePlots(plots, runs)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", strings.Join(files, ", "))
			}
			if html != "" {
				f, err := os.Create(html)
				if err != nil {
					return fmt.Errorf("--html: %w", err)
				}
				err = simulate.WriteHTML(f, fmt.Sprintf("%s (%d jobs)", tr.Name, len(tr.Jobs)), runs)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("--html %s: %w", html, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", html)
			}
			switch out {
			case "json":
				return simulate.WriteJSON(cmd.OutOrStdout(), runs)
			case "csv":
				return simulate.WriteCSV(cmd.OutOrStdout(), runs)
			}
			return simulate.WriteTable(cmd.OutOrStdout(), runs)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&fleet, "file", "f", "", "the fleet's manifests (a directory or file; its NodePools must use provider sim or static)")
	f.StringVar(&compare, "compare", "", "a second fleet to run on the same trace and seed, printed side by side")
	f.StringVar(&traceName, "trace", "", "a built-in trace ("+strings.Join(trace.Names(), ", ")+") or a JSONL trace file")
	f.StringVar(&from, "from", "", "keep jobs submitted at or after this offset into the trace (e.g. 6h, 1d)")
	f.StringVar(&to, "to", "", "keep jobs submitted before this offset into the trace")
	f.StringVar(&speed, "speed", "max", "how fast simulated time runs: max (event to event)")
	f.Int64Var(&seed, "seed", 1, "seed of every random choice (capacity, boot delays, interruptions)")
	f.DurationVar(&tick, "tick", 0, "longest clock step while jobs wait or nodes idle (0: event to event)")
	f.DurationVar(&horizon, "horizon", 30*24*time.Hour, "stop this long after the last submission; jobs not ended count as unfinished")
	f.StringVar(&scenario, "scenario", "", "a sim scenario file overriding the simulated clouds' defaults (as up --sim-scenario)")
	f.StringArrayVar(&varies, "vary", nil, "pools.NAME.FIELD=V1,V2,...: one variant per value (FIELD: spot, max, min, idleTimeout); repeat for every combination")
	f.StringVar(&plots, "plots", "", "write the comparison's plots (SVG and PNG) into this folder")
	f.StringVar(&html, "html", "", "write one self-contained HTML report (table and plots) to this file")
	f.StringVarP(&out, "output", "o", "table", "table, json or csv")
	return cmd
}

// loadTrace opens a built-in trace by name or reads a JSONL file.
func loadTrace(name string) (*trace.Trace, error) {
	for _, b := range trace.Names() {
		if name == b {
			return trace.Builtin(name)
		}
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w (built-in traces: %s)", err, strings.Join(trace.Names(), ", "))
	}
	defer f.Close()
	return trace.Read(f, name)
}
