package controller

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller/auditlog"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/controller/notify"
	"github.com/gpufleet/gpufleet/internal/controller/revisions"
	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/state"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Config wires a Controller. The zero value of each optional field means its
// default.
type Config struct {
	Store store.Store // required
	Logs  *logstore.Store
	Clock clock.Clock
	Log   *slog.Logger
	// ServerURL is handed to jobs as GPUFLEET_SERVER.
	ServerURL string
	// CheckpointDir holds one folder per job (GPUFLEET_CHECKPOINT_DIR).
	CheckpointDir string
	// Archives holds uploaded working directories, for FetchArchive; nil
	// means none can be fetched.
	Archives *archive.Store
	// Interval between scheduling passes when nothing triggers one (1s).
	Interval time.Duration
	// PassGap is the least time between two passes (25ms), so a burst of
	// submissions is scheduled in a few passes instead of one pass each;
	// negative means none.
	PassGap time.Duration
	// HeartbeatTimeout after which a silent node is lost (60s).
	HeartbeatTimeout time.Duration
	// HeartbeatInterval agents are asked to sync at (10s).
	HeartbeatInterval time.Duration
	// Leading, when set, says whether this replica still surely leads
	// (leader.Elector.Leading): an agent's sync is answered only then,
	// since an agent that fences itself counts an answer as the control
	// plane having heard it (docs/postgres.md). Nil: a single server,
	// always.
	Leading func() bool
	// JobTokenTTL bounds a job token beyond the job's runtime limit (24h).
	JobTokenTTL time.Duration
	// IdempotencyTTL is how long an Idempotency-Key is remembered (24h).
	IdempotencyTTL time.Duration
	// FairShareHalfLife is how fast a queue's past usage fades from fair
	// share (state.DefaultHalfLife; negative: never).
	FairShareHalfLife time.Duration
	// Seed feeds the scheduler's tie-breaking.
	Seed int64
	// NewID, when set, makes the ids of new jobs and nodes (prefix and a
	// unique suffix); nil means random ones. A simulation gives a counter,
	// so that a seed and a clock replay the same run: the scheduler and
	// the autoscaler break ties by id.
	NewID func(prefix string) string
	// Offers lists capacity that could be bought, for scheduling candidates.
	Offers func(ctx context.Context) []model.Offer
	// Inventory, when set, lists the instances each provider holds for
	// gpufleet (provider name → instance ids), for drift reports; a
	// provider missing from the map is not checked.
	Inventory func(ctx context.Context) (map[string][]string, error)
	// Machines, when set, lists the machines the fixed-capacity drivers
	// declare (provider.FixedCapacity.Machines), each with its pool, for
	// drift reports (a machine without a node).
	Machines func(ctx context.Context) ([]model.Node, error)
	// Scale wires the autoscaler loop; the zero value disables it.
	Scale ScaleConfig
	// PoolsChanged, when set, is given the declared pools once New has
	// loaded them and again after every apply or rollback that changes
	// them, so a provider of fixed capacity follows the fleet
	// (static.Provider.SetPools) with the time of the change. It is called
	// with the controller's lock held, in revision order: it must be quick
	// and must not call the controller.
	PoolsChanged func(pools []*model.NodePool, now time.Time)
	// Adopters place the nodes of owned machines, by the provider name
	// their agents register with: such a node joins the pool that
	// declares it (provider.Adopter). PoolsChanged must keep them current.
	Adopters map[string]provider.Adopter
	// Metrics, when set, is updated as the controller works.
	Metrics *Metrics
	// Alerts configure the efficiency, XID and queue-wait rules and where
	// alerts are delivered (through the same outbox as budget firings).
	Alerts AlertRules
	// Cost configures metering, budgets and the webhook outbox.
	Cost CostConfig
	// Keyring seals and opens job secrets; nil means the server keeps none
	// (writing one fails, and so does submitting a job that names one).
	Keyring *secrets.Keyring
	// Redactor, when set, is kept up to date with every secret value and
	// live job token, for the log handler's scrubbing.
	Redactor *secrets.Redactor
	// Fatal is called once if the store fails; the process should stop.
	Fatal func(error)
}

