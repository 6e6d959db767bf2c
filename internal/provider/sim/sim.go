package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Name is the provider name of a simulator unless Config.Name says
// otherwise.
const Name = "sim"

// Config says what to simulate. The zero value simulates every cloud of the
// embedded catalog on the wall clock with seed 0 and no scenario.
type Config struct {
	// Name is the provider's name; empty means "sim".
	Name string
	// Offers, when non-nil, are the offers to simulate; otherwise those of
	// Catalog, or of the embedded catalog when Catalog is nil too.
	Offers  []model.Offer
	Catalog *catalog.Catalog
	// Providers limits the simulation to these clouds (catalog provider
	// names: aws, gcp, azure, oci, lambda, vast); empty means all.
	Providers []string
	// Keep, when set, simulates only the offers it keeps, after the
	// scenario and Providers are checked against all of them (a
	// simulation leaves out what no pool of its fleet can buy).
	Keep func(model.Offer) bool
	// Clock drives boots, notices, stops and billing; nil means the wall
	// clock. Nothing happens between calls: the state is brought up to
	// Clock.Now() on each one.
	Clock clock.Clock
	// Seed makes every random choice (capacity, boot delays, interruption
	// times, injected failures); equal seeds and equal call sequences at
	// equal times give equal results.
	Seed int64
	// Scenario overrides defaults; nil means none.
	Scenario *Scenario
	// TimeScale divides boot delays and notice lead times, so a demo on
	// the wall clock sees in seconds what takes minutes; 0 means 1.
	// Interruption rates and billing are not scaled.
	TimeScale float64
}

// Provider is a simulated set of clouds. It is safe for concurrent use.
type Provider struct {
	name  string
	clk   clock.Clock
	seed  int64
	scale float64

	mu       sync.Mutex
	offers   []model.Offer // in catalog order; never changes
	byKey    map[offerKey]*offerState
	quota    map[quotaKey]*quotaState
	tokens   map[string]*instance
	live     map[string]*instance
	all      []*instance // in launch order
	events   []Event
	seq      int
	nextDue  time.Time // earliest pending transition of a live instance; zero when none
	lastSync time.Time
	// version counts the changes of what List, Notices and the stopped
	// instances' bills return (provider.Versioned); offers never change.
	version uint64
}

var (
	_ provider.Provider            = (*Provider)(nil)
	_ provider.InterruptionWatcher = (*Provider)(nil)
	_ provider.Interrupter         = (*Provider)(nil)
	_ provider.Biller              = (*Provider)(nil)
	_ provider.Versioned           = (*Provider)(nil)
)

// offerState is one offer's resolved behaviour and its use.
type offerState struct {
	offer          model.Offer
	key            string
	capacity       int
	used           int
	attempts       int
	rate           float64
	interruptAfter time.Duration
	bootMin        time.Duration
	bootMax        time.Duration
	noticeLead     time.Duration
	fail           Failure
	quota          *quotaState
}

type quotaKey struct {
	cloud, gpu string
	spot       bool
}

type quotaState struct {
	name  string
	limit int
	used  int
}

// instance is one launched machine. Its future is fixed at launch (boot,
// notice and stop times); sync makes it happen as the clock passes.
type instance struct {
	id       string
	token    string
	offer    *offerState
	labels   map[string]string
	accepted time.Time
	readyAt  time.Time
	// noticeAt and stopAt are zero when no interruption is due.
	noticeAt, stopAt time.Time
	reason           string
	// Progress of sync through the instance's life.
	ready, noticed bool
	ended          time.Time // zero while live
}

// Event is one thing that happened in the simulation, for tests, traces
// and `gpufleet simulate`.
type Event struct {
	At         time.Time   `json:"at"`
	Kind       EventKind   `json:"kind"`
	InstanceID string      `json:"instanceId,omitempty"`
	Offer      model.Offer `json:"offer"`
	// Detail is the error of a failed launch or the reason of a notice.
	Detail string `json:"detail,omitempty"`
	// Refusal is a failed launch's kind: FailQuotaExceeded (the cloud's
	// GPU quota for the model), FailInsufficientCapacity (the offer's
	// instances all in use) or FailTransient, injected ones included.
	Refusal string `json:"refusal,omitempty"`
}

// EventKind names an Event.
type EventKind string

// Event kinds, in the order an instance's life can produce them.
const (
	EventLaunchFailed EventKind = "launch-failed"
	EventLaunched     EventKind = "launched"
	EventRunning      EventKind = "running"
	EventNotice       EventKind = "notice"
	EventInterrupted  EventKind = "interrupted"
	EventTerminated   EventKind = "terminated"
)

