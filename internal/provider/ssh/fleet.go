package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Name is the provider name of SSH fleets.
const Name = model.ProviderSSH

// LabelPool is the instance label naming the pool that declares a host.
const LabelPool = "gpufleet.dev/pool"

// Enroller gives installed agents their identity on the server. The
// consumer owns this interface; the server wires its tokens and nodes.
type Enroller interface {
	// Enroll returns a fresh agent token whose subject is node, for pool's
	// host. Earlier tokens of the node may stay valid until Unenroll.
	Enroll(ctx context.Context, pool, node string) (string, error)
	// Unenroll revokes node's agent tokens and retires the node, so its
	// attempts requeue at once. A node that is not enrolled is success.
	Unenroll(ctx context.Context, pool, node string) error
}

// FleetOptions configure a Fleet. Zero optional fields take the defaults
// noted.
type FleetOptions struct {
	// Installer reaches and installs hosts. Required.
	Installer *Installer
	// Enroller mints and revokes the agents' tokens. Required.
	Enroller Enroller
	// Server is the URL installed agents connect to, as the hosts reach
	// it. Required.
	Server string
	// CA is the PEM installed agents pin for an https Server.
	CA []byte
	// StateFile, when set, remembers the installed hosts across restarts,
	// so a host removed while the server was down is still cleaned up.
	StateFile string
	// Interval is how often every declared host is checked again (its
	// agent restarted if it stopped) and failed work retried (default 1m).
	Interval time.Duration
	// Parallel bounds the hosts worked on at once (default 4).
	Parallel int
	// HostTimeout bounds the work on one host in one pass, the binary's
	// upload included, so a host that hangs does not stall the others'
	// next pass (default 10m).
	HostTimeout time.Duration
	// Log receives progress and failures (default: discarded).
	Log *slog.Logger
}

// Fleet installs the agent on the hosts of the declared ssh pools and
// removes it from hosts that leave them; it is also the fixed-capacity
// provider of those hosts. Its methods are safe for concurrent use.
type Fleet struct {
	opts    FleetOptions
	changed chan struct{}

	mu       sync.Mutex
	declared []Host               // the hosts of the declared ssh pools, in order
	since    map[string]time.Time // by node: when it was first declared
	hosts    map[string]*record   // by node: installed (or being installed)
	loaded   bool                 // the state file has been read
}

// record is what the fleet knows of one installed host; the state file
// holds these.
type record struct {
	Host  Host      `json:"host"`
	Facts Facts     `json:"facts"`
	Since time.Time `json:"since"`
	// Error is the last failure, "" when the last check passed.
	Error string `json:"error,omitempty"`
	// LoggedIn is set once gpufleet has logged in to the host for this
	// record: before that nothing of it can be on the host.
	LoggedIn bool `json:"loggedIn,omitempty"`
}

var (
	_ provider.Provider      = (*Fleet)(nil)
	_ provider.FixedCapacity = (*Fleet)(nil)
)

