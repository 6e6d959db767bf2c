package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/artifacts"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/datadir"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/aws"
	kubepools "github.com/gpufleet/gpufleet/internal/provider/kubernetes/pools"
	"github.com/gpufleet/gpufleet/internal/provider/local"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/sim/live"
	"github.com/gpufleet/gpufleet/internal/provider/static"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/server/leader"
	"github.com/gpufleet/gpufleet/internal/services"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/web"
)

// Config is everything `up` and `server` take.
type Config struct {
	DataDir string
	// Version is the binary's, which the API and the agents report.
	Version  string
	Listen   string
	FakeGPUs string
	NoAgent  bool
	LogLevel string
	LogJSON  bool
	// Banner prints the quickstart once the server is ready (`up`).
	Banner bool
	// AdminTokenTTL bounds the admin token `up` creates.
	AdminTokenTTL time.Duration
	// HeartbeatTimeout is how long a node may be silent before it is lost
	// and its jobs requeue; agents are asked to sync four times as often.
	HeartbeatTimeout time.Duration
	// AlertWebhookURL receives alerts (idle jobs, drain XIDs, queue
	// wait); empty: WebhookURL. Alerts take the budget firings' path: the
	// durable outbox, signed with WebhookSecret.
	AlertWebhookURL string
	// TLS serves HTTPS with a self-signed loopback certificate made in the
	// data dir; TLSCert and TLSKey serve a real one instead.
	TLS             bool
	TLSCert, TLSKey string
	// Sim runs simulated clouds with live in-process nodes (`up --sim`).
	Sim SimConfig
	// PricesFile is the custom price CSV for owned and privately priced
	// machines (docs/cost.md).
	PricesFile string
	// MeterInterval is the time between metering passes (1m): how soon
	// a finished job's cost is in the ledger.
	MeterInterval time.Duration
	// WebhookURL is the default receiver: firings of budgets without
	// spec.webhook, and alerts without AlertWebhookURL. WebhookSecret
	// (--webhook-secret or GPUFLEET_WEBHOOK_SECRET) signs every webhook
	// but those with their own signingKeyRef.
	WebhookURL    string
	WebhookSecret string
	// Isolation is how the local (and simulated) nodes isolate jobs.
	Isolation agent.IsolationOptions
	// Store is where the control plane's state lives: "" or "sqlite" for
	// the data dir's SQLite file, or a postgres:// URL (--store, env
	// GPUFLEET_STORE). It holds a password: log it only through
	// describeStore.
	Store string
	// AcceptLostWrites starts on a database that lost acknowledged
	// writes (sqlite.LostWritesError), logging the loss.
	AcceptLostWrites bool
	// ShutdownTimeout bounds a shutdown, from the signal to exit.
	ShutdownTimeout time.Duration
	// AgentURL is the URL agents gpufleet installs on SSH fleets' hosts
	// reach this server at; empty: the URL it listens on.
	AgentURL string
	// GitOps follows a git repository declaring the fleet (gitops.go).
	GitOps GitOpsConfig
	// ReplicaID names this replica in the leader election, which every
	// server on a PostgreSQL store takes part in (default
	// DefaultReplicaID). AdvertiseURL is where the other replicas send
	// clients while this one leads (default: the listener's URL).
	ReplicaID, AdvertiseURL string
	// ServicesDomain, when set, routes host NAME.DOMAIN to service NAME
	// (docs/services.md, "Host names").
	ServicesDomain string
	// MaxInflightWrites bounds the users' writes the API serves at once
	// (api.Config.MaxInflightWrites: 0 its default, negative no limit).
	MaxInflightWrites int
}

// stepDownBound bounds the shutdown of a leader that lost its lease.
const stepDownBound = 2 * time.Second

// minWebhookSecret is the shortest webhook signing secret accepted.
const minWebhookSecret = 16

// minHeartbeatTimeout keeps agents' syncs (a quarter of the timeout) from
// turning into a busy loop.
const minHeartbeatTimeout = 2 * time.Second

