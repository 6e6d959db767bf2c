package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/server"
)

func addServerFlags(cmd *cobra.Command, c *server.Config) {
	fl := cmd.Flags()
	listen := os.Getenv("GPUFLEET_LISTEN")
	if listen == "" {
		listen = "127.0.0.1:7777"
	}
	fl.StringVar(&c.Listen, "listen", listen, "address the API listens on (env GPUFLEET_LISTEN)")
	fl.StringVar(&c.FakeGPUs, "fake-gpus", "", "declare demo GPUs on this machine instead of discovering them (e.g. 8xH100)")
	fl.BoolVar(&c.NoAgent, "no-local-agent", false, "do not run jobs on this machine (control plane only)")
	fl.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fl.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", 60*time.Second, "how long a node may be silent before it is lost and its jobs requeue")
	fl.StringVar(&c.AlertWebhookURL, "alert-webhook-url", "", "POST alerts (idle jobs, XID errors, queue wait) as signed JSON to this URL (default --webhook-url; signed with --webhook-secret)")
	fl.StringVar(&c.PricesFile, "prices", "", "custom price CSV for owned and privately priced machines (columns: match,value,price_per_hour,purchase_price,amortize_months,opex_per_hour; see docs/cost.md)")
	fl.DurationVar(&c.MeterInterval, "meter-interval", time.Minute, "time between metering passes: how soon a finished job's cost shows")
	fl.StringVar(&c.WebhookURL, "webhook-url", "", "POST budget threshold firings (budgets without spec.webhook) and alerts as signed JSON to this URL")
	fl.StringVar(&c.WebhookSecret, "webhook-secret", os.Getenv("GPUFLEET_WEBHOOK_SECRET"), "key webhooks are signed with (HMAC-SHA256, header X-Gpufleet-Signature); prefer env GPUFLEET_WEBHOOK_SECRET, which keeps it out of the process list")
	fl.BoolVar(&c.TLS, "tls", false, "serve HTTPS with a self-signed certificate for 127.0.0.1, ::1 and localhost, made in the data dir's tls/ (local clients pin it)")
	fl.StringVar(&c.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fl.StringVar(&c.TLSKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fl.StringVar(&c.AgentURL, "agent-url", os.Getenv("GPUFLEET_AGENT_URL"), "URL the agents gpufleet installs on SSH fleets' hosts reach this server at (default: the --listen URL; env GPUFLEET_AGENT_URL)")
	fl.StringVar(&c.GitOps.Repo, "gitops-repo", "", "follow this git repository declaring the fleet (https://, ssh://, file:// or a path; docs/gitops.md)")
	fl.StringVar(&c.GitOps.Branch, "gitops-branch", "main", "the branch --gitops-repo follows")
	fl.StringVar(&c.GitOps.Path, "gitops-path", "", "the directory of --gitops-repo holding the fleet documents (*.yaml, *.yml, *.json; default the root)")
	fl.DurationVar(&c.GitOps.Interval, "gitops-interval", time.Minute, "time between polls of --gitops-repo")
	fl.BoolVar(&c.GitOps.AutoApply, "gitops-auto-apply", false, "apply each new commit of --gitops-repo (default: plan only; see gpufleet plan --pending)")
	fl.StringVar(&c.GitOps.CredentialsRef, "gitops-credentials", "", "sealed secret PROJECT/NAME holding the HTTPS credentials of --gitops-repo (USER:TOKEN or a token)")
	addIsolationFlags(fl, &c.Isolation, "server")
	fl.BoolVar(&c.Sim.Enabled, "sim", false, "buy nodes from simulated clouds (the embedded catalog); each runs jobs here as an in-process agent with fake GPUs, and this machine takes no jobs itself")
	fl.StringVar(&c.Sim.Scenario, "sim-scenario", "", "scenario file (YAML) overriding the simulated clouds' capacity, boot delays, interruptions and failures")
	fl.Float64Var(&c.Sim.TimeScale, "time-scale", 0, "divide simulated boot delays and notice leads by this (60: a 2-minute boot takes 2 s)")
	fl.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "longest a shutdown takes: it stops launching at once, stops --sim workloads, and exits when this passes even if parts are still stopping")
	// No default from the environment here: --help prints defaults, and
	// a DSN holds a password. withStoreEnv reads GPUFLEET_STORE instead.
	fl.StringVar(&c.Store, "store", "", "where state lives: sqlite (the data dir's database, the default) or a postgres://user:password@host/db URL; prefer env "+server.StoreEnv+", which keeps the password out of the process list (docs/postgres.md)")
	fl.BoolVar(&c.AcceptLostWrites, "accept-lost-writes", false, "start even when the database lacks acknowledged commits (a damaged WAL, an older copy restored; see `gpufleet store check`), logging what was lost")
	fl.StringVar(&c.ReplicaID, "replica-id", "", "this server's name in the leader election among replicas sharing a PostgreSQL --store (default HOSTNAME-PID; README \"High availability\")")
	fl.IntVar(&c.MaxInflightWrites, "max-inflight-writes", api.DefaultMaxInflightWrites, "users' writes (submissions, cancels, applies…) served at once; more are answered 503 with Retry-After, which the CLI waits out, so that agents' syncs never queue behind a flood (README \"Load shedding\"); -1: no limit")
	fl.StringVar(&c.ServicesDomain, "services-domain", "", "route host NAME.DOMAIN to service NAME (a wildcard DNS record *.DOMAIN pointing at this server or a gpufleet proxy; use a domain of its own, not the API's)")
	fl.StringVar(&c.AdvertiseURL, "advertise-url", "", "URL the other replicas redirect clients to while this one leads (default: the --listen address's URL, an unspecified host replaced by the host name)")
	fl.Func("sim-clouds", "simulate only these clouds, comma-separated (aws,gcp,azure,oci,lambda,vast; default all)", func(v string) error {
		c.Sim.Clouds = parseClouds(v)
		return nil
	})
}

func newUpCmd(g *globals) *cobra.Command {
	c := &server.Config{Banner: true, AdminTokenTTL: 90 * 24 * time.Hour}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start gpufleet on this machine: control plane, API and a local node",
		Long: `Start gpufleet on this machine in the foreground: the control plane, the API on
--listen, and an agent that runs jobs here on this machine's GPUs (found with
NVML or nvidia-smi; none on a CPU-only machine unless --fake-gpus declares demo
GPUs). On first start it creates an admin token in the data dir, where the CLI
finds it. Jobs keep running if the server stops; a restart re-adopts them.`,
		Example: `  gpufleet up
  gpufleet up --fake-gpus 8xH100 --listen 127.0.0.1:8080
  GPUFLEET_DATA_DIR=/srv/gpufleet gpufleet up`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.DataDir = g.dataDir
			c.Version = version
			withStoreEnv(c)
			return server.Run(cmd.Context(), *c)
		},
	}
	addServerFlags(cmd, c)
	return cmd
}