func (c *Config) defaults() error {
	if c.Store == nil {
		return errors.New("controller config: Store is required")
	}
	if c.Logs == nil {
		return errors.New("controller config: Logs is required")
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.NewID == nil {
		c.NewID = newID
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.PassGap == 0 {
		c.PassGap = 25 * time.Millisecond
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 60 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.JobTokenTTL == 0 {
		c.JobTokenTTL = 24 * time.Hour
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = 24 * time.Hour
	}
	c.Alerts.defaults()
	if c.Offers == nil {
		c.Offers = func(context.Context) []model.Offer { return nil }
	}
	if c.Fatal == nil {
		c.Fatal = func(err error) { panic(fmt.Sprintf("controller: store failed: %v", err)) }
	}
	return nil
}

// Controller owns the in-memory state. Its methods are safe for concurrent use.
type Controller struct {
	cfg Config
	com *committer

	// id (tokens, job tokens, grants), audit (the audit chain) and vault
	// (sealed secrets) are components with their own locks, never held
	// while taking c.mu: the order is c.mu, then a component's.
	id    *identity.Identity
	audit *auditlog.Log
	vault *vault.Vault
	// sched is what passes keep of the queued jobs from one pass to the
	// next (its own lock; passes run it outside mu).
	sched scheduler.Memory

	mu       sync.Mutex
	st       *state.State
	seq      uint64
	idem     map[idemKey]store.Idempotency
	verdicts scheduler.Verdicts
	lastPlan *scheduler.Plan
	memo     passMemo // what the last pass read (passmemo.go)
	fleet    declared
	// revs is the fleet's revision log (package revisions; its own
	// lock), set once by New.
	revs *revisions.Log
	// specs caches each live replica's spec (cachedReplicaSpec) and
	// ckptMade the attempts whose checkpoint folder exists; both are
	// dropped when the attempt ends.
	specs    map[string]cachedSpec
	ckptMade map[string]bool
	// lastSeen is when each node last synced; in memory only, reset at start.
	lastSeen map[string]time.Time
	// lossCheck lets checkNodes skip its walk (agents.go).
	lossCheck lossCheck
	// heard is when each node's last sync arrived in this term: unlike
	// lastSeen, never set for a node that has not synced with this
	// controller, so the meter knows which replicas' ends it may not have
	// heard of yet (meterHoldsLocked).
	heard map[string]time.Time
	// polling counts each node's syncs waiting for a change (an agent
	// ends its wait when a replica changes), for the meter.
	polling map[string]int
	// observed is when each running replica's agent last saw its process
	// alive (agentapi.ReplicaStatus.ObservedAt), by replica id, in this
	// term: the meter bills it up to there (meterHoldsLocked).
	observed map[string]time.Time
	// timed holds the nodes whose agents send their clock (SentAt), with
	// the estimate of that clock's offset from ours (clockOffset); they
	// send ObservedAt for running replicas, and the meter holds for their
	// starting replicas (meterHoldsLocked). Like lastSeen and heard, an
	// entry goes when its node is lost or ended (forgetAgentLocked).
	timed map[string]clockOffset
	// data is what nodes report of their datasets (data.go).
	data    dataState
	nodeGen nodeGens
	// markers remembers each running job's checkpoint marker time, so a
	// marker is recorded once per change (watchCheckpoints).
	markers map[string]time.Time
	// markerTick counts watchCheckpoints' calls, to take turns.
	markerTick uint64
	// events are the most recent events, by Seq; eventSeq is the last
	// number given.
	events   []*model.Event
	eventSeq uint64
	scaleSt  scaleState
	// changed is closed and replaced at every job, attempt or node change,
	// so watchers (log followers) wake up; agents wait on nodeGen instead.
	changed chan struct{}

	// tel is GPU telemetry, efficiency verdicts and alerts.
	tel telemetryState

	// cost is the ledger's rollups, budgets' state and metric reports
	// (cost.go).
	cost costState

	// outbox is the webhook outbox (package notify; its own lock).
	outbox *notify.Outbox

	// services are the services loaded with the state, handed once to
	// the services manager (package services), which owns them.
	services []*model.Service

	kick      chan struct{}
	fatalOnce sync.Once
	stopCom   context.CancelFunc
	comDone   chan struct{}
}

type idemKey struct{ subject, key string }

// New loads the state from the store and returns a controller ready to Run.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:      cfg,
		st:       state.New(),
		idem:     map[idemKey]store.Idempotency{},
		lastSeen: map[string]time.Time{},
		heard:    map[string]time.Time{},
		polling:  map[string]int{},
		observed: map[string]time.Time{},
		timed:    map[string]clockOffset{},
		markers:  map[string]time.Time{},
		changed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
		tel:      newTelemetryState(cfg.Alerts),
	}
	c.com = newCommitter(cfg.Store, c.fail)
	dump, err := cfg.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading state: %w", err)
	}
	now := cfg.Clock.Now()
	for _, j := range dump.Jobs {
		c.st.PutJob(j)
		if j.Seq > c.seq {
			c.seq = j.Seq
		}
	}
	for _, n := range dump.Nodes {
		c.st.PutNode(n)
		c.lastSeen[n.ID] = now // and again when Run begins (graceNodes)
	}
	for _, a := range dump.Attempts {
		c.st.PutAttempt(a)
	}
	switch {
	case cfg.FairShareHalfLife > 0:
		c.st.SetHalfLife(cfg.FairShareHalfLife)
	case cfg.FairShareHalfLife < 0:
		c.st.SetHalfLife(0)
	}
	for _, q := range dump.Queues {
		c.st.PutQueue(q)
	}
	if err := c.loadRevisions(dump.Revisions); err != nil {
		return nil, fmt.Errorf("loading state: %w", err)
	}
	if cfg.PoolsChanged != nil {
		cfg.PoolsChanged(c.fleet.pools, now)
	}
	c.events = dump.Events
	if n := len(dump.Events); n > 0 {
		c.eventSeq = dump.Events[n-1].Seq
	}
	c.id = identity.New(identity.Config{Committer: c.com, Clock: cfg.Clock, Redactor: cfg.Redactor}, dump.Tokens, dump.Grants)
	c.audit = auditlog.New(c.com, cfg.Clock, dump.AuditHead)
	c.vault = vault.New(vault.Config{
		Committer: c.com, Keyring: cfg.Keyring, Redactor: cfg.Redactor, Clock: cfg.Clock, Log: cfg.Log, Guard: c.guardSecret,
	}, dump.Secrets)
	for _, r := range dump.Idempotency {
		c.idem[idemKey{r.Subject, r.Key}] = r
	}
	c.loadCost(dump)
	c.services = dump.Services
	c.outbox = c.newOutbox(dump.Notifications)
	c.loadUnavailable(dump.Meta)
	c.loadRetired(dump.Meta)
	comCtx, stopCom := context.WithCancel(context.Background())
	c.stopCom, c.comDone = stopCom, make(chan struct{})
	go func() { c.com.run(comCtx); close(c.comDone) }()
	cfg.Log.Info("state loaded", "jobs", len(dump.Jobs), "attempts", len(dump.Attempts), "nodes", len(dump.Nodes), "live_attempts", len(c.st.LiveAttempts()))
	return c, nil
}

