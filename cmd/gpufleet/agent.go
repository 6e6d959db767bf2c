package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/agentapi/httpcp"
	"github.com/gpufleet/gpufleet/internal/api/endpoints"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/aws/imds"
	"github.com/gpufleet/gpufleet/internal/provider/static"
	"github.com/gpufleet/gpufleet/internal/server"
)

// agentConfig is everything `gpufleet agent` takes.
type agentConfig struct {
	DataDir string
	Server  string
	Token   string
	// JoinToken is a launched instance's one-time join token, exchanged
	// for Token on first contact when Token is empty (agentjoin.go);
	// InstanceID is the instance it is exchanged for.
	JoinToken  string
	InstanceID string
	// CA pins the server's certificate (or its CA) for an https server.
	CA       string
	Name     string
	Address  string
	Labels   []string
	Region   string
	Zone     string
	FakeGPUs string
	LogLevel string
	// Provider, Pool and PricePerHour are what an installer that started
	// this agent (an SSH fleet) says of it; by default the node is an
	// owned machine of provider static that the fleet places.
	Provider     string
	Pool         string
	PricePerHour float64
	// Isolation is how the node isolates jobs.
	Isolation agent.IsolationOptions
	// IMDS watches the EC2 instance metadata service for spot notices;
	// IMDSEndpoint overrides its address (tests).
	IMDS         bool
	IMDSEndpoint string
	// Data is the node's dataset cache.
	Data agent.DataConfig
	// Fence stops the node's replicas when the server has not answered
	// for 3/4 of its heartbeat timeout (agent.Config.SelfFence).
	Fence bool
}

// Validate reports every problem at once, by flag name.
func (c *agentConfig) Validate() error {
	var fe model.FieldErrors
	if c.DataDir == "" {
		fe.Add("--data-dir", "is required")
	}
	servers := endpoints.Split(c.Server)
	if len(servers) == 0 {
		fe.Add("--server", "is required: the server's URL, e.g. http://fleet.example:7777 (env GPUFLEET_SERVER), repeated or comma-separated for replicas")
	}
	for _, s := range servers {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fe.Add("--server", fmt.Sprintf("%q is not an http(s) URL", s))
		}
	}
	if c.Token == "" && c.JoinToken == "" {
		if _, err := os.Stat(filepath.Join(c.DataDir, joinedTokenFile)); err != nil {
			fe.Add("--token", "is required: create one on the server with `gpufleet tokens create NODE --kind agent` (env GPUFLEET_TOKEN); a launched instance joins with GPUFLEET_JOIN_TOKEN instead")
		}
	}
	if c.Address != "" && strings.ContainsAny(c.Address, " /") {
		fe.Add("--address", "must be a host name or IP address")
	}
	for _, l := range c.Labels {
		if k, _, ok := strings.Cut(l, "="); !ok || k == "" {
			fe.Add("--label", fmt.Sprintf("%q is not key=value", l))
		}
	}
	if c.Pool != "" && !model.ValidName(c.Pool) {
		fe.Add("--pool", fmt.Sprintf("%q is not a pool name", c.Pool))
	}
	if c.PricePerHour < 0 || c.PricePerHour != c.PricePerHour {
		fe.Add("--price-per-hour", "must not be negative")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		fe.Add("--log-level", "must be debug, info, warn or error")
	}
	return fe.Err()
}

