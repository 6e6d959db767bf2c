// Package leader elects one controller among server replicas that share a
// store, with a store.Leaser lease: a replica waits (a follower) until it
// acquires the lease, then holds it by renewing, and reports the moment it
// can no longer be sure it leads — before the lease can have expired — so
// the server stops its loops. Every batch the leader writes carries the
// lease's fence, so even a leader that missed that moment (paused, cut off)
// cannot commit once another holds the lease.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/store"
)

// LeaseName is the lease the controller's leader holds.
const LeaseName = "controller"

// Defaults: a lease lasts TTL from its last renewal; the leader renews every
// RenewInterval and gives up (steps down) when no renewal succeeded for
// RenewDeadline, inside the TTL. The deadline leaves a renewal begun one
// interval after the last good one three seconds to land (a loaded
// database or a starved process answers late, not never: with 1.5 s to
// land, leaders stepped down at load 35 on 2 cores), and ends a second
// before the lease can expire on the database's clock, which is time
// enough for a replica to stop answering as the leader (Leading).
const (
	DefaultTTL           = 5 * time.Second
	DefaultRenewInterval = time.Second
	DefaultRenewDeadline = 4 * time.Second
)

// ErrLost says this replica stopped leading: its lease was taken over or
// could not be renewed in time.
var ErrLost = errors.New("leadership lost")

// Config is an Elector's.
type Config struct {
	Leaser store.Leaser
	// ID names this replica (unique among the replicas; no spaces).
	ID string
	// URL is where this replica's API is reached; followers send clients
	// there while this replica leads.
	URL string
	// TTL, RenewInterval and RenewDeadline: see the defaults.
	TTL, RenewInterval, RenewDeadline time.Duration
	Log                               *slog.Logger
	// Registry, when set, receives gpufleet_leader{replica} and
	// gpufleet_leader_changes_total.
	Registry prometheus.Registerer
}

// Leader is who holds the lease, as a replica last saw it.
type Leader struct {
	ID, URL string
	Epoch   uint64
}

// Elector runs one replica's side of the election. It is safe for
// concurrent use.
type Elector struct {
	cfg     Config
	isLead  prometheus.Gauge
	changes prometheus.Counter

	mu     sync.Mutex
	leader Leader
	self   bool
	// sure is the local time until which this replica is sure it leads:
	// RenewDeadline after the start of its last good Acquire or Renew.
	sure time.Time
}