// NewFleet returns a fleet with no pools until SetPools gives some.
func NewFleet(opts FleetOptions) (*Fleet, error) {
	var fe model.FieldErrors
	if opts.Installer == nil || opts.Installer.Dialer == nil {
		fe.Add("installer", "is required, with its dialer")
	}
	if opts.Enroller == nil {
		fe.Add("enroller", "is required")
	}
	if opts.Server == "" {
		fe.Add("server", "is required: the URL agents connect to")
	}
	if len(fe) > 0 {
		return nil, fmt.Errorf("configuring ssh fleets: %w", fe.Err())
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.HostTimeout <= 0 {
		opts.HostTimeout = 10 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{opts: opts, changed: make(chan struct{}, 1), since: map[string]time.Time{}, hosts: map[string]*record{}}, nil
}

// SetPools takes the declared pools (an applied fleet revision) and wakes
// Run. Quick; never blocks.
func (f *Fleet) SetPools(pools []*model.NodePool, now time.Time) {
	hosts := Hosts(pools)
	f.mu.Lock()
	since := make(map[string]time.Time, len(hosts))
	for _, h := range hosts {
		if t, ok := f.since[h.Name]; ok {
			since[h.Name] = t
		} else {
			since[h.Name] = now
		}
	}
	f.declared, f.since = hosts, since
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Run reconciles the hosts with the declared pools until ctx ends: at
// once, on every SetPools, and every Interval.
func (f *Fleet) Run(ctx context.Context) error {
	tick := time.NewTicker(f.opts.Interval)
	defer tick.Stop()
	for {
		f.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-f.changed:
		case <-tick.C:
		}
	}
}

// Reconcile does one pass: hosts that left (or moved: a new address,
// port, user or folder) are uninstalled and unenrolled; every declared
// host is installed or checked. Failures are logged and retried on the
// next pass.
func (f *Fleet) Reconcile(ctx context.Context) {
	if err := f.load(); err != nil {
		f.opts.Log.Error("reading the ssh fleet's state; hosts removed while the server was down will not be cleaned up", "err", err)
	}
	f.mu.Lock()
	want := map[string]Host{}
	for _, h := range f.declared {
		want[h.Name] = h
	}
	var remove []*record
	for name, r := range f.hosts {
		if h, ok := want[name]; !ok || moved(r.Host, h) {
			remove = append(remove, r)
		}
	}
	install := slices.Clone(f.declared)
	f.mu.Unlock()

	f.each(ctx, len(remove), func(ctx context.Context, i int) { f.remove(ctx, remove[i], want) })
	f.each(ctx, len(install), func(ctx context.Context, i int) { f.install(ctx, install[i]) })
}

// moved says the node now lives elsewhere: the old place must be cleaned.
func moved(old, h Host) bool {
	return old.Address != h.Address || old.Port != h.Port || old.User != h.User || old.InstallDir != h.InstallDir || old.Jump != nil != (h.Jump != nil) ||
		old.Jump != nil && *old.Jump != *h.Jump
}

// each runs fn(0..n-1) with at most Parallel at once, each within
// HostTimeout.
func (f *Fleet) each(ctx context.Context, n int, fn func(context.Context, int)) {
	sem := make(chan struct{}, f.opts.Parallel)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			hctx, cancel := context.WithTimeout(ctx, f.opts.HostTimeout)
			defer cancel()
			fn(hctx, i)
		}()
	}
	wg.Wait()
}

func (f *Fleet) remove(ctx context.Context, r *record, want map[string]Host) {
	h := r.Host
	log := f.opts.Log.With("pool", h.Pool, "node_id", h.Name, "host", h.Addr())
	_, stays := want[h.Name]
	if !stays {
		// Retire first: the node's attempts requeue now rather than when
		// its heartbeat times out, and its token stops working.
		if err := f.opts.Enroller.Unenroll(ctx, h.Pool, h.Name); err != nil {
			log.Error("unenrolling a host that left its ssh pool; retrying", "err", err)
			return
		}
	}
	err := f.opts.Installer.Uninstall(ctx, h)
	f.mu.Lock()
	loggedIn := r.LoggedIn
	f.mu.Unlock()
	if err != nil && !loggedIn && NotLoggedIn(err) {
		// A host gpufleet never got into (a wrong address, key or
		// host key) holds nothing of it: forget it rather than retry
		// forever.
		log.Warn("forgetting a host that left its ssh pool (or moved) without gpufleet ever logging in to it", "err", err)
		err = nil
	}
	if err != nil {
		log.Error("removing the agent from a host that left its ssh pool; retrying", "err", err)
		f.mu.Lock()
		r.Error = err.Error()
		f.mu.Unlock()
		return
	}
	log.Info("agent removed from host", "moved", stays)
	f.mu.Lock()
	if f.hosts[h.Name] == r {
		delete(f.hosts, h.Name)
	}
	err = f.saveLocked()
	f.mu.Unlock()
	if err != nil {
		log.Error("recording the ssh fleet's state", "err", err)
	}
}