// Notice reasons.
const (
	ReasonSpot   = "spot-interruption"
	ReasonManual = "manual"
)

// New builds a simulator. It fails when the scenario is invalid or names
// clouds or offers the simulation does not have.
func New(cfg Config) (*Provider, error) {
	offers := cfg.Offers
	if offers == nil {
		cat := cfg.Catalog
		if cat == nil {
			var err error
			if cat, err = catalog.Load(); err != nil {
				return nil, fmt.Errorf("building simulator: %w", err)
			}
		}
		offers = cat.Offers()
	}
	scn := cfg.Scenario
	if scn == nil {
		scn = &Scenario{}
	}
	if err := scn.Validate(); err != nil {
		return nil, fmt.Errorf("building simulator: scenario: %w", err)
	}
	if err := checkAgainst(scn, offers, cfg.Providers); err != nil {
		return nil, fmt.Errorf("building simulator: %w", err)
	}
	p := &Provider{
		name:   cmp.Or(cfg.Name, Name),
		clk:    cfg.Clock,
		seed:   cfg.Seed,
		scale:  cfg.TimeScale,
		byKey:  map[offerKey]*offerState{},
		quota:  map[quotaKey]*quotaState{},
		tokens: map[string]*instance{},
		live:   map[string]*instance{},
	}
	if p.clk == nil {
		p.clk = clock.Real{}
	}
	if !(p.scale > 0) {
		p.scale = 1
	}
	for _, o := range offers {
		if len(cfg.Providers) > 0 && !slices.Contains(cfg.Providers, o.Provider) || cfg.Keep != nil && !cfg.Keep(o) {
			continue
		}
		k := keyOf(o)
		if _, dup := p.byKey[k]; dup {
			continue
		}
		if o.CapacityType != model.Spot {
			o.InterruptionRate = 0
		}
		st := p.resolve(o, scn)
		o.InterruptionRate = st.rate
		st.offer = o
		p.byKey[k] = st
		p.offers = append(p.offers, o)
	}
	p.lastSync = p.clk.Now()
	return p, nil
}

// checkAgainst reports scenario clouds and rules that the offers (before
// the Providers filter) do not have, and unknown Providers: a typo there
// would silently simulate the defaults.
func checkAgainst(scn *Scenario, offers []model.Offer, providers []string) error {
	have := map[string]bool{}
	for _, o := range offers {
		have[o.Provider] = true
	}
	known := slices.Sorted(maps.Keys(have))
	var fe model.FieldErrors
	for _, name := range providers {
		if !have[name] {
			fe.Add("providers", fmt.Sprintf("no cloud %q (have %s)", name, strings.Join(known, ", ")))
		}
	}
	for name := range scn.Clouds {
		if !have[name] {
			fe.Add(keyPath("clouds", name), fmt.Sprintf("no such cloud (have %s)", strings.Join(known, ", ")))
		}
	}
	for i, r := range scn.Offers {
		if !slices.ContainsFunc(offers, r.Match.matches) {
			fe.Add(fmt.Sprintf("offers[%d].match", i), "matches no offer")
		}
	}
	if err := fe.Err(); err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	return nil
}

// resolve works out an offer's behaviour: cloud defaults, then the
// scenario's cloud settings, then its offer rules in order.
func (p *Provider) resolve(o model.Offer, scn *Scenario) *offerState {
	d := defaultsFor(o.Provider)
	key := keyOf(o).String()
	st := &offerState{
		key:        key,
		capacity:   defaultCapacity(p.seed, key, o.GPUCount),
		rate:       o.InterruptionRate,
		bootMin:    d.bootMin,
		bootMax:    d.bootMax,
		noticeLead: d.noticeLead,
	}
	cs := scn.Clouds[o.Provider]
	if cs.BootDelay != nil {
		st.bootMin, st.bootMax = cs.BootDelay.Min.D(), cs.BootDelay.Max.D()
	}
	if cs.NoticeLead != nil {
		st.noticeLead = cs.NoticeLead.D()
	}
	for _, r := range scn.Offers {
		if !r.Match.matches(o) {
			continue
		}
		if r.Capacity != nil {
			st.capacity = *r.Capacity
		}
		if r.InterruptionRate != nil && o.CapacityType == model.Spot {
			st.rate = *r.InterruptionRate
		}
		if r.InterruptAfter != nil && o.CapacityType == model.Spot {
			st.interruptAfter = r.InterruptAfter.D()
		}
		if r.BootDelay != nil {
			st.bootMin, st.bootMax = r.BootDelay.Min.D(), r.BootDelay.Max.D()
		}
		if r.Fail != nil {
			st.fail = *r.Fail
		}
	}
	qk := quotaKey{o.Provider, o.GPU, o.CapacityType == model.Spot}
	q := p.quota[qk]
	if q == nil {
		limit, ok := cs.Quota[o.GPU]
		if !ok {
			if limit, ok = cs.Quota["*"]; !ok {
				limit = DefaultQuota
			}
		}
		kind := "on-demand"
		if qk.spot {
			kind = "spot"
		}
		q = &quotaState{name: fmt.Sprintf("%s %s %s GPUs", o.Provider, kind, o.GPU), limit: limit}
		p.quota[qk] = q
	}
	st.quota = q
	return st
}