// Validate reports every problem at once, by flag name.
func (c *Config) Validate() error {
	var fe model.FieldErrors
	if c.DataDir == "" {
		fe.Add("--data-dir", "is required")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		fe.Add("--listen", fmt.Sprintf("%q is not host:port", c.Listen))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		fe.Add("--log-level", "must be debug, info, warn or error")
	}
	validateStore(&fe, c)
	if c.ShutdownTimeout < 0 {
		fe.Add("--shutdown-timeout", "must not be negative (0: the default, 30s)")
	}
	if c.Sim.TimeScale < 0 {
		fe.Add("--time-scale", "must not be negative")
	}
	if (c.Sim.Scenario != "" || c.Sim.TimeScale != 0 || len(c.Sim.Clouds) > 0) && !c.Sim.Enabled {
		fe.Add("--sim", "is required by --sim-scenario, --time-scale and --sim-clouds")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		fe.Add("--tls-cert", "and --tls-key go together")
	}
	if c.TLS && c.TLSCert != "" {
		fe.Add("--tls", "makes a self-signed certificate: leave it out with --tls-cert")
	}
	if u, err := neturl.Parse(c.AgentURL); c.AgentURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		fe.Add("--agent-url", fmt.Sprintf("%q is not an http(s) URL", c.AgentURL))
	}
	if c.MeterInterval < time.Second {
		fe.Add("--meter-interval", "must be at least 1s")
	}
	if c.HeartbeatTimeout < minHeartbeatTimeout {
		fe.Add("--heartbeat-timeout", fmt.Sprintf("must be at least %s", minHeartbeatTimeout))
	}
	for flag, v := range map[string]string{"--webhook-url": c.WebhookURL, "--alert-webhook-url": c.AlertWebhookURL} {
		if v == "" {
			continue
		}
		if u, err := neturl.Parse(v); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			fe.Add(flag, fmt.Sprintf("%q is not an http(s) URL", v))
		}
		if c.WebhookSecret == "" {
			fe.Add("--webhook-secret", fmt.Sprintf("is required with %s (or set GPUFLEET_WEBHOOK_SECRET): receivers verify the X-Gpufleet-Signature header with it", flag))
		}
	}
	if v := c.AdvertiseURL; v != "" {
		if u, err := neturl.Parse(v); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			fe.Add("--advertise-url", fmt.Sprintf("%q is not an http(s) URL", v))
		}
	}
	if d := c.ServicesDomain; d != "" {
		if err := model.CheckHost(d); err != nil || strings.HasPrefix(d, "*.") {
			fe.Add("--services-domain", fmt.Sprintf("%q must be a lower-case domain such as svc.example.com (service NAME is then NAME.svc.example.com)", d))
		}
	}
	if c.ReplicaID != "" && strings.ContainsAny(c.ReplicaID, " \t\n") {
		fe.Add("--replica-id", "must not contain spaces")
	}
	if c.WebhookSecret != "" && len(c.WebhookSecret) < minWebhookSecret {
		fe.Add("--webhook-secret", fmt.Sprintf("must be at least %d characters", minWebhookSecret))
	}
	return fe.Err()
}

// costConfig reads the price file and the webhook settings.
func (c *Config) costConfig() (controller.CostConfig, error) {
	cc := controller.CostConfig{WebhookURL: c.WebhookURL, WebhookSecret: []byte(c.WebhookSecret), MeterInterval: c.MeterInterval,
		ReportLag: c.HeartbeatTimeout}
	if c.PricesFile == "" {
		return cc, nil
	}
	f, err := os.Open(c.PricesFile)
	if err != nil {
		return cc, fmt.Errorf("--prices: %w", err)
	}
	defer f.Close()
	if cc.Prices, err = cost.ParsePrices(f); err != nil {
		return cc, fmt.Errorf("--prices %s: %w", c.PricesFile, err)
	}
	return cc, nil
}

// heartbeatInterval is how often agents are asked to sync: a quarter of the
// timeout, so a node is lost only after several missed syncs, and at most
// the controller's default.
func (c *Config) heartbeatInterval() time.Duration {
	return min(c.HeartbeatTimeout/4, 10*time.Second)
}

// shutdownTimeout is ShutdownTimeout, or the default when it is zero.
func (c *Config) shutdownTimeout() time.Duration {
	if c.ShutdownTimeout <= 0 {
		return DefaultShutdownTimeout
	}
	return c.ShutdownTimeout
}