func newAgentCmd(g *globals) *cobra.Command {
	c := &agentConfig{}
	cmd := &cobra.Command{
		Use:   "agent --server URL --token TOKEN",
		Short: "Run this machine as a node of a remote gpufleet server",
		Long: `Run the node agent: register this machine's GPUs with the server, receive the
replicas the scheduler places here, run each under its own supervisor, ship
their logs and report their exits.

The token is an agent token created on the server for this node; its subject
is the id this node registers as:

  gpufleet tokens create gpu-box-1 --kind agent --ttl 366d

Workloads keep running when the agent or the server stops; a restarted agent
(same --data-dir) re-adopts them, and reconciles with the server when it is
back. The agent's state is in DATA_DIR/agent.`,
		Example: `  GPUFLEET_TOKEN=gfa_… gpufleet agent --server http://fleet.example:7777
  gpufleet agent --server https://fleet:7777 --token "$(cat /etc/gpufleet/agent.token)" --label rack=r2
  gpufleet agent --server http://127.0.0.1:7777 --fake-gpus 4xH100 --data-dir /tmp/node-a   # a demo node
  gpufleet agent --server https://a:7777 --server https://b:7777 --server https://c:7777     # replicas: follows the leader`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.DataDir = g.dataDir
			return runAgent(cmd.Context(), c)
		},
	}
	fl := cmd.Flags()
	c.Server = os.Getenv("GPUFLEET_SERVER")
	fromEnv := true
	fl.Func("server", "the server's URL (env GPUFLEET_SERVER); repeat it or separate with commas for replicas (the agent follows the leader)", func(v string) error {
		if fromEnv {
			c.Server, fromEnv = "", false
		}
		c.Server = strings.Trim(c.Server+","+v, ",")
		return nil
	})
	fl.StringVar(&c.Token, "token", os.Getenv("GPUFLEET_TOKEN"), "this node's agent token (env GPUFLEET_TOKEN, which keeps it out of ps)")
	c.JoinToken = os.Getenv("GPUFLEET_JOIN_TOKEN")
	fl.StringVar(&c.InstanceID, "instance-id", os.Getenv("GPUFLEET_INSTANCE_ID"), "this machine's cloud instance id, which a join with GPUFLEET_JOIN_TOKEN is for (env GPUFLEET_INSTANCE_ID; with --imds read from instance metadata)")
	fl.StringVar(&c.Name, "name", "", "the node's display name (default: the host name)")
	fl.StringVar(&c.Address, "address", "", "address other nodes reach this one at, for gangs' MASTER_ADDR (default: the IP this machine reaches the server from)")
	fl.StringArrayVar(&c.Labels, "label", nil, "node label key=value (repeatable)")
	fl.StringVar(&c.Region, "region", static.Region, "region this node reports, for region policies")
	fl.StringVar(&c.Zone, "zone", "", "zone this node reports")
	fl.StringVar(&c.FakeGPUs, "fake-gpus", "", "declare demo GPUs instead of discovering them (e.g. 8xH100)")
	fl.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	addIsolationFlags(fl, &c.Isolation, "agent")
	fl.BoolVar(&c.Fence, "fence", true, "stop this node's jobs when the server has not answered for 3/4 of its --heartbeat-timeout, before it gives the node up and runs them elsewhere (at most one running attempt); --fence=false keeps them running through any outage, at the risk of a second copy")
	fl.BoolVar(&c.IMDS, "imds", false, "on EC2: watch instance metadata (IMDSv2) for spot interruption and rebalance notices and report them to the server")
	fl.StringVar(&c.IMDSEndpoint, "imds-endpoint", imds.DefaultEndpoint, "the instance metadata service's URL, for --imds")
	fl.StringVar(&c.Provider, "provider", static.Name, "the provider the node registers with (set by an SSH fleet's installer)")
	fl.StringVar(&c.Pool, "pool", "", "the NodePool the node registers in, with --price-per-hour (set by an SSH fleet's installer)")
	fl.Float64Var(&c.PricePerHour, "price-per-hour", 0, "the node's amortised price in USD per hour, with --pool")
	for _, f := range []string{"provider", "pool", "price-per-hour"} {
		_ = fl.MarkHidden(f)
	}
	fl.StringVar(&c.Data.CacheDir, "data-cache-dir", "", "folder of the node's dataset cache, which workload users must be able to pass through (default WORK_ROOT/datacache)")
	fl.Func("data-cache-size", "cap the node's dataset cache at this size (e.g. 500Gi; default 100Gi); least recently used datasets no running job reads are evicted", func(v string) error {
		b, err := model.ParseBytes(v)
		if err == nil && b <= 0 {
			err = fmt.Errorf("must be more than 0")
		}
		c.Data.CacheBytes = int64(b)
		return err
	})
	fl.StringVar(&c.CA, "ca", os.Getenv("GPUFLEET_CA"), "trust only this certificate or CA (PEM) for an https --server, e.g. the server's DATA_DIR/tls/cert.pem (env GPUFLEET_CA)")
	return cmd
}