// defaultCapacity gives an offer 16, 32, 64 or 128 GPUs' worth of
// instances, at least one.
func defaultCapacity(seed int64, key string, gpuCount int) int {
	step := int(unit(seed, "capacity", key) * capacitySteps)
	return max(1, (minCapacityGPUs<<step)/max(1, gpuCount))
}

// Name returns the configured name, "sim" by default. Offers keep their
// cloud in Offer.Provider, so route launches by the driver that listed an
// offer, not by Offer.Provider.
func (p *Provider) Name() string { return p.name }

// Offers returns every simulated offer, whether or not it has capacity
// left, as a cloud's price list would; InterruptionRate is the rate the
// simulation uses.
func (p *Provider) Offers(ctx context.Context) ([]model.Offer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing %s offers: %w", p.name, err)
	}
	return slices.Clone(p.offers), nil
}

// Launch starts an instance of req.Offer, matched by its identity
// (provider, region, zone, instance type, GPU, count, memory, capacity
// type), never its price. Checks, in order: a replayed token returns its
// instance (whatever its state); an unknown offer is ErrUnknownOffer;
// injected failures; quota (*provider.QuotaError); capacity
// (*provider.InsufficientCapacityError).
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return provider.Instance{}, fmt.Errorf("launching %s: %w", req.Offer.InstanceType, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.sync()
	if in := p.tokens[req.Token]; in != nil && req.Token != "" {
		return p.view(in, now), nil
	}
	st := p.byKey[keyOf(req.Offer)]
	if st == nil {
		return provider.Instance{}, fmt.Errorf("launching %s in %s %s: %w", req.Offer.InstanceType, req.Offer.Provider, req.Offer.Region, provider.ErrUnknownOffer)
	}
	if err := p.admit(st); err != nil {
		p.record(Event{At: now, Kind: EventLaunchFailed, Offer: st.offer, Detail: err.Error(), Refusal: refusal(err)})
		return provider.Instance{}, fmt.Errorf("launching %s in %s %s: %w", st.offer.InstanceType, st.offer.Provider, st.offer.Region, err)
	}
	in := p.start(st, req, now)
	return p.view(in, now), nil
}

// admit counts a launch attempt on st and returns the error it meets, if
// any.
func (p *Provider) admit(st *offerState) error {
	st.attempts++
	f := st.fail
	if st.attempts <= f.First || (f.Probability > 0 && unit(p.seed, "fail", st.key, fmt.Sprint(st.attempts)) < f.Probability) {
		switch f.Error {
		case FailQuotaExceeded:
			return &provider.QuotaError{Offer: st.offer, Quota: st.quota.name + " (injected)", Limit: st.quota.limit, Used: st.quota.used, Requested: st.offer.GPUCount}
		case FailTransient:
			return fmt.Errorf("injected failure: %w", provider.ErrTransient)
		default:
			return &provider.InsufficientCapacityError{Offer: st.offer}
		}
	}
	if q := st.quota; q.used+st.offer.GPUCount > q.limit {
		return &provider.QuotaError{Offer: st.offer, Quota: q.name, Limit: q.limit, Used: q.used, Requested: st.offer.GPUCount}
	}
	if st.used >= st.capacity {
		return &provider.InsufficientCapacityError{Offer: st.offer}
	}
	return nil
}

// refusal is the failure kind of admit's error.
func refusal(err error) string {
	switch {
	case errors.Is(err, provider.ErrQuotaExceeded):
		return FailQuotaExceeded
	case provider.IsInsufficientCapacity(err):
		return FailInsufficientCapacity
	default:
		return FailTransient
	}
}