func (f *Fleet) install(ctx context.Context, h Host) {
	log := f.opts.Log.With("pool", h.Pool, "node_id", h.Name, "host", h.Addr())
	f.mu.Lock()
	if r, ok := f.hosts[h.Name]; ok && moved(r.Host, h) {
		f.mu.Unlock()
		return // its old place is not clean yet; the next pass installs
	}
	f.mu.Unlock()
	a := Agent{
		Server: f.opts.Server, CA: f.opts.CA,
		Token: func(ctx context.Context) (string, error) { return f.opts.Enroller.Enroll(ctx, h.Pool, h.Name) },
		Args:  []string{"--provider", Name, "--pool", h.Pool, "--price-per-hour", strconv.FormatFloat(h.PricePerHour, 'f', -1, 64)},
	}
	// Record the host before installing: a crash mid-install still
	// leaves it to be cleaned up if it leaves the pool.
	f.mu.Lock()
	r, ok := f.hosts[h.Name]
	if !ok {
		r = &record{Host: h, Since: f.since[h.Name]}
		f.hosts[h.Name] = r
		if err := f.saveLocked(); err != nil {
			f.mu.Unlock()
			log.Error("recording the ssh fleet's state; not installing", "err", err)
			return
		}
	}
	f.mu.Unlock()
	facts, err := f.opts.Installer.Install(ctx, h, a)
	f.mu.Lock()
	defer f.mu.Unlock()
	r.Host = h
	r.LoggedIn = r.LoggedIn || err == nil || !NotLoggedIn(err)
	if err != nil {
		r.Error = err.Error()
		log.Error("installing the agent on an ssh host; retrying", "err", err, "retry_in", f.opts.Interval)
		return
	}
	first := r.Facts.Hostname == ""
	r.Facts, r.Error = facts, ""
	if first {
		log.Info("agent installed on ssh host", "gpus", len(facts.GPUs), "systemd", facts.Systemd)
	}
	if err := f.saveLocked(); err != nil {
		log.Error("recording the ssh fleet's state", "err", err)
	}
}

// load reads the state file once.
func (f *Fleet) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded || f.opts.StateFile == "" {
		f.loaded = true
		return nil
	}
	b, err := os.ReadFile(f.opts.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		f.loaded = true
		return nil
	}
	if err != nil {
		return err
	}
	var recs []*record
	if err := json.Unmarshal(b, &recs); err != nil {
		return fmt.Errorf("%s: %w", f.opts.StateFile, err)
	}
	for _, r := range recs {
		if _, ok := f.hosts[r.Host.Name]; !ok {
			f.hosts[r.Host.Name] = r
		}
	}
	f.loaded = true
	return nil
}

// saveLocked writes the installed hosts to the state file. Callers hold
// f.mu.
func (f *Fleet) saveLocked() error {
	if f.opts.StateFile == "" {
		return nil
	}
	recs := make([]*record, 0, len(f.hosts))
	for _, r := range f.hosts {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b *record) int { return cmpString(a.Host.Name, b.Host.Name) })
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(f.opts.StateFile, b, 0o600)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HostStatus is what the fleet knows of one declared host.
type HostStatus struct {
	Host  Host
	Facts Facts
	// Installed is set once an install succeeded; Error is the last
	// failure.
	Installed bool
	Error     string
}

// Status reports the declared hosts, in declaration order.
func (f *Fleet) Status() []HostStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]HostStatus, 0, len(f.declared))
	for _, h := range f.declared {
		s := HostStatus{Host: h}
		if r, ok := f.hosts[h.Name]; ok {
			s.Facts, s.Error, s.Installed = r.Facts, r.Error, r.Facts.Hostname != ""
		}
		out = append(out, s)
	}
	return out
}