func newServerCmd(g *globals) *cobra.Command {
	c := &server.Config{AdminTokenTTL: 90 * 24 * time.Hour}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the gpufleet server (headless, JSON logs)",
		Long: `Run the gpufleet server as a daemon: the same control plane as 'up', with
structured JSON logs and no banner, for systemd and containers.`,
		Example: `  gpufleet server --data-dir /var/lib/gpufleet --listen 0.0.0.0:7777
  GPUFLEET_WEBHOOK_SECRET="$(cat /etc/gpufleet/webhook.key)" gpufleet server \
      --prices /etc/gpufleet/prices.csv --webhook-url https://hooks.example.com/gpufleet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.DataDir = g.dataDir
			c.LogJSON = true
			c.Version = version
			withStoreEnv(c)
			return server.Run(cmd.Context(), *c)
		},
	}
	addServerFlags(cmd, c)
	return cmd
}

// withStoreEnv fills an unset --store from GPUFLEET_STORE.
func withStoreEnv(c *server.Config) {
	if c.Store == "" {
		c.Store = os.Getenv(server.StoreEnv)
	}
}

// addIsolationFlags adds the flags of how jobs are isolated on a node.
func addIsolationFlags(fl *pflag.FlagSet, o *agent.IsolationOptions, who string) {
	fl.StringVar(&o.WorkRoot, "work-root", "", "folder for jobs' own folders and checkpoints, outside the data dir (default as root: /var/lib/gpufleet/work/<id>; else DATA_DIR/work)")
	fl.StringVar(&o.Containers, "container-runtime", "auto", "run jobs with an image in containers: auto (podman where it works), podman (required) or none")
	fl.BoolVar(&o.HostNetwork, "container-host-network", false, "give containers the host's network (needed for NCCL across nodes); by default each has its own")
	fl.Func("log-limit", "cap each job replica's output at this size (e.g. 1Gi, the default); past it the end is kept and the cut noted", func(v string) error {
		b, err := model.ParseBytes(v)
		if err == nil && b <= 0 {
			err = fmt.Errorf("must be more than 0")
		}
		o.LogLimit = b
		return err
	})
	fl.BoolVar(&o.InsecureRunAsAgentUser, "insecure-run-as-server-user", false, "run jobs as the "+who+"'s own user even as root: every job can then read its tokens, keys and database (only admins' jobs are placed on such a node)")
}

func newSuperviseCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "supervise --dir DIR",
		Short:  "Supervise one replica (started by the agent; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if code := supervisorRun(dir); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "replica directory")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// parseClouds splits --sim-clouds.
func parseClouds(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}