// start creates an admitted instance and fixes its future.
func (p *Provider) start(st *offerState, req provider.LaunchRequest, now time.Time) *instance {
	p.seq++
	id := fmt.Sprintf("%s-%s-%06d", p.name, st.offer.Provider, p.seq)
	boot := st.bootMin
	if span := st.bootMax - st.bootMin; span > 0 {
		boot += time.Duration(unit(p.seed, "boot", id) * float64(span))
	}
	in := &instance{
		id:       id,
		token:    req.Token,
		offer:    st,
		labels:   maps.Clone(req.Labels),
		accepted: now,
		readyAt:  now.Add(p.scaled(boot).Round(time.Second)),
	}
	if st.offer.CapacityType == model.Spot {
		after, ok := st.interruptAfter, st.interruptAfter > 0
		if !ok {
			after, ok = exponential(unit(p.seed, "interrupt", id), st.rate)
		}
		if ok {
			in.noticeAt = now.Add(after)
			in.stopAt = in.noticeAt.Add(p.scaled(st.noticeLead))
			in.reason = ReasonSpot
		}
	}
	st.used++
	st.quota.used += st.offer.GPUCount
	if req.Token != "" {
		p.tokens[req.Token] = in
	}
	p.live[id] = in
	p.all = append(p.all, in)
	p.version++
	p.record(Event{At: now, Kind: EventLaunched, InstanceID: id, Offer: st.offer})
	p.due(in)
	return in
}

func (p *Provider) scaled(d time.Duration) time.Duration {
	if p.scale == 1 {
		return d
	}
	return time.Duration(float64(d) / p.scale)
}

// Terminate stops an instance and its billing now. An unknown or already
// stopped instance is success.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("terminating %s: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.sync()
	if in := p.live[id]; in != nil {
		p.end(in, now, EventTerminated)
	}
	return nil
}

// List returns the live instances (pending or running, noticed or not),
// ordered by ID.
func (p *Provider) List(ctx context.Context) ([]provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing %s instances: %w", p.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.sync()
	out := make([]provider.Instance, 0, len(p.live))
	for _, in := range p.live {
		out = append(out, p.view(in, now))
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Notices returns the outstanding notices; see provider.InterruptionWatcher.
func (p *Provider) Notices(ctx context.Context) ([]provider.Notice, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing %s notices: %w", p.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sync()
	var out []provider.Notice
	for _, in := range p.live {
		if in.noticed {
			out = append(out, notice(in))
		}
	}
	slices.SortFunc(out, func(a, b provider.Notice) int {
		return cmp.Or(a.Deadline.Compare(b.Deadline), strings.Compare(a.InstanceID, b.InstanceID))
	})
	return out, nil
}

func notice(in *instance) provider.Notice {
	return provider.Notice{InstanceID: in.id, IssuedAt: in.noticeAt, Deadline: in.stopAt, Reason: in.reason}
}

// Interrupt issues a notice now, with the cloud's lead time, for any live
// instance, spot or not; see provider.Interrupter.
func (p *Provider) Interrupt(ctx context.Context, id string) (provider.Notice, error) {
	if err := ctx.Err(); err != nil {
		return provider.Notice{}, fmt.Errorf("interrupting %s: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.sync()
	in := p.live[id]
	if in == nil {
		return provider.Notice{}, fmt.Errorf("interrupting %s: %w", id, provider.ErrNotFound)
	}
	if !in.noticed {
		in.noticeAt, in.stopAt, in.reason = now, now.Add(p.scaled(in.offer.noticeLead)), ReasonManual
		in.noticed = true
		p.version++
		p.record(Event{At: now, Kind: EventNotice, InstanceID: in.id, Offer: in.offer.offer, Detail: in.reason})
		p.due(in)
	}
	return notice(in), nil
}

// Usage bills every instance launched, per whole second from launch to
// stop (or now), at its offer's price; see microUSD for the rounding.
func (p *Provider) Usage(ctx context.Context) ([]provider.Usage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("billing %s: %w", p.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.sync()
	out := make([]provider.Usage, 0, len(p.all))
	for _, in := range p.all {
		end, running := in.ended, in.ended.IsZero()
		if running {
			end = now
		}
		secs := int64(end.Sub(in.accepted) / time.Second)
		out = append(out, provider.Usage{
			InstanceID: in.id, Offer: in.offer.offer, Start: in.accepted, End: end, Running: running,
			Seconds: secs, MicroUSD: microUSD(in.offer.offer.PricePerHour, secs),
		})
	}
	slices.SortStableFunc(out, func(a, b provider.Usage) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.InstanceID, b.InstanceID))
	})
	return out, nil
}

// Events returns everything that has happened up to now, in order.
func (p *Provider) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sync()
	return slices.Clone(p.events)
}

// Free returns how many more instances offer has room for now, ignoring
// quota, and whether the simulation sells it.
func (p *Provider) Free(o model.Offer) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sync()
	st := p.byKey[keyOf(o)]
	if st == nil {
		return 0, false
	}
	return st.capacity - st.used, true
}