// NewLogger logs to stderr at c.LogLevel, as JSON when c.LogJSON.
func NewLogger(c *Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Run runs the server until ctx ends or the store fails.
func Run(ctx context.Context, cfg Config) error {
	c := &cfg
	if err := c.Validate(); err != nil {
		return err
	}
	dirLock, err := datadir.Acquire(c.DataDir) // one server per data dir, for its whole life
	if err != nil {
		return err
	}
	defer dirLock.Release()
	// Every log line passes the scrubber, which the controller keeps up
	// to date with secret values and job tokens.
	redactor := &secrets.Redactor{}
	log := slog.New(secrets.NewHandler(NewLogger(c).Handler(), redactor))
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	// The data dir holds tokens, keys and the database: its owner only.
	if err := os.Chmod(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("closing data dir to others: %w", err)
	}
	keyring, keySource, err := loadKeyring(c.DataDir)
	if err != nil {
		return err
	}
	log.Info("secrets sealed", "key_source", keySource)
	steps := newPhases(log)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	cat, err := catalog.Load()
	if err != nil {
		return fmt.Errorf("loading catalog: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	commitSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gpufleet_store_commit_seconds", Help: "Store transaction latency, begin to fsync.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	commitBatches := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gpufleet_store_commit_batches", Help: "Batches grouped into one store transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 13),
	})
	reg.MustRegister(commitSeconds, commitBatches)
	st, err := openStore(ctx, c, log, func(d time.Duration, batches int) {
		commitSeconds.Observe(d.Seconds())
		commitBatches.Observe(float64(batches))
	})
	if err != nil {
		return err
	}
	defer st.Close()
	log.Info("store open", "store", describeStore(c))
	logs, err := logstore.New(filepath.Join(c.DataDir, "logs"))
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s (is another gpufleet running? pick another with --listen): %w", c.Listen, err)
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String()
	var serverCA []byte
	if certFile, keyFile := c.TLSCert, c.TLSKey; c.TLS || certFile != "" {
		if c.TLS {
			if certFile, keyFile, err = SelfSignedCert(c.DataDir); err != nil {
				return err
			}
		}
		tc, err := serverTLS(certFile, keyFile)
		if err != nil {
			return err
		}
		// Jobs on the local node pin this certificate (GPUFLEET_CA).
		if serverCA, err = os.ReadFile(certFile); err != nil {
			return fmt.Errorf("reading the TLS certificate: %w", err)
		}
		ln = tls.NewListener(ln, tc)
		url = "https://" + ln.Addr().String()
	}

	// What does not need the lease is ready before a replica campaigns,
	// so a takeover only builds the controller (detecting podman alone
	// can take seconds on a loaded machine).
	archives, err := archive.NewStore(filepath.Join(c.DataDir, "archives"))
	if err != nil {
		return err
	}
	costCfg, err := c.costConfig()
	if err != nil {
		return err
	}
	if len(costCfg.WebhookSecret) == 0 {
		key, path, err := loadWebhookSecret(c.DataDir)
		if err != nil {
			return err
		}
		costCfg.WebhookSecret = key
		log.Info("webhooks signed with the data dir's own key (give --webhook-secret to choose one)", "key_file", path)
	}
	// One isolation for every node this process runs (local and
	// simulated): they share the work root and the workload users.
	iso, isoNotes, err := agent.NewIsolation(ctx, filepath.Join(c.DataDir, "agent"), c.Isolation)
	if err != nil {
		return err
	}
	if !c.NoAgent || c.Sim.Enabled {
		for _, n := range isoNotes {
			if strings.HasPrefix(n, "INSECURE") || strings.HasPrefix(n, "NOT ISOLATED") {
				log.Warn(n)
				if c.Banner {
					fmt.Fprintln(os.Stderr, "WARNING: "+n)
				}
			} else {
				log.Info(n)
			}
		}
	}
	// With replicas (a PostgreSQL store), serve as a follower until this
	// replica leads; then fence every write with the lease.
	var (
		sw        *switchHandler
		httpSrv   *http.Server
		errc      = make(chan stopped, 10) // one per component below
		el        *leader.Elector
		lease     store.Lease
		haRunning []string
	)
	if c.replicated() {
		if c.ReplicaID == "" {
			c.ReplicaID = DefaultReplicaID()
		}
		leaser, err := openLeaser(ctx, c, log)
		if err != nil {
			return err
		}
		defer leaser.Close()
		if el, err = leader.New(leader.Config{Leaser: leaser, ID: c.ReplicaID, URL: advertiseURL(c.AdvertiseURL, url), Log: log, Registry: reg}); err != nil {
			return err
		}
		feed, ok := st.(store.Feed)
		if !ok {
			return fmt.Errorf("store %s has no change feed", describeStore(c))
		}
		fol, err := startFollowing(ctx, followConfig{feed: feed, keyring: keyring, redactor: redactor, logs: logs, cat: cat, version: c.Version, log: log})
		if err != nil {
			return err
		}
		sw = &switchHandler{}
		sw.set(followerHandler(el, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), fol.serveRoute))
		httpSrv = &http.Server{Handler: sw, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { errc <- stopped{"api", ignoreClosed(httpSrv.Serve(ln))} }()
		haRunning = []string{"api"}
		log.Info("following: serving reads from the replica's state, campaigning for the controller lease", "replica", c.ReplicaID, "url", advertiseURL(c.AdvertiseURL, url))
		if lease, err = el.Campaign(ctx); err != nil {
			fol.close()
			return errors.Join(drain(httpSrv, errc, haRunning, time.Now().Add(c.shutdownTimeout()), log), ignoreCanceled(err))
		}
		// Renewals begin at once: the lease runs from its acquisition,
		// and catching up with the feed's tail may take longer than it.
		// Losing it meanwhile stops the takeover (writes are fenced
		// anyway).
		go func() {
			err := el.Hold(ctx, lease)
			if err != nil {
				cancel(err)
			}
			errc <- stopped{"leader lease", err}
		}()
		haRunning = append(haRunning, "leader lease")
		fs := &fencedStore{backingStore: st, fence: lease.Fence()}
		began := time.Now()
		steps.restart()
		dump, tail, err := fol.takeOver(ctx, steps)
		switch {
		case err == nil:
			fs.loaded = dump
			log.Info("leading: took over from the replica's state", "replica", c.ReplicaID, "epoch", lease.Epoch,
				"seq", fol.f.Mirror().Seq(), "tail_changes", tail, "took", time.Since(began).Round(time.Millisecond).String())
		case errors.Is(err, store.ErrChangesPruned):
			log.Warn("leading: the replica fell behind the store's change feed; loading state from the store", "replica", c.ReplicaID, "epoch", lease.Epoch)
		default:
			cancel(err) // stops the renewals too
			return errors.Join(context.Cause(ctx), drain(httpSrv, errc, haRunning, time.Now().Add(c.shutdownTimeout()), log))
		}
		st = fs
		defer func() {
			rctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
			defer stop()
			if err := el.Release(rctx, lease); err != nil {
				log.Warn("releasing the controller lease", "err", err)
			}
		}()
	}

	var (
		ctrl      *controller.Controller
		simOffers func(context.Context) []model.Offer
		scaleC    controller.ScaleConfig
		simN      *live.Nodes
		// simNew builds a sim pool's driver; nil without --sim.
		simNew registry.Factory
	)
	if c.Sim.Enabled {
		sp, err := newSimProvider(c.Sim, cat)
		if err != nil {
			return err
		}
		if simN, err = live.New(ctx, live.Config{DataDir: c.DataDir, Catalog: cat, Isolation: iso, Log: log, Version: c.Version, GPUs: controller.LaunchedGPUs}); err != nil {
			return err
		}
		simOffers, scaleC = simScale(sp, simN, c.Sim.Clouds)
		simNew = sp.ForPool
		c.NoAgent = true
		log.Info("simulated clouds", "clouds", c.Sim.Clouds, "time_scale", c.Sim.TimeScale, "scenario", c.Sim.Scenario, "default_pool", "sim")
	}
	// This machine's GPUs, found before the controller starts so demo
	// GPUs can be priced: they cost what the catalog charges for them on
	// demand, so `up --fake-gpus` demos show cost.
	var (
		inv      gpu.Inventory
		demoType string
	)
	if !c.NoAgent {
		if inv, err = DiscoverGPUs(ctx, c.FakeGPUs, cat, log); err != nil {
			return err
		}
		if typ, p, ok := demoPrice(inv, cat); ok {
			demoType = typ
			costCfg.Prices = costCfg.Prices.WithInstanceType(typ, p)
			log.Info("demo GPUs priced from the catalog", "instance_type", typ, "price_per_hour", p.PerHour.String())
		}
	}
	// The drivers, with what the scale loop builds for their pools where
	// it launches into them.
	builders := map[string]registry.Factory{
		aws.Name: awsFactory(cat, func() *identity.Identity { return ctrlIdentity(ctrl) }, log),
	}
	if simNew != nil {
		builders[sim.Name] = simNew
	}
	provs, err := registry.New(Drivers(builders)...)
	if err != nil {
		return err
	}
	if provs.Launches() {
		scaleC.Drivers = provs
	}
	// Owned machines: the static provider follows the applied static
	// NodePools; each machine joins by running `gpufleet agent` with the
	// token of its name.
	owned := static.NewPools(nil, time.Now())
	// SSH fleets: hosts gpufleet installs its agent on (sshfleet.go).
	agentURL := c.AgentURL
	if agentURL == "" {
		agentURL = url
	}
	sshFleet, sshEnroll, sshDial, err := newSSHFleet(c.DataDir, agentURL, serverCA, log)
	if err != nil {
		return err
	}
	// Kubernetes clusters: a runner per applied pool of provider kubernetes.
	kube := kubepools.New(cat, log)
	ctrl, err = controller.New(ctx, controller.Config{
		Offers:       simOffers,
		Scale:        scaleC,
		Inventory:    kube.Inventory(providerInventory(scaleC.Providers)),
		Machines:     declaredMachines(owned, sshFleet),
		PoolsChanged: poolsChanged(owned.SetPools, kube.SetPools, sshFleet.SetPools),
		Adopters:     map[string]provider.Adopter{static.Name: owned},
		Alerts:       controller.AlertRules{WebhookURL: c.AlertWebhookURL},
		Keyring:      keyring, Redactor: redactor,
		Store: st, Logs: logs, Log: log, ServerURL: url, Archives: archives,
		// Outside the data dir, where jobs' users can reach their own.
		CheckpointDir:     filepath.Join(iso.WorkRoot, "checkpoints"),
		Seed:              time.Now().UnixNano(),
		HeartbeatTimeout:  c.HeartbeatTimeout,
		HeartbeatInterval: c.heartbeatInterval(),
		Leading:           electorLeading(el),
		Cost:              costCfg,
		Metrics:           controller.NewMetrics(reg, func() map[model.JobState]int { return ctrl.JobCounts() }),
		Fatal: func(err error) {
			if store.IsFenced(err) {
				err = fmt.Errorf("%w: %w", leader.ErrLost, err)
			}
			cancel(fmt.Errorf("store failed: %w", err))
		},
	})
	if err != nil {
		return err
	}
	defer ctrl.Close()
	steps.done("controller")
	var deadline time.Time // of the shutdown, once it begins
	// Launches in flight end with the controller's context; their outcome
	// is recorded before the controller closes.
	defer waitUntil(ctrl.WaitLaunches, &deadline, "provider launches", log)
	if simN != nil {
		simN.CP = ctrl
		defer waitUntil(simN.Wait, &deadline, "simulated nodes' agents", log)
	}
	reg.MustRegister(ctrl.TelemetryCollector(), ctrl.CostCollector())
	// A replica's admin token (for the CLI on its machine) waits until
	// the API serves and the loops run: on a takeover it is a commit, and
	// it must not stand between the lease and the first scheduling pass.
	if el == nil {
		if err := ensureAdminToken(ctx, ctrl, c); err != nil {
			return err
		}
		steps.done("admin token")
	}
	cal, calNote, err := LoadCalibration(c.DataDir)
	if err != nil {
		return err
	}
	if calNote != "" {
		log.Info("advisor uses measured GPU rates", "source", calNote)
	}
	svcMetrics, err := services.NewMetrics(reg)
	if err != nil {
		return err
	}
	svcs, err := services.New(services.Config{Controller: ctrl, Committer: ctrl.Committer(), Stored: ctrl.StoredServices(),
		Legacy: filepath.Join(c.DataDir, "services.json"), Keys: ctrl.Vault(), Cost: serviceCost(ctrl),
		Log: log.With("component", "services"), Metrics: svcMetrics, StripCookies: []string{web.SessionCookie, web.CSRFCookie},
		Domain: c.ServicesDomain, Reserved: apiHosts(url, c.AdvertiseURL, c.AgentURL)})
	if err != nil {
		return err
	}
	steps.done("services")
	gitSync, err := newGitOps(c.GitOps, ctrl, cat, provs, log)
	if err != nil {
		return err
	}
	var gitStatus api.GitOps
	if gitSync != nil {
		gitStatus = gitSync
	}
	// Artefacts: checkpoints and pushed model files, read and written
	// through the API; retention runs here, on the leader only.
	arts, err := artifacts.New(artifacts.Config{Fleet: ctrl, Keys: ctrl.Vault(), Log: log.With("component", "artifacts")})
	if err != nil {
		return err
	}
	ui := web.New(web.Config{ByHash: ctrl.Identity().AuthenticateHash, Log: log.With("component", "web")})
	srv, err := api.New(api.Config{
		Sessions: ui, UI: ui.Handler(), Controller: ctrl, Identity: ctrl.Identity(), Roles: ctrl.Identity(), Auditor: ctrl.AuditLog(), Secrets: ctrl.Vault(),
		Catalog: cat, PoolPrice: provs.Price, CheckPool: provs.CheckPool, Owned: ownedOffers(owned, sshFleet), Logs: logs, Archives: archives, Log: log, Registry: reg, Version: c.Version, Calibration: cal, Audit: st, Services: svcs, GitOps: gitStatus, Joiner: ctrl,
		Artifacts: arts, Leader: leaderLine(el), MaxInflightWrites: c.MaxInflightWrites})
	if err != nil {
		return err
	}
	steps.done("api")
	running := []string{"api"}
	if sw != nil {
		sw.set(srv.Handler())
		running = haRunning
	} else {
		httpSrv = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { errc <- stopped{"api", ignoreClosed(httpSrv.Serve(ln))} }()
	}
	go func() { errc <- stopped{"controller", ctrl.Run(ctx)} }()
	kube.CP, kube.Nodes = ctrl, poolNodes{ctrl}
	go func() { errc <- stopped{"kubernetes runner", kube.Run(ctx)} }()
	startSSHFleet(sshEnroll, sshDial, ctrl)
	go func() { errc <- stopped{"ssh fleet", sshFleet.Run(ctx)} }()
	go func() { errc <- stopped{"services", svcs.Run(ctx)} }()
	go func() { errc <- stopped{"artefact retention", arts.Run(ctx)} }()
	running = append(running, "controller", "kubernetes runner", "ssh fleet", "services", "artefact retention")
	if gitSync != nil {
		go func() { errc <- stopped{"gitops", gitSync.Run(ctx)} }()
		running = append(running, "gitops")
	}
	if !c.NoAgent {
		ag, err := localAgent(ctx, c, ctrl, inv, demoType, serverCA, iso, log)
		if err != nil {
			cancel(nil)
			return errors.Join(err, drain(httpSrv, errc, running, time.Now().Add(c.shutdownTimeout()), log))
		}
		go func() { errc <- stopped{"local agent", ag.Run(ctx)} }()
		running = append(running, "local agent")
		log.Info("local node", "gpus", len(inv.GPUs), "gpu_source", inv.Source)
	}
	if el != nil {
		steps.done("loops started")
		if err := ensureAdminToken(ctx, ctrl, c); err != nil {
			cancel(nil)
			return errors.Join(err, drain(httpSrv, errc, running, time.Now().Add(c.shutdownTimeout()), log))
		}
		steps.done("admin token")
	}
	if err := writeServerInfo(c.DataDir, url); err != nil {
		cancel(nil)
		return errors.Join(err, drain(httpSrv, errc, running, time.Now().Add(c.shutdownTimeout()), log))
	}
	defer removeServerInfo(c.DataDir, url)
	log.Info("gpufleet is up", "url", url, "data_dir", c.DataDir, "version", c.Version, steps.attr())
	if c.Banner {
		printBanner(url, c.DataDir)
	}

	select {
	case <-ctx.Done():
	case s := <-errc:
		running = slices.DeleteFunc(running, func(n string) bool { return n == s.name })
		if s.err != nil {
			cancel(s.err)
		}
	}
	begun := time.Now()
	deadline = begun.Add(c.shutdownTimeout())
	if cause := context.Cause(ctx); errors.Is(cause, leader.ErrLost) {
		// A deposed leader's writes are fenced: nothing is gained by
		// waiting for its requests, and the new leader already serves.
		log.Error("stepping down: no longer the leader; exiting for a restart as a follower", "err", cause)
		deadline = begun.Add(min(c.shutdownTimeout(), stepDownBound))
	}
	// Cancelling first stops every pass, launch and sync at once.
	cancel(nil)
	if simN != nil {
		log.Info("shutting down: no more scheduling or launches; stopping the simulated machines' workloads", "bound", c.shutdownTimeout().String())
		sigCtx, stop := context.WithDeadline(context.Background(), deadline)
		signalled, killed := simN.StopAll(sigCtx, c.shutdownTimeout()/2)
		stop()
		log.Info("shutdown: simulated machines' workloads stopped", "replicas_signalled", signalled, "replicas_killed", killed)
	} else {
		log.Info("shutting down: no more scheduling or launches; running jobs keep running and are re-adopted at the next start", "bound", c.shutdownTimeout().String())
	}
	err = drain(httpSrv, errc, running, deadline, log)
	log.Info("shutdown finished", "took", time.Since(begun).Round(time.Millisecond).String())
	if err != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// localAgent returns the in-process agent that runs jobs on this machine's
// GPUs (inv), speaking the agent protocol to the controller. instanceType
// names demo GPUs for the price table; serverCA, when the API is served
// over TLS, is the certificate jobs pin to reach it.
func localAgent(ctx context.Context, c *Config, cp agentapi.ControlPlane, inv gpu.Inventory, instanceType string, serverCA []byte, iso agent.Isolation, log *slog.Logger) (*agent.Agent, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the gpufleet binary for supervisors: %w", err)
	}
	host, _ := os.Hostname()
	src, sim := TelemetrySource(ctx, inv, log)
	ag, err := agent.New(agent.Config{
		Telemetry:    src,
		Dir:          filepath.Join(c.DataDir, "agent"),
		ControlPlane: cp,
		Registration: agentapi.Registration{
			Name: host, Provider: local.Name, GPUs: inv.GPUs, GPUSource: inv.Source,
			CPU: float64(runtime.NumCPU()), Memory: TotalMemory(), Region: local.Region,
			InstanceType: instanceType, CapacityType: model.Owned, AgentVersion: c.Version,
		},
		ServerCA:          serverCA,
		Isolation:         iso,
		SupervisorCommand: []string{exe, "supervise", "--dir"},
		Clock:             clock.Real{},
		Logger:            log.With("component", "agent"),
		PollInterval:      200 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	if sim != nil {
		sim.Busy = ag.BusyGPU
	}
	return ag, nil
}

// TotalMemory reads MemTotal from /proc/meminfo; 0 when unknown.
func TotalMemory() model.Bytes {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return model.Bytes(kb) * model.KiB
		}
	}
	return 0
}

// ensureAdminToken keeps the admin token in the data dir valid: it creates
// one on first start, or when the stored one expired or was revoked.
func ensureAdminToken(ctx context.Context, ctrl *controller.Controller, c *Config) error {
	path := filepath.Join(c.DataDir, TokenFile)
	if data, err := os.ReadFile(path); err == nil {
		if _, err := ctrl.Identity().Authenticate(strings.TrimSpace(string(data))); err == nil {
			return nil
		}
	}
	_, secret, err := ctrl.Identity().CreateToken(ctx, controller.TokenRequest{
		Kind: model.TokenUser, Subject: "admin", Name: "created by gpufleet up", Admin: true, TTL: c.AdminTokenTTL,
	})
	if err != nil {
		return fmt.Errorf("creating admin token: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing admin token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing admin token: %w", err)
	}
	return nil
}

func writeServerInfo(dataDir, url string) error {
	data, _ := json.Marshal(Info{URL: url, PID: os.Getpid()})
	tmp := filepath.Join(dataDir, InfoFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing server address: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dataDir, InfoFile))
}