func (c *Controller) fail(err error) {
	c.fatalOnce.Do(func() {
		c.cfg.Log.Error("store commit failed; stopping", "err", err)
		c.cfg.Fatal(err)
	})
}

// Close waits for every queued change to be durable and stops the commit
// acknowledger. Call it after Run has returned and the API has stopped.
func (c *Controller) Close() {
	c.stopCom()
	<-c.comDone
}

// Run drives scheduling passes and node health checks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.graceNodes()
	tick := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	costDone := make(chan struct{})
	go func() { c.costLoop(ctx); close(costDone) }()
	defer func() { <-costDone }()
	for first := true; ; first = false {
		started := time.Now()
		if err := c.pass(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Error("scheduling pass failed", "err", err)
		}
		if first {
			// The end of a start or a takeover (BENCHMARKS.md measures
			// a takeover by this line).
			c.cfg.Log.Info("first scheduling pass done", "took", time.Since(started).Round(time.Microsecond).String())
		}
		if c.cfg.PassGap > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-c.cfg.Clock.After(passGap(c.cfg.PassGap, time.Since(started))):
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			c.checkNodes(ctx)
			c.scale(ctx)
			c.evaluate(c.cfg.Clock.Now())
			c.watchCheckpoints(ctx)
		case <-c.kick:
		}
	}
}

// passGap is the pause after a pass that took took: at least least, and four
// times the pass's own duration (capped at a second), so scheduling takes at
// most a fifth of a core however deep the queue grows, and a burst of
// submissions is not slowed by a pass per job.
func passGap(least, took time.Duration) time.Duration {
	return max(least, 4*min(took, 250*time.Millisecond))
}

// trigger asks for a scheduling pass soon; it never blocks.
func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// broadcastLocked wakes every watcher. Callers hold c.mu.
func (c *Controller) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of any job, attempt or
// node.
func (c *Controller) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix and 10 random base32 characters.
func newID(prefix string) string {
	var b [7]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("reading random bytes: %v", err)) // the OS has no entropy: nothing can proceed
	}
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:])[:10])
}