// view is an instance as callers see it at now.
func (p *Provider) view(in *instance, now time.Time) provider.Instance {
	state := provider.StateRunning
	switch {
	case !in.ended.IsZero():
		state = provider.StateTerminated
	case now.Before(in.readyAt):
		state = provider.StatePending
	}
	return provider.Instance{ID: in.id, Offer: in.offer.offer, State: state, LaunchedAt: in.accepted, Labels: maps.Clone(in.labels)}
}

// sync makes everything that was due by the clock's now happen, in time
// order, and returns now. Callers hold p.mu.
func (p *Provider) sync() time.Time {
	now := p.clk.Now()
	if now.Before(p.lastSync) {
		now = p.lastSync // a clock that steps back does not undo the past
	}
	p.lastSync = now
	if p.nextDue.IsZero() || now.Before(p.nextDue) {
		return now
	}
	var due []Event
	for _, in := range p.live {
		if !in.ready && !in.readyAt.After(now) && (in.stopAt.IsZero() || in.readyAt.Before(in.stopAt)) {
			in.ready = true
			due = append(due, Event{At: in.readyAt, Kind: EventRunning, InstanceID: in.id, Offer: in.offer.offer})
		}
		if !in.noticed && !in.noticeAt.IsZero() && !in.noticeAt.After(now) {
			in.noticed = true
			due = append(due, Event{At: in.noticeAt, Kind: EventNotice, InstanceID: in.id, Offer: in.offer.offer, Detail: in.reason})
		}
		if !in.stopAt.IsZero() && !in.stopAt.After(now) {
			due = append(due, Event{At: in.stopAt, Kind: EventInterrupted, InstanceID: in.id, Offer: in.offer.offer, Detail: in.reason})
		}
	}
	// Map order is random; time, then the life-cycle order of kinds, then
	// the instance id make the log deterministic.
	order := map[EventKind]int{EventRunning: 0, EventNotice: 1, EventInterrupted: 2}
	slices.SortFunc(due, func(a, b Event) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(order[a.Kind], order[b.Kind]), strings.Compare(a.InstanceID, b.InstanceID))
	})
	if len(due) > 0 {
		p.version++ // an instance runs, is noticed or stops
	}
	for _, e := range due {
		if e.Kind == EventInterrupted {
			p.end(p.live[e.InstanceID], e.At, EventInterrupted)
			continue
		}
		p.record(e)
	}
	p.nextDue = time.Time{}
	for _, in := range p.live {
		p.due(in)
	}
	return now
}

// due lowers nextDue to in's next pending transition.
func (p *Provider) due(in *instance) {
	consider := func(t time.Time) {
		if !t.IsZero() && (p.nextDue.IsZero() || t.Before(p.nextDue)) {
			p.nextDue = t
		}
	}
	if !in.ready {
		consider(in.readyAt)
	}
	if !in.noticed {
		consider(in.noticeAt)
	}
	consider(in.stopAt)
}

// end stops a live instance at t, freeing its capacity and quota.
func (p *Provider) end(in *instance, t time.Time, kind EventKind) {
	in.ended = t
	p.version++
	delete(p.live, in.id)
	in.offer.used--
	in.offer.quota.used -= in.offer.offer.GPUCount
	e := Event{At: t, Kind: kind, InstanceID: in.id, Offer: in.offer.offer}
	if kind == EventInterrupted {
		e.Detail = in.reason
	}
	p.record(e)
}

func (p *Provider) record(e Event) { p.events = append(p.events, e) }

// Version counts the changes of the simulated inventory, notices and
// bills as of the clock's now (provider.Versioned): launches, boots,
// notices and stops. The offers never change.
func (p *Provider) Version() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sync()
	return p.version
}

// NextDue is when the next scheduled change of an instance falls due (a
// boot completes, a spot notice or a stop), as of Clock's now; false when
// nothing is due. A simulation on a fake clock advances to it.
func (p *Provider) NextDue() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sync()
	return p.nextDue, !p.nextDue.IsZero()
}