func printBanner(url, dataDir string) {
	fmt.Fprintf(os.Stderr, `
gpufleet is up at %s (data in %s)

In another terminal:
  gpufleet run --gpus 0 -- sh -c 'echo hello'   # prints the job id
  gpufleet jobs list --all
  gpufleet jobs logs JOB_ID
  gpufleet nodes list
The CLI finds this server and its admin token in the data dir.

Dashboard: %s/ui/
  log in with the admin token (gfu_…):  cat %s
  a token for someone else:             gpufleet tokens create NAME && gpufleet roles grant NAME PROJECT member
Press Ctrl-C to stop; running jobs keep running and are re-adopted at the next start.

`, url, dataDir, url, filepath.Join(dataDir, TokenFile))
}

// providerInventory lists the instances of every provider gpufleet buys
// from, so `gpufleet drift` can report instances gone or leaked outside it.
// Nil when there are none (drift then checks nodes against pools only).
func providerInventory(provs []provider.Provider) func(context.Context) (map[string][]string, error) {
	if len(provs) == 0 {
		return nil
	}
	return func(ctx context.Context) (map[string][]string, error) {
		out := make(map[string][]string, len(provs))
		for _, p := range provs {
			insts, err := p.List(ctx)
			if err != nil {
				return nil, fmt.Errorf("listing %s instances: %w", p.Name(), err)
			}
			ids := make([]string, len(insts))
			for i, in := range insts {
				ids[i] = in.ID
			}
			out[p.Name()] = ids
		}
		return out, nil
	}
}

