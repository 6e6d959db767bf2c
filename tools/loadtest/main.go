// Command loadtest drives the real gpufleet binary end to end and reports
// what it measured (issue 15, item 6).
//
// It builds the binary to a temporary path (or takes --binary), starts it on
// a temporary data dir and a loopback port, and then, with --nodes N > 0:
//
//  1. creates N agent tokens through the API as the server's admin;
//  2. runs N virtual agents in this process that speak the real HTTP agent
//     protocol (internal/agentapi/httpcp): each registers with its own
//     address label, 8 GPUs, CPU and memory, long-polls its desired set,
//     reports replicas running and, after --job-duration, exited, ships
//     their output and sends GPU telemetry;
//  3. submits --jobs jobs through POST /v1/jobs from --clients goroutines,
//     each with its own Idempotency-Key;
//  4. waits until every job is placed and then succeeded (the server's
//     jobs-by-state gauge), bounded by --timeout.
//
// With --nodes 0 it starts `gpufleet up` with its local agent instead and
// submits `gpus: 0` jobs that the agent really runs: the burst case. With
// --submit-only it runs no node at all and stops once every submission is
// acknowledged and counted queued: durable submissions through HTTP alone,
// on SQLite or (--store) PostgreSQL.
//
// It prints submits/s, submit latency, time from the last submit to all
// placed and to all succeeded, double runs, and the server process's peak RSS
// and CPU seconds read from /proc. All traffic is loopback; it stops by
// itself.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Config is one load run; the zero value of a field means its default.
type Config struct {
	// Binary is a built gpufleet; empty: build ./cmd/gpufleet to a
	// temporary path.
	Binary string
	// Nodes is how many virtual agents run; 0 uses the local agent of
	// `gpufleet up` and gpus: 0 jobs.
	Nodes int
	// Jobs is how many jobs are submitted, by Clients goroutines.
	Jobs, Clients int
	// GPUsPerNode, NodeCPU and NodeMemoryGi shape each virtual node;
	// JobGPUs, JobCPU and JobMemoryGi each job (virtual nodes only; the
	// local agent's jobs ask for no GPU).
	GPUsPerNode  int
	NodeCPU      float64
	NodeMemoryGi int
	JobGPUs      int
	JobCPU       float64
	JobMemoryGi  int
	// JobDuration is how long a virtual agent runs each replica before it
	// reports it exited.
	JobDuration time.Duration
	// TelemetryInterval is how often a virtual agent samples its GPUs.
	TelemetryInterval time.Duration
	// Timeout bounds the whole run, start-up included.
	Timeout time.Duration
	// KeepDir keeps the temporary data dir (and the server's log) for a
	// look afterwards.
	KeepDir bool
	// SubmitOnly measures submission alone, the shape of the API's
	// BenchmarkSubmitHTTP through the real binary: `server
	// --no-local-agent` and no node, so every job stays queued; the run
	// ends once the server counts them all. Nodes is ignored.
	SubmitOnly bool
	// Store is a postgres:// DSN the server keeps its state in (a fresh
	// database: the run counts every job in it); empty: SQLite in the
	// data dir.
	Store string
	// StorePID is the PID of the database server's parent process (a
	// PostgreSQL postmaster): its CPU and its children's, backends that
	// exited included, is read with the server's; 0: not read.
	StorePID int
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.GPUsPerNode <= 0 {
		c.GPUsPerNode = 8
	}
	if c.NodeCPU <= 0 {
		c.NodeCPU = 64
	}
	if c.NodeMemoryGi <= 0 {
		c.NodeMemoryGi = 512
	}
	if c.JobGPUs <= 0 {
		c.JobGPUs = 1
	}
	if c.JobCPU <= 0 {
		c.JobCPU = 8
	}
	if c.JobMemoryGi <= 0 {
		c.JobMemoryGi = 64
	}
	if c.JobDuration <= 0 {
		c.JobDuration = 2 * time.Second
	}
	if c.TelemetryInterval <= 0 {
		c.TelemetryInterval = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// validate reports every problem at once, by flag name.
func (c *Config) validate() error {
	var errs []error
	if c.Nodes < 0 || c.Nodes > 20000 {
		errs = append(errs, errors.New("--nodes: must be 0–20000"))
	}
	if c.Jobs < 1 || c.Jobs > 200000 {
		errs = append(errs, errors.New("--jobs: must be 1–200000"))
	}
	if c.Clients > 1024 {
		errs = append(errs, errors.New("--clients: must be at most 1024"))
	}
	if c.GPUsPerNode > 64 {
		errs = append(errs, errors.New("--gpus-per-node: must be at most 64"))
	}
	return errors.Join(errs...)
}

func main() {
	var (
		c      = Config{Log: os.Stderr}
		output string
	)
	flag.StringVar(&c.Binary, "binary", "", "gpufleet binary to run (default: build ./cmd/gpufleet to a temporary path)")
	flag.IntVar(&c.Nodes, "nodes", 1000, "virtual agents speaking the HTTP agent protocol; 0: the local agent of `gpufleet up` runs gpus: 0 jobs")
	flag.IntVar(&c.Jobs, "jobs", 10000, "jobs to submit")
	flag.IntVar(&c.Clients, "clients", 64, "concurrent submitting clients")
	flag.IntVar(&c.GPUsPerNode, "gpus-per-node", 8, "GPUs (H100 80Gi) of each virtual node")
	flag.Float64Var(&c.NodeCPU, "node-cpu", 64, "CPUs of each virtual node")
	flag.IntVar(&c.NodeMemoryGi, "node-memory-gi", 512, "memory of each virtual node, GiB")
	flag.IntVar(&c.JobGPUs, "job-gpus", 1, "GPUs each job asks for (virtual nodes; the local agent's jobs ask for 0)")
	flag.Float64Var(&c.JobCPU, "job-cpu", 8, "CPUs each job asks for (virtual nodes)")
	flag.IntVar(&c.JobMemoryGi, "job-memory-gi", 64, "memory each job asks for, GiB (virtual nodes)")
	flag.DurationVar(&c.JobDuration, "job-duration", 2*time.Second, "how long a virtual agent runs each replica")
	flag.DurationVar(&c.TelemetryInterval, "telemetry-interval", 5*time.Second, "GPU sample interval of each virtual agent")
	flag.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	flag.BoolVar(&c.KeepDir, "keep", false, "keep the temporary data dir and server log")
	flag.StringVar(&output, "o", "table", "output: table or json")
	flag.BoolVar(&c.SubmitOnly, "submit-only", false, "measure submission alone: no node, every job stays queued (the shape of the API's BenchmarkSubmitHTTP); --nodes is ignored")
	flag.StringVar(&c.Store, "store", os.Getenv("GPUFLEET_LOADTEST_STORE"), "a postgres:// DSN of an empty database for the server's state (env GPUFLEET_LOADTEST_STORE, which keeps the password out of ps); default: SQLite in the data dir")
	flag.IntVar(&c.StorePID, "store-pid", 0, "PID of the database server (the postmaster, see postmaster.pid) whose CPU, children's included, is read with the server's")
	flag.Parse()
	if output != "table" && output != "json" {
		fmt.Fprintln(os.Stderr, "loadtest: -o: must be table or json")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := Run(ctx, c)
	if res != nil {
		if output == "json" {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(res)
		} else {
			res.WriteTable(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