// runAgent runs the agent until ctx ends.
func runAgent(ctx context.Context, c *agentConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log := server.NewLogger(&server.Config{LogLevel: c.LogLevel}).With("component", "agent")
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	cat, err := catalog.Load()
	if err != nil {
		return fmt.Errorf("loading catalog: %w", err)
	}
	inv, err := server.DiscoverGPUs(ctx, c.FakeGPUs, cat, log)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the gpufleet binary for supervisors: %w", err)
	}
	name := c.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	labels := map[string]string{}
	for _, l := range c.Labels {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	addr := c.Address
	if addr == "" {
		addr = outboundIP(endpoints.Split(c.Server)[0])
	}
	if addr != "" {
		labels[static.LabelAddress] = addr
	}
	var cpOpts httpcp.Options
	var serverCA []byte
	if c.CA != "" {
		if cpOpts.HTTPClient, err = pinnedClient(c.CA, 4); err != nil {
			return err
		}
		// Jobs pin what the agent pins (GPUFLEET_CA in their tree).
		if serverCA, err = os.ReadFile(c.CA); err != nil {
			return fmt.Errorf("reading --ca: %w", err)
		}
	}
	token, err := agentToken(ctx, c, cpOpts.HTTPClient, log)
	if err != nil {
		return err
	}
	iso, notes, err := agent.NewIsolation(ctx, filepath.Join(c.DataDir, "agent"), c.Isolation)
	if err != nil {
		return err
	}
	for _, n := range notes {
		if strings.HasPrefix(n, "INSECURE") || strings.HasPrefix(n, "NOT ISOLATED") {
			log.Warn(n)
		} else {
			log.Info(n)
		}
	}
	src, sim := server.TelemetrySource(ctx, inv, log)
	var notices agent.NoticeSource
	if c.IMDS {
		notices = imds.NewWatcher(imds.New(imds.Options{Endpoint: c.IMDSEndpoint}), imds.WatcherOptions{Logger: log})
	}
	ag, err := agent.New(agent.Config{
		Notices:      notices,
		Telemetry:    src,
		Dir:          filepath.Join(c.DataDir, "agent"),
		ControlPlane: httpcp.New(c.Server, token, cpOpts),
		Registration: agentapi.Registration{
			Name: name, Provider: c.Provider, Pool: c.Pool, PricePerHour: c.PricePerHour, GPUs: inv.GPUs, GPUSource: inv.Source,
			CPU: float64(runtime.NumCPU()), Memory: server.TotalMemory(), Labels: labels,
			Region: c.Region, Zone: c.Zone, CapacityType: model.Owned, AgentVersion: version,
		},
		ServerCA:          serverCA,
		Isolation:         iso,
		Data:              c.Data,
		SelfFence:         c.Fence,
		SupervisorCommand: []string{exe, "supervise", "--dir"},
		Clock:             clock.Real{},
		Logger:            log,
		PollInterval:      200 * time.Millisecond,
		MaxRetryBackoff:   5 * time.Second, // reconnect soon after a server restart
	})
	if err != nil {
		return err
	}
	if sim != nil {
		sim.Busy = ag.BusyGPU
	}
	log.Info("agent starting", "server", c.Server, "gpus", len(inv.GPUs), "gpu_source", inv.Source, "address", addr, "data_dir", c.DataDir)
	return ag.Run(ctx)
}

// outboundIP is the local address this machine reaches server from: the
// address other nodes most likely reach it at. Empty when unknown. No packet
// is sent: connecting a UDP socket only picks the route.
func outboundIP(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	conn, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return ""
	}
	defer conn.Close()
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		return a.IP.String()
	}
	return ""
}