// declaredMachines lists the machines fixed-capacity drivers declare,
// each with its pool, for drift.
func declaredMachines(ps ...provider.FixedCapacity) func(context.Context) ([]model.Node, error) {
	return func(ctx context.Context) ([]model.Node, error) {
		var all []model.Node
		for _, p := range ps {
			ms, err := p.Machines(ctx)
			if err != nil {
				return nil, err
			}
			all = append(all, ms...)
		}
		return all, nil
	}
}

// ownedOffers lists the offers of machines that exist already (p is
// provider.FixedCapacity): their declared prices, beside the catalog's in
// `gpufleet offers` and `advise` through the API.
func ownedOffers(ps ...provider.Provider) func(context.Context) []model.Offer {
	return func(ctx context.Context) []model.Offer {
		var all []model.Offer
		for _, p := range ps {
			offers, err := p.Offers(ctx)
			if err != nil {
				continue // a driver that cannot list now shows nothing
			}
			all = append(all, offers...)
		}
		return all
	}
}

// poolNodes is the controller as a kubepools.Retirer.
type poolNodes struct{ *controller.Controller }

// PoolNodes lists the nodes of pool, in any state.
func (p poolNodes) PoolNodes(pool string) []model.Node {
	var out []model.Node
	for _, n := range p.Nodes() {
		if n.Pool == pool {
			out = append(out, *n.Node)
		}
	}
	return out
}

// poolsChanged hands the declared pools to each of fs in turn.
func poolsChanged(fs ...func([]*model.NodePool, time.Time)) func([]*model.NodePool, time.Time) {
	return func(pools []*model.NodePool, now time.Time) {
		for _, f := range fs {
			f(pools, now)
		}
	}
}

// serviceCost is what the ledger attributes to the work in scope from
// from to to: a service's replicas (services.Config.Cost).
func serviceCost(ctrl *controller.Controller) func(model.BudgetScope, time.Time, time.Time) (model.Money, error) {
	return func(scope model.BudgetScope, from, to time.Time) (model.Money, error) {
		rep, err := ctrl.CostReport(cost.Query{From: from, To: to, Scope: &scope, Idle: cost.IdleHidden})
		return rep.Total, err
	}
}

// apiHosts are the host names the API is reached at (the listener's, the
// advertised and the agents' URLs): no service may claim them, so a
// service's host never captures the API's requests.
func apiHosts(urls ...string) []string {
	var out []string
	for _, u := range urls {
		if p, err := neturl.Parse(u); err == nil && p.Hostname() != "" {
			out = append(out, strings.ToLower(p.Hostname()))
		}
	}
	return out
}