// New returns an Elector; it does nothing until Campaign.
func New(cfg Config) (*Elector, error) {
	if cfg.ID == "" || strings.ContainsAny(cfg.ID, " \t\n") {
		return nil, fmt.Errorf("--replica-id: %q must be non-empty, without spaces", cfg.ID)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = DefaultRenewInterval
	}
	if cfg.RenewDeadline <= 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RenewDeadline >= cfg.TTL || cfg.RenewInterval >= cfg.RenewDeadline {
		return nil, fmt.Errorf("leader election: need renew interval (%s) < renew deadline (%s) < lease TTL (%s)", cfg.RenewInterval, cfg.RenewDeadline, cfg.TTL)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	e := &Elector{
		cfg: cfg,
		isLead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpufleet_leader", Help: "1 while this replica leads the control plane, else 0.",
			ConstLabels: prometheus.Labels{"replica": cfg.ID}}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpufleet_leader_changes_total", Help: "Leadership terms this replica saw begin (its own and others')."}),
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(e.isLead); err != nil {
			return nil, err
		}
		if err := cfg.Registry.Register(e.changes); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// holder is the lease's holder string: the replica's ID and URL.
func (c *Config) holder() string { return c.ID + " " + c.URL }

func parseHolder(h string) (id, url string) {
	id, url, _ = strings.Cut(h, " ")
	return id, url
}

// Current returns the leader as last seen, and whether it is this replica.
// A zero Leader means none is known yet.
func (e *Elector) Current() (Leader, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader, e.self
}

// Leading reports whether this replica leads and is sure of it now: its
// last good acquisition or renewal began less than RenewDeadline ago, so
// its lease cannot have expired (nor another replica have taken it) yet.
// A leader frozen past that, or starved of renewals, answers false at once,
// before Hold has noticed: whatever acts on the control plane's behalf
// outside the database (answering an agent, whose node would then trust a
// leader that no longer leads) asks first.
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.self && time.Now().Before(e.sure)
}

// Metrics are the Elector's series (for tests and embedding).
type Metrics struct {
	Leader  prometheus.Gauge
	Changes prometheus.Counter
}

// Metrics returns gpufleet_leader{replica} and gpufleet_leader_changes_total.
func (e *Elector) Metrics() Metrics { return Metrics{Leader: e.isLead, Changes: e.changes} }

// ID is this replica's.
func (e *Elector) ID() string { return e.cfg.ID }

func (e *Elector) saw(l Leader, self bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.Epoch != e.leader.Epoch || l.ID != e.leader.ID {
		e.changes.Inc()
		if l.ID != "" {
			e.cfg.Log.Info("leader", "leader", l.ID, "url", l.URL, "epoch", l.Epoch, "self", self)
		}
	}
	e.leader, e.self = l, self
	if self {
		e.isLead.Set(1)
	} else {
		e.isLead.Set(0)
	}
}

// Campaign tries to acquire the lease every RenewInterval until it does
// (this replica then leads: it returns the lease) or ctx ends. Meanwhile
// Current names the holder it found.
func (e *Elector) Campaign(ctx context.Context) (store.Lease, error) {
	t := time.NewTicker(e.cfg.RenewInterval)
	defer t.Stop()
	for {
		began := time.Now()
		l, err := e.cfg.Leaser.Acquire(ctx, LeaseName, e.cfg.holder(), e.cfg.TTL)
		var held *store.HeldError
		switch {
		case err == nil:
			e.setSure(began.Add(e.cfg.RenewDeadline))
			e.saw(Leader{ID: e.cfg.ID, URL: e.cfg.URL, Epoch: l.Epoch}, true)
			return l, nil
		case errors.As(err, &held):
			id, url := parseHolder(held.Holder)
			e.saw(Leader{ID: id, URL: url, Epoch: held.Epoch}, false)
		case ctx.Err() != nil:
			return store.Lease{}, ctx.Err()
		default:
			e.cfg.Log.Warn("leader election: acquiring the lease failed; retrying", "err", err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		}
	}
}

func (e *Elector) setSure(t time.Time) {
	e.mu.Lock()
	e.sure = t
	e.mu.Unlock()
}

// Hold renews l every RenewInterval until ctx ends (it returns nil) or
// leadership is lost: the lease was taken over, or no renewal succeeded
// for RenewDeadline since the last one began. Then it returns an error
// wrapping ErrLost at once, before the lease can have expired (the
// deadline is measured from the local start of the last good renewal, or
// of Campaign's Acquire, which precedes its expiry's start on the
// database's clock). Call it as soon as Campaign returns: the deadline
// runs from the acquisition, and a replica that took longer than it to
// begin holding has already lost.
func (e *Elector) Hold(ctx context.Context, l store.Lease) error {
	e.mu.Lock()
	valid := e.sure
	e.mu.Unlock()
	t := time.NewTicker(e.cfg.RenewInterval)
	defer t.Stop()
	for {
		wait := time.Until(valid)
		if wait <= 0 {
			e.saw(Leader{}, false)
			return fmt.Errorf("%w: no lease renewal succeeded for %s", ErrLost, e.cfg.RenewDeadline)
		}
		deadline := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			deadline.Stop()
			return nil
		case <-deadline.C:
			continue
		case <-t.C:
			deadline.Stop()
		}
		began := time.Now()
		rctx, cancel := context.WithDeadline(ctx, valid)
		nl, err := e.cfg.Leaser.Renew(rctx, l, e.cfg.TTL)
		cancel()
		switch {
		case err == nil:
			l, valid = nl, began.Add(e.cfg.RenewDeadline)
			e.setSure(valid)
		case errors.Is(err, store.ErrLeaseLost):
			e.saw(Leader{}, false)
			return fmt.Errorf("%w: %w", ErrLost, err)
		case ctx.Err() != nil:
			return nil
		default:
			e.cfg.Log.Warn("leader election: renewing the lease failed; retrying until the renew deadline", "err", err, "deadline", valid)
		}
	}
}

// Release ends l's term now, so a follower takes over without waiting for
// it to expire (a clean shutdown of the leader).
func (e *Elector) Release(ctx context.Context, l store.Lease) error {
	e.saw(Leader{}, false)
	return e.cfg.Leaser.Release(ctx, l)
}