// Name returns "ssh".
func (f *Fleet) Name() string { return Name }

// machine is one declared host with what its last probe found.
type machine struct {
	host  Host
	facts Facts
	since time.Time
}

func (f *Fleet) machines() []machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]machine, 0, len(f.declared))
	for _, h := range f.declared {
		m := machine{host: h, since: f.since[h.Name]}
		if r, ok := f.hosts[h.Name]; ok && !moved(r.Host, h) {
			m.facts = r.Facts
		}
		out = append(out, m)
	}
	return out
}

// Offers lists the distinct offers of the probed hosts that have GPUs.
func (f *Fleet) Offers(context.Context) ([]model.Offer, error) {
	var out []model.Offer
	for _, m := range f.machines() {
		if o := m.offer(); o.GPUCount > 0 && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// Launch always fails: the hosts exist; add one to the pool instead.
func (f *Fleet) Launch(_ context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, fmt.Errorf("launching %s on %s (add a host to the pool; gpufleet installs its agent): %w", req.Offer.InstanceType, Name, provider.ErrFixedCapacity)
}

// Terminate always fails: remove the host from its pool instead, which
// uninstalls the agent.
func (f *Fleet) Terminate(_ context.Context, id string) error {
	return fmt.Errorf("terminating %s on %s (remove the host from its pool; gpufleet removes its agent): %w", id, Name, provider.ErrFixedCapacity)
}

// List returns one running instance per declared host, its id the node id.
func (f *Fleet) List(context.Context) ([]provider.Instance, error) {
	ms := f.machines()
	out := make([]provider.Instance, 0, len(ms))
	for _, m := range ms {
		out = append(out, provider.Instance{ID: m.host.Name, Offer: m.offer(), State: provider.StateRunning, LaunchedAt: m.since,
			Labels: map[string]string{LabelPool: m.host.Pool}})
	}
	return out, nil
}

// Machines returns the declared hosts as the nodes they will be, with the
// GPUs, CPUs and memory their last probe found (none before one).
func (f *Fleet) Machines(context.Context) ([]model.Node, error) {
	ms := f.machines()
	out := make([]model.Node, 0, len(ms))
	for _, m := range ms {
		h := m.host
		n := model.Node{
			ID: h.Name, Name: h.Name, Provider: Name, Pool: h.Pool, Region: h.Region, Zone: h.Zone,
			CPU: m.facts.CPU, Memory: m.facts.Memory, CapacityType: model.Owned, PricePerHour: h.PricePerHour,
			GPUs: slices.Clone(m.facts.GPUs), Labels: map[string]string{LabelPool: h.Pool},
		}
		out = append(out, n)
	}
	return out, nil
}

// offer is what a host sells: all its GPUs, at its amortised price.
func (m machine) offer() model.Offer {
	o := model.Offer{
		Provider: Name, Region: m.host.Region, Zone: m.host.Zone, InstanceType: "owned",
		VCPUs: m.facts.CPU, Memory: m.facts.Memory, CapacityType: model.Owned, PricePerHour: m.host.PricePerHour,
	}
	if g := m.facts.GPUs; len(g) > 0 {
		o.GPU, o.GPUCount, o.GPUMemory = g[0].Model, len(g), g[0].Memory
	}
	return o
}

// PoolPrice prices an ssh pool for `gpufleet plan` (the registry's
// pricing): its hosts exist already, at their declared prices.
func PoolPrice(s model.NodePoolSpec) provider.PoolPrice {
	if s.SSH == nil || len(s.SSH.Hosts) == 0 {
		return provider.PoolPrice{Unknown: "no hosts"}
	}
	prices := make([]float64, len(s.SSH.Hosts))
	for i, h := range s.SSH.Hosts {
		prices[i] = h.PricePerHour
	}
	return provider.PoolPrice{Fixed: true, NodePrices: prices}
}
