// Package services runs inference endpoints: it keeps each service's
// replicas (jobs it submits through the controller, tagged with the
// service) at the count its autoscaler decides, probes their readiness,
// replaces the ones that end, rolls them to a new spec, and proxies
// /services/NAME/… to the ready ones.
//
// The Manager has its own lock and talks to the controller only through
// its public job API (Controller), so replicas obey the same queues,
// quotas, budgets and preemption as any job.
//
// The proxy is one type, Proxy (its own lock), routing by a table of the
// services and their ready replicas: the Manager publishes that table to
// its own Proxy and to separate `gpufleet proxy` processes (Endpoints),
// which run the same Proxy inside a Remote and report their load back
// (Report), so the autoscaler sees every proxy's traffic. Lock order: the
// Manager's lock, then the published table's, then a Proxy's; a Proxy
// calls its hooks (Demand, Failed) without its lock.
package services

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Controller is what the Manager needs of the control plane.
type Controller interface {
	Submit(ctx context.Context, s model.Submission) (*model.Job, bool, error)
	Jobs(f model.JobFilter) []*model.Job
	Cancel(ctx context.Context, id string) (*model.Job, error)
	Attempts(jobID string) ([]*model.Attempt, error)
	Nodes() []model.NodeInfo
	RecordEvent(ctx context.Context, ev model.Event) error
}

// Keys are the project secrets the Manager reads and makes: API keys of
// apiKey services, and each project's replica key (the vault).
type Keys interface {
	// ServiceKey returns project's replica key (model.ServiceKeySecret),
	// creating it durably when there is none.
	ServiceKey(ctx context.Context, project string) (string, error)
	// Value returns the opened value of project's secret name.
	Value(project, name string) (value string, held, opened bool)
}

// Config configures a Manager.
type Config struct {
	Controller Controller // required
	// Committer makes changes to services durable (the store the
	// controller shares); Stored are the services it loaded.
	Committer store.Committer // required
	Stored    []*model.Service
	// Legacy is a services.json an older server kept services in: when
	// the store holds none, its services are imported into the store and
	// the file is renamed to Legacy + ".imported". Empty: none.
	Legacy string
	// Keys, when set, gives replicas the project's replica key (in their
	// environment, and on every request the proxy and probes send them)
	// and checks the API keys of apiKey services; nil: neither (apiKey
	// services refuse every request).
	Keys  Keys
	Clock clock.Clock
	Log   *slog.Logger
	// Interval is how often replicas are reconciled (500 ms).
	Interval time.Duration
	// DrainTimeout bounds how long a replica being removed keeps its
	// in-flight requests before it is stopped anyway (30 s).
	DrainTimeout time.Duration
	// StripCookies are cookie names the proxy never forwards to a replica
	// nor lets one set (the dashboard's session cookies).
	StripCookies []string
	// Metrics receives the proxy's series; nil records none.
	Metrics *Metrics
	// Cost, when set, is the ledger's cost of the work in scope from
	// from to now (the controller's cost report).
	Cost func(scope model.BudgetScope, from, to time.Time) (model.Money, error)
	// UsageEvery is how often changed request and token counts are
	// stored (1 minute).
	UsageEvery time.Duration
	// Domain, when set, routes host NAME.DOMAIN to service NAME
	// (--services-domain).
	Domain string
	// Reserved are host names no service may claim nor be routed by (the
	// API's own).
	Reserved []string
}

// reportTTL is how long a separate proxy's last load report counts: one
// that stops reporting (gone, or cut off) no longer holds replicas up.
const reportTTL = 5 * time.Second

// report is a separate proxy's last load report.
type report struct {
	at    time.Time
	loads map[string]model.ProxyLoad
}

// Manager keeps services and their replicas. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	client *http.Client // probes
	wake   chan struct{}
	// proxy serves the server's own /services/NAME/… and hosts.
	proxy *Proxy

	mu   sync.Mutex
	svcs map[string]*entry
	// local is the server's own proxy's last load; remote the separate
	// proxies' last reports, by proxy.
	local  map[string]model.ProxyLoad
	remote map[string]report
	// keys are the projects' replica keys, as refreshKeys last read them.
	keys map[string]string

	// pubMu guards the published table and its watchers.
	pubMu   sync.Mutex
	table   model.ProxyTable
	changed chan struct{} // closed (and replaced) when table changes
}

// entry is one service and what the Manager knows of its replicas.
type entry struct {
	svc      model.Service
	scaler   *Autoscaler
	desired  int
	replicas map[string]*backend // by job id
	// resumed is set once the replicas running at start were counted.
	resumed  bool
	requests int64
	tokens   int64
	// storedUsage is when requests and tokens were last stored.
	storedUsage time.Time
}

// backend is one replica.
type backend struct {
	job      string
	slot     int
	gen      int
	jobState model.JobState
	addr     string // host:port once running
	// perHour is what the replica costs now: its share of its node's
	// price (0 until it runs).
	perHour  model.Money
	started  time.Time
	ready    bool
	wasReady bool
	draining time.Time // when it began draining; zero if not
	// stopped is set once its job was cancelled, so it is asked once.
	stopped bool
	// moving is set while the controller stops the replica's attempt
	// (a spot notice on its node, a preemption): it gets no new requests
	// and is not counted, so a replacement starts, while its requests in
	// flight finish within the job's grace period. The job comes back as
	// a replica where it is placed again.
	moving bool
	// onDemand is set when the replica's job never runs on spot.
	onDemand  bool
	nextProbe time.Time
	// inFlight is every proxy's requests on it, as last measured.
	inFlight int
}

func (b *backend) state() string {
	switch {
	case !b.draining.IsZero() || b.moving:
		return model.ReplicaDraining
	case b.ready:
		return model.ReplicaReady
	case b.wasReady:
		return model.ReplicaUnready
	case b.addr != "":
		return model.ReplicaStarting
	}
	return model.ReplicaPending
}

// New starts from the stored services (importing Legacy when there are
// none).
func New(cfg Config) (*Manager, error) {
	if cfg.Controller == nil || cfg.Committer == nil {
		return nil, errors.New("services: Controller and Committer are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.UsageEvery == 0 {
		cfg.UsageEvery = time.Minute
	}
	m := &Manager{cfg: cfg, svcs: map[string]*entry{}, wake: make(chan struct{}, 1),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		remote: map[string]report{}, changed: make(chan struct{}),
		// A restarted server's versions start elsewhere, so a proxy that
		// waits for a change past the old one's hears of the new table.
		table: model.ProxyTable{Version: uint64(cfg.Clock.Now().UnixNano()), Domain: cfg.Domain, Services: []model.ProxyRoute{}}}
	m.proxy = NewProxy(ProxyConfig{Clock: cfg.Clock, Metrics: cfg.Metrics, StripCookies: cfg.StripCookies, Reserved: cfg.Reserved,
		KeyOK:  func(r *http.Request, rt *model.ProxyRoute) bool { return m.keyOK(r, rt.Project, rt.Auth.Secrets) },
		Demand: func(string) { m.poke() },
		Failed: m.replicaFailed})
	for _, s := range cfg.Stored {
		m.svcs[s.Name] = newEntry(*s)
		cfg.Metrics.touch(s.Name)
	}
	if len(cfg.Stored) == 0 && cfg.Legacy != "" {
		if err := m.importLegacy(); err != nil {
			return nil, err
		}
	}
	if cfg.Metrics != nil {
		cfg.Metrics.replicas = m.replicaCounts
	}
	m.refreshKeys()
	m.mu.Lock()
	m.publishLocked()
	m.mu.Unlock()
	return m, nil
}

func newEntry(s model.Service) *entry {
	return &entry{svc: s, scaler: NewAutoscaler(s.Spec), replicas: map[string]*backend{}, requests: s.Requests, tokens: s.Tokens}
}

// saveUsageLocked stores e's request and token counts when they changed
// and were last stored UsageEvery ago (or force); it does not wait.
func (m *Manager) saveUsageLocked(e *entry, now time.Time, force bool) {
	if !force && e.requests == e.svc.Requests && e.tokens == e.svc.Tokens {
		return
	}
	if !force && now.Sub(e.storedUsage) < m.cfg.UsageEvery {
		return
	}
	e.svc.Requests, e.svc.Tokens, e.storedUsage = e.requests, e.tokens, now
	stored := e.svc
	m.cfg.Committer.Commit(&store.Batch{Services: []*model.Service{&stored}})
}

// importLegacy moves the services of an older server's services.json into
// the store, then renames the file, so it is read once.
func (m *Manager) importLegacy() error {
	data, err := os.ReadFile(m.cfg.Legacy)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading services: %w", err)
	}
	var list []*model.Service
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("reading services from %s: %w", m.cfg.Legacy, err)
	}
	if len(list) > 0 {
		if err := m.cfg.Committer.Commit(&store.Batch{Services: list})(context.Background()); err != nil {
			return fmt.Errorf("importing services from %s: %w", m.cfg.Legacy, err)
		}
	}
	for _, s := range list {
		m.svcs[s.Name] = newEntry(*s)
		m.cfg.Metrics.touch(s.Name)
	}
	if err := os.Rename(m.cfg.Legacy, m.cfg.Legacy+".imported"); err != nil {
		return fmt.Errorf("importing services: %w", err)
	}
	m.cfg.Log.Info("imported services into the store", "from", m.cfg.Legacy, "services", len(list))
	return nil
}

// Apply creates s or replaces its spec; a changed spec starts a new
// generation, which a rolling update brings every replica to. It returns
// the service as stored and whether it is new. A service of the same name
// in another project is a conflict.
func (m *Manager) Apply(ctx context.Context, s model.Service) (model.ServiceStatus, bool, error) {
	if err := m.checkKeys(ctx, s); err != nil {
		return model.ServiceStatus{}, false, err
	}
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	e, ok := m.svcs[s.Name]
	if ok && e.svc.Project != s.Project {
		m.mu.Unlock()
		return model.ServiceStatus{}, false, fmt.Errorf("service %s belongs to project %s: %w", s.Name, e.svc.Project, model.ErrConflict)
	}
	if fe := m.hostConflictsLocked(s); len(fe) > 0 {
		m.mu.Unlock()
		return model.ServiceStatus{}, false, fe
	}
	if !ok {
		s.Generation, s.CreatedAt, s.UpdatedAt = 1, now, now
		e = newEntry(s)
		m.svcs[s.Name] = e
		m.cfg.Metrics.touch(s.Name)
	} else {
		same, _ := json.Marshal(e.svc.Spec)
		next, _ := json.Marshal(s.Spec)
		s.CreatedAt, s.Generation, s.UpdatedAt = e.svc.CreatedAt, e.svc.Generation, e.svc.UpdatedAt
		s.Requests, s.Tokens, s.Decisions = e.requests, e.tokens, e.svc.Decisions
		if string(same) != string(next) || e.svc.Trusted != s.Trusted {
			s.Generation++
			s.UpdatedAt = now
		}
		prev := e.svc
		e.svc = s
		if prev.Spec.Replicas != s.Spec.Replicas || prev.Spec.Autoscaling != s.Spec.Autoscaling {
			e.scaler = NewAutoscaler(s.Spec)
			if s.Spec.Autoscaling.Metric != "" {
				e.scaler.Resume(e.desired, now)
			}
		}
	}
	stored := e.svc
	wait := m.cfg.Committer.Commit(&store.Batch{Services: []*model.Service{&stored}})
	st := m.statusLocked(e)
	m.mu.Unlock()
	if err := wait(ctx); err != nil {
		return model.ServiceStatus{}, false, fmt.Errorf("recording service %s: %w", s.Name, err)
	}
	m.refreshKeys()
	m.mu.Lock()
	m.publishLocked()
	m.mu.Unlock()
	m.poke()
	return st, !ok, nil
}

// reservedHost reports whether h is, or as a wildcard covers, a host the
// API is reached at.
func (m *Manager) reservedHost(h string) bool {
	parent, wild := strings.CutPrefix(h, "*.")
	for _, r := range m.cfg.Reserved {
		if _, p, _ := strings.Cut(r, "."); r == h || (wild && p == parent) {
			return true
		}
	}
	return false
}

// hostConflictsLocked lists the hosts of s that another service holds, or
// that no service may hold: the API's own, and under the services domain
// any NAME.DOMAIN but s's own (it is service NAME's) and *.DOMAIN. A
// tenant's service may hold only names under its own NAME.DOMAIN; hosts
// elsewhere are an admin's to give (s.Trusted).
func (m *Manager) hostConflictsLocked(s model.Service) model.FieldErrors {
	var fe model.FieldErrors
	for i, h := range s.Spec.Hosts {
		path := fmt.Sprintf("spec.hosts[%d]", i)
		if m.reservedHost(h) {
			fe.Add(path, fmt.Sprintf("%s is (or covers) the server's own host; pick another", h))
			continue
		}
		d := m.cfg.Domain
		if d != "" {
			label, parent, _ := strings.Cut(h, ".")
			if parent == d && label != s.Name {
				fe.Add(path, fmt.Sprintf("%s is under the services domain %s, where each service is NAME.%s (this one is %s.%s already); pick a host outside it", h, d, d, s.Name, d))
				continue
			}
		}
		if own := s.Name + "." + d; !s.Trusted && d != "" && strings.HasSuffix(h, "."+d) && h != own && !strings.HasSuffix(h, "."+own) {
			// Deeper names under the domain belong to the service whose
			// NAME.DOMAIN they sit under: a tenant may take only its own.
			fe.Add(path, fmt.Sprintf("%s is under the services domain %s but not under this service's %s; a service's own hosts are %s and names under it (api.%s, *.%s)", h, d, own, own, own, own))
			continue
		}
		if !s.Trusted && (d == "" || !strings.HasSuffix(h, "."+d)) {
			// A host name is all of its traffic: only the operator hands
			// out names outside the domain kept for services.
			where := "no services domain is set (gpufleet server --services-domain)"
			if d != "" {
				where = "it is outside the services domain " + d
			}
			fe.Add(path, fmt.Sprintf("%s: only an admin may give a service this host, as %s; ask one to apply the service", h, where))
			continue
		}
		for _, o := range m.svcs {
			if o.svc.Name != s.Name && slices.Contains(o.svc.Spec.Hosts, h) {
				fe.Add(path, fmt.Sprintf("%s is service %s's already: a host routes to one service (delete it there first)", h, o.svc.Name))
			}
		}
	}
	return fe
}

// checkKeys makes sure the project of s has its replica key, and that the
// secrets an apiKey service names exist, so a bad name is refused when the
// service is applied rather than on every call.
func (m *Manager) checkKeys(ctx context.Context, s model.Service) error {
	if m.cfg.Keys == nil {
		return nil
	}
	var fe model.FieldErrors
	for i, name := range s.Spec.Auth.Secrets {
		if _, held, _ := m.cfg.Keys.Value(s.Project, name); !held {
			fe.Add(fmt.Sprintf("spec.auth.secrets[%d]", i), fmt.Sprintf("project %s has no secret %q (gpufleet secrets set %s %s)", s.Project, name, s.Project, name))
		}
	}
	if len(fe) > 0 {
		return fe
	}
	if _, err := m.cfg.Keys.ServiceKey(ctx, s.Project); err != nil {
		return fmt.Errorf("making the replica key of project %s: %w", s.Project, err)
	}
	return nil
}

// Delete removes a service; its replicas are cancelled by the next
// reconciliation.
func (m *Manager) Delete(ctx context.Context, name string) error {
	m.mu.Lock()
	if _, ok := m.svcs[name]; !ok {
		m.mu.Unlock()
		return fmt.Errorf("service %s: %w", name, model.ErrNotFound)
	}
	delete(m.svcs, name)
	wait := m.cfg.Committer.Commit(&store.Batch{DeleteServices: []string{name}})
	m.publishLocked()
	m.mu.Unlock()
	if err := wait(ctx); err != nil {
		return fmt.Errorf("recording the deletion of service %s: %w", name, err)
	}
	m.poke()
	return nil
}

// Get returns one service with its replicas and cost.
func (m *Manager) Get(name string) (model.ServiceStatus, error) {
	loads := m.proxy.Take()
	m.mu.Lock()
	m.absorbLocked(loads)
	e, ok := m.svcs[name]
	if !ok {
		m.mu.Unlock()
		return model.ServiceStatus{}, fmt.Errorf("service %s: %w", name, model.ErrNotFound)
	}
	st := m.statusLocked(e)
	m.mu.Unlock()
	m.addCost(&st)
	return st, nil
}

// addCost fills st's cost from the ledger (without the Manager's lock: the
// report takes the controller's).
func (m *Manager) addCost(st *model.ServiceStatus) {
	now := m.cfg.Clock.Now()
	if m.cfg.Cost == nil || !now.After(st.CreatedAt) {
		return
	}
	c, err := m.cfg.Cost(ServiceScope(st.Service), st.CreatedAt, now)
	if err != nil {
		m.cfg.Log.Warn("reading a service's cost", "service", st.Name, "err", err)
		return
	}
	st.Cost = c
	if st.Tokens > 0 {
		st.CostPerMillionTokens = model.Money(float64(c) * 1e6 / float64(st.Tokens))
	}
}

// ServiceScope is the budget and cost scope of s's replicas: its project's
// jobs tagged with it.
func ServiceScope(s model.Service) model.BudgetScope {
	return model.BudgetScope{Project: s.Project, Tags: map[string]string{model.TagService: s.Name}}
}

// List returns the services of projects (nil: every project), by name.
func (m *Manager) List(projects map[string]bool) []model.ServiceStatus {
	loads := m.proxy.Take()
	m.mu.Lock()
	m.absorbLocked(loads)
	out := []model.ServiceStatus{}
	for _, e := range m.svcs {
		if projects == nil || projects[e.svc.Project] {
			out = append(out, m.statusLocked(e))
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := range out {
		m.addCost(&out[i])
	}
	return out
}

func (m *Manager) statusLocked(e *entry) model.ServiceStatus {
	st := model.ServiceStatus{Service: e.svc, Desired: e.desired, Requests: e.requests, Tokens: e.tokens,
		URL: "/services/" + e.svc.Name + "/", Replicas: []model.ServiceReplica{}}
	st.Decisions = slices.Clone(e.svc.Decisions)
	now := m.cfg.Clock.Now()
	load := m.loadLocked(e, now)
	for _, b := range e.replicas {
		st.CostPerHour += b.perHour
		if b.ready && b.draining.IsZero() && !b.moving {
			st.Ready++
		}
		st.Replicas = append(st.Replicas, model.ServiceReplica{Job: b.job, Slot: b.slot, Generation: b.gen, State: b.state(),
			JobState: b.jobState, Address: b.addr, InFlight: b.inFlight})
	}
	sort.Slice(st.Replicas, func(i, j int) bool { return st.Replicas[i].Slot < st.Replicas[j].Slot })
	st.InFlight = load.InFlight
	st.Load = model.ServiceLoad{Rate: load.Rate, Waiting: load.Waiting, P95Seconds: load.P95.Seconds(), LatencySamples: load.Samples}
	return st
}

// replicaCounts counts each service's replicas by state and sums what
// they cost per hour now, for the metrics.
func (m *Manager) replicaCounts() (map[[2]string]int, map[string]float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out, perHour := map[[2]string]int{}, map[string]float64{}
	for name, e := range m.svcs {
		for _, s := range model.ReplicaStates {
			out[[2]string{name, s}] = 0
		}
		var c model.Money
		for _, b := range e.replicas {
			out[[2]string{name, b.state()}]++
			c += b.perHour
		}
		perHour[name] = c.Dollars()
	}
	return out, perHour
}

// poke wakes the reconciler.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-m.wake:
		}
	}
}

// liveStates are the job states of a replica that has not ended.
var liveStates = []model.JobState{model.JobQueued, model.JobAdmitted, model.JobProvisioning, model.JobRunning}

// action is a controller call a reconciliation decided, made after the
// Manager's lock is released.
type action struct {
	submit *model.Submission
	cancel string
	event  *model.Event
}

// Reconcile brings every service one step closer to its desired replicas:
// it reads the replica jobs, probes the running ones, decides the count,
// then submits and cancels jobs.
func (m *Manager) Reconcile(ctx context.Context) {
	m.refreshKeys()
	loads := m.proxy.Take()
	// Only replicas: a deep queue of other jobs is neither copied nor
	// sorted every interval.
	jobs := m.cfg.Controller.Jobs(model.JobFilter{States: liveStates, Tagged: model.TagService, Limit: 1 << 20})
	byService := map[string][]*model.Job{}
	for _, j := range jobs {
		if name := j.Tags[model.TagService]; name != "" {
			byService[name] = append(byService[name], j)
		}
	}
	nodes := m.nodes()
	m.mu.Lock()
	m.absorbLocked(loads)
	var acts []action
	for name, js := range byService {
		if _, ok := m.svcs[name]; ok {
			continue
		}
		for _, j := range js { // a deleted service's replicas
			if j.Tags[model.TagServiceSlot] != "" && j.Tags[model.TagServiceGeneration] != "" {
				acts = append(acts, action{cancel: j.ID})
			}
		}
	}
	now := m.cfg.Clock.Now()
	var probes []*probe
	for name, e := range m.svcs {
		m.syncReplicasLocked(e, byService[name], nodes)
		m.saveUsageLocked(e, now, false)
		probes = append(probes, m.dueProbesLocked(e, now)...)
	}
	m.publishLocked()
	m.mu.Unlock()

	m.runProbes(ctx, probes)

	m.mu.Lock()
	for _, p := range probes {
		m.applyProbeLocked(p, now)
	}
	for _, e := range m.svcs {
		acts = append(acts, m.planLocked(e, now)...)
	}
	m.publishLocked()
	m.mu.Unlock()
	for _, a := range acts {
		switch {
		case a.submit != nil:
			if m.cfg.Keys != nil {
				if _, err := m.cfg.Keys.ServiceKey(ctx, a.submit.Project); err != nil {
					m.cfg.Log.Warn("a service replica waits for its project's replica key", "service", a.submit.Tags[model.TagService], "err", err)
					continue
				}
			}
			if _, _, err := m.cfg.Controller.Submit(ctx, *a.submit); err != nil {
				m.cfg.Log.Warn("submitting a service replica", "service", a.submit.Tags[model.TagService], "err", err)
			}
		case a.cancel != "":
			if _, err := m.cfg.Controller.Cancel(ctx, a.cancel); err != nil && !errors.Is(err, model.ErrConflict) {
				m.cfg.Log.Warn("stopping a service replica", "job", a.cancel, "err", err)
			}
		case a.event != nil:
			if err := m.cfg.Controller.RecordEvent(ctx, *a.event); err != nil {
				m.cfg.Log.Warn("recording a service event", "err", err)
			}
		}
	}
}

// node is what the Manager needs of a node: the host its replicas listen
// on, and its price and size, for their cost.
type node struct {
	host     string
	perHour  model.Money
	gpus     int
	cpu      float64
	draining bool // a notice: it takes no new work
}

// nodes maps node ids to what the Manager needs of them. The host is the
// node's gpufleet.dev/address label, else loopback (the local node, the
// simulated ones: they run on this machine).
func (m *Manager) nodes() map[string]node {
	out := map[string]node{}
	for _, n := range m.cfg.Controller.Nodes() {
		host := "127.0.0.1"
		if a := n.Labels["gpufleet.dev/address"]; a != "" {
			host = a
			if h, _, err := net.SplitHostPort(a); err == nil {
				host = h
			}
		}
		out[n.ID] = node{host: host, perHour: n.Billed, gpus: len(n.GPUs), cpu: n.CPU,
			draining: n.State == model.NodeDraining}
	}
	return out
}

// share is what a replica of spec costs per hour on n: its GPUs' share of
// the node's price, or its CPUs' on a node without GPUs.
func (n node) share(spec *model.JobSpec) model.Money {
	switch {
	case n.gpus > 0:
		return model.Money(float64(n.perHour) * min(spec.Resources.GPUs/float64(n.gpus), 1))
	case n.cpu > 0:
		return model.Money(float64(n.perHour) * min(spec.Resources.CPU/n.cpu, 1))
	}
	return 0
}

// syncReplicasLocked updates e's replicas from the live jobs of the
// service.
func (m *Manager) syncReplicasLocked(e *entry, jobs []*model.Job, nodes map[string]node) {
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.Project != e.svc.Project {
			continue
		}
		seen[j.ID] = true
		b, ok := e.replicas[j.ID]
		if !ok {
			slot, _ := strconv.Atoi(j.Tags[model.TagServiceSlot])
			gen, _ := strconv.Atoi(j.Tags[model.TagServiceGeneration])
			b = &backend{job: j.ID, slot: slot, gen: gen}
			e.replicas[j.ID] = b
		}
		b.jobState = j.State
		b.onDemand = j.Spec.Spot == model.SpotNever
		addr := ""
		moving := false
		b.perHour = 0
		if j.State == model.JobRunning {
			if as, err := m.cfg.Controller.Attempts(j.ID); err == nil {
				for _, a := range slices.Backward(as) {
					if !a.State.Terminal() && len(a.Replicas) > 0 {
						if n, ok := nodes[a.Replicas[0].NodeID]; ok {
							addr = net.JoinHostPort(n.host, strconv.Itoa(e.svc.Spec.Port+b.slot))
							b.perHour = n.share(&j.Spec)
							moving = n.draining
						}
						if ep := a.Replicas[0].Endpoint; ep != "" {
							addr = ep // its runner fronts it (a Kubernetes Service)
						}
						moving = moving || a.Stop
						if a.StartedAt != nil {
							b.started = *a.StartedAt
						}
						break
					}
				}
			}
		}
		if addr != b.addr { // moved (requeued and placed again) or stopped
			b.addr, b.ready, b.wasReady, b.nextProbe = addr, false, false, time.Time{}
		}
		if moving && !b.moving {
			m.cfg.Log.Info("service replica moving: no new requests", "service", e.svc.Name, "job", j.ID)
		}
		b.moving = moving
	}
	for id := range e.replicas {
		if !seen[id] {
			delete(e.replicas, id)
		}
	}
	if !e.resumed {
		e.resumed = true
		if n := len(e.replicas); n > 0 && e.svc.Spec.Autoscaling.Metric != "" {
			e.scaler.Resume(n, m.cfg.Clock.Now())
			e.desired = e.scaler.Current()
		}
	}
}

// planLocked decides e's replica count and returns the jobs to submit and
// cancel: new-generation replicas up to desired (+ maxSurge while old ones
// remain), old ones stopped as long as ready replicas stay at desired −
// maxUnavailable, extra ones drained and stopped.
func (m *Manager) planLocked(e *entry, now time.Time) []action {
	var acts []action
	load := m.loadLocked(e, now)
	ready := load.Ready
	d := e.scaler.Decide(load, now)
	if d.Replicas != e.desired {
		ev := model.Event{Time: now, Kind: model.EventServiceScale, Object: "service/" + e.svc.Name,
			Message: fmt.Sprintf("replicas %d → %d: %s", e.desired, d.Replicas, d.Reason),
			Fields:  map[string]string{"from": strconv.Itoa(e.desired), "to": strconv.Itoa(d.Replicas), "raw": strconv.Itoa(d.Raw)}}
		// Kept with the service (bounded), stored in this reconciliation's
		// batch with its counts, and recorded as an event.
		e.svc.Decisions = append(e.svc.Decisions, ev)
		if n := len(e.svc.Decisions); n > model.MaxServiceDecisions {
			e.svc.Decisions = slices.Clone(e.svc.Decisions[n-model.MaxServiceDecisions:])
		}
		m.saveUsageLocked(e, now, true)
		acts = append(acts, action{event: &ev})
		m.cfg.Log.Info("service scaled", "service", e.svc.Name, "from", e.desired, "to", d.Replicas, "reason", d.Reason)
		e.desired = d.Replicas
	}
	spec := e.svc.Spec
	var cur, old []*backend
	onDemand := 0
	for _, b := range e.replicas {
		if b.moving && b.draining.IsZero() {
			continue // the controller stops it; its job comes back
		}
		if !b.draining.IsZero() {
			if !b.stopped && ((b.inFlight == 0 && m.reportedSinceLocked(b.draining)) || now.Sub(b.draining) >= m.cfg.DrainTimeout) {
				b.stopped = true
				acts = append(acts, action{cancel: b.job})
			}
			continue
		}
		if b.gen == e.svc.Generation {
			cur = append(cur, b)
			if b.onDemand {
				onDemand++
			}
		} else {
			old = append(old, b)
		}
	}
	// The worst first: pending, then starting, then ready; a higher slot
	// before a lower one.
	worst := func(bs []*backend) {
		sort.Slice(bs, func(i, j int) bool {
			ri, rj := rank(bs[i]), rank(bs[j])
			if ri != rj {
				return ri < rj
			}
			return bs[i].slot > bs[j].slot
		})
	}
	worst(cur)
	worst(old)
	limit := e.desired
	if len(old) > 0 {
		limit = e.desired + spec.Update.MaxSurge
	}
	used := map[int]bool{}
	for _, b := range e.replicas {
		used[b.slot] = true
	}
	for len(cur) < e.desired && (len(old) == 0 || len(cur)+len(old) < limit) {
		slot := 0
		for used[slot] {
			slot++
		}
		used[slot] = true
		sub := m.submission(e, slot)
		if want := int(math.Ceil(spec.Replicas.OnDemandShare * float64(e.desired))); onDemand < want {
			sub.Spec.Spot = model.SpotNever
			onDemand++
		}
		acts = append(acts, action{submit: sub})
		cur = append(cur, &backend{slot: slot}) // counted until the job appears
	}
	minReady := e.desired - spec.Update.MaxUnavailable
	for _, b := range old {
		if !b.ready {
			b.draining = now
			continue
		}
		if ready-1 >= minReady {
			b.draining = now
			ready--
		}
	}
	if extra := len(cur) - e.desired; extra > 0 && len(old) == 0 {
		for _, b := range cur[:extra] {
			if b.job != "" {
				b.draining = now
			}
		}
	}
	return acts
}

func rank(b *backend) int {
	switch {
	case b.ready:
		return 2
	case b.addr != "":
		return 1
	}
	return 0
}

// submission is a new replica job of e in slot.
func (m *Manager) submission(e *entry, slot int) *model.Submission {
	spec := e.svc.Spec.Template
	spec.Replicas = 1
	spec.Run.Env = maps(spec.Run.Env)
	spec.Run.Env["PORT"] = strconv.Itoa(e.svc.Spec.Port + slot)
	spec.Run.Env["GPUFLEET_SERVICE"] = e.svc.Name
	if m.cfg.Keys != nil {
		spec.Run.Secrets = append(slices.Clone(spec.Run.Secrets), model.ServiceKeySecret)
	}
	tags := maps(e.svc.Tags)
	tags[model.TagService] = e.svc.Name
	tags[model.TagServiceGeneration] = strconv.Itoa(e.svc.Generation)
	tags[model.TagServiceSlot] = strconv.Itoa(slot)
	return &model.Submission{Name: fmt.Sprintf("%s-%d", e.svc.Name, slot), Project: e.svc.Project, User: e.svc.User,
		Tags: tags, Spec: spec, Trusted: e.svc.Trusted}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+3)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// keyOK reports whether r carries, as a bearer token, the value of one of
// project's secrets names. Values are compared in constant time.
func (m *Manager) keyOK(r *http.Request, project string, names []string) bool {
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok || m.cfg.Keys == nil {
		return false
	}
	match := 0
	for _, name := range names {
		if want, _, opened := m.cfg.Keys.Value(project, name); opened && want != "" {
			match |= subtle.ConstantTimeCompare([]byte(got), []byte(want))
		}
	}
	return match == 1
}

// replicaKey is project's replica key, "" without Keys or one.
func (m *Manager) replicaKey(project string) string {
	if m.cfg.Keys == nil {
		return ""
	}
	key, _, _ := m.cfg.Keys.Value(project, model.ServiceKeySecret)
	return key
}

// replicaFailed sets aside a replica a request failed on until its probe
// passes again, and wakes the reconciler to probe it.
func (m *Manager) replicaFailed(service, job string) {
	m.mu.Lock()
	m.replicaFailedLocked(service, job)
	m.publishLocked()
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) replicaFailedLocked(service, job string) {
	if e, ok := m.svcs[service]; ok {
		if b, ok := e.replicas[job]; ok {
			m.setReadyLocked(b, false)
			b.nextProbe = time.Time{}
		}
	}
}

// absorbLocked takes the server's own proxy's load (Proxy.Take): it is
// the local share of every service's load, and its counts add to the
// services'.
func (m *Manager) absorbLocked(loads map[string]model.ProxyLoad) {
	m.local = loads
	for name, l := range loads {
		if e, ok := m.svcs[name]; ok {
			e.requests += l.Requests
			e.tokens += l.Tokens
		}
	}
}

// Report takes a separate proxy's load report: it replaces that proxy's
// last one (for reportTTL), its counts add to the services', the replicas
// it saw fail are probed at once, and requests it holds for a replica
// wake the autoscaler.
func (m *Manager) Report(r model.ProxyReport) {
	now := m.cfg.Clock.Now()
	demand := false
	m.mu.Lock()
	m.remote[r.Proxy] = report{at: now, loads: r.Services}
	for name, l := range r.Services {
		e, ok := m.svcs[name]
		if !ok {
			continue
		}
		e.requests += max(l.Requests, 0)
		e.tokens += max(l.Tokens, 0)
		m.cfg.Metrics.addTokens(name, l.Tokens)
		for _, job := range l.Failed {
			m.replicaFailedLocked(name, job)
		}
		demand = demand || l.Waiting > 0 || len(l.Failed) > 0
	}
	m.publishLocked()
	m.mu.Unlock()
	if demand {
		m.poke()
	}
}

// loadLocked is e's load as the autoscaler reads it: the server's own
// proxy's and every separate proxy's that reported within reportTTL,
// added up (in flight, waiting, rate, the latency histograms). It sets
// each replica's in-flight count to every proxy's.
func (m *Manager) loadLocked(e *entry, now time.Time) Load {
	var l Load
	var counts []int
	perJob := map[string]int{}
	add := func(pl model.ProxyLoad) {
		l.InFlight += pl.InFlight
		l.Waiting += pl.Waiting
		l.Rate += pl.Rate
		counts = addCounts(counts, pl.Latency)
		for job, n := range pl.Replicas {
			perJob[job] += n
		}
	}
	add(m.local[e.svc.Name])
	for id, r := range m.remote {
		if now.Sub(r.at) > reportTTL {
			delete(m.remote, id)
			continue
		}
		add(r.loads[e.svc.Name])
	}
	for _, b := range e.replicas {
		b.inFlight = perJob[b.job]
		if b.ready && b.draining.IsZero() && !b.moving {
			l.Ready++
		}
	}
	l.P95, l.Samples = quantileOf(counts, 0.95)
	return l
}

// reportedSinceLocked reports whether every separate proxy that reports
// has reported more than a second after t: one routing by a table from
// before a replica drained may have sent it requests its earlier report
// does not count (a proxy hears of a new table within milliseconds).
func (m *Manager) reportedSinceLocked(t time.Time) bool {
	for _, r := range m.remote {
		if !r.at.After(t.Add(time.Second)) && m.cfg.Clock.Now().Sub(r.at) <= reportTTL {
			return false
		}
	}
	return true
}

// publishLocked makes the services and their ready replicas the table
// proxies route by: the server's own (at once, under the Manager's lock,
// so a replica shown draining takes no new request), and those following
// Endpoints. Replica keys come from keys (read without the lock).
func (m *Manager) publishLocked() {
	t := model.ProxyTable{Domain: m.cfg.Domain, Services: []model.ProxyRoute{}}
	for _, e := range m.svcs {
		s := e.svc
		rt := model.ProxyRoute{Name: s.Name, Project: s.Project, Auth: s.Spec.Auth, Hosts: s.Spec.Hosts,
			QueueLimit: s.Spec.Autoscaling.QueueLimit, ScaleFromZeroTimeout: s.Spec.Autoscaling.ScaleFromZeroTimeout,
			ReplicaKey: m.keys[s.Project], Replicas: []model.ProxyReplica{}}
		for _, b := range e.replicas {
			if b.ready && b.draining.IsZero() && !b.moving && b.addr != "" {
				rt.Replicas = append(rt.Replicas, model.ProxyReplica{Job: b.job, Slot: b.slot, Address: b.addr})
			}
		}
		sort.Slice(rt.Replicas, func(i, j int) bool { return rt.Replicas[i].Slot < rt.Replicas[j].Slot })
		t.Services = append(t.Services, rt)
	}
	sort.Slice(t.Services, func(i, j int) bool { return t.Services[i].Name < t.Services[j].Name })
	m.pubMu.Lock()
	if !reflect.DeepEqual(t.Services, m.table.Services) || t.Domain != m.table.Domain {
		t.Version = m.table.Version + 1
		m.table = t
		close(m.changed)
		m.changed = make(chan struct{})
	}
	t = m.table
	m.pubMu.Unlock()
	m.proxy.Set(t)
}

// refreshKeys reads the replica key of every service's project (without
// the Manager's lock: the vault has its own) for publishLocked.
func (m *Manager) refreshKeys() {
	m.mu.Lock()
	projects := map[string]bool{}
	for _, e := range m.svcs {
		projects[e.svc.Project] = true
	}
	m.mu.Unlock()
	keys := map[string]string{}
	for p := range projects {
		keys[p] = m.replicaKey(p)
	}
	m.mu.Lock()
	m.keys = keys
	m.mu.Unlock()
}

// Endpoints returns the table proxies route by: at once when its version
// is not after, else once it changes or ctx ends (a watch).
func (m *Manager) Endpoints(ctx context.Context, after uint64) model.ProxyTable {
	m.pubMu.Lock()
	t, ch := m.table, m.changed
	m.pubMu.Unlock()
	if t.Version != after {
		return t
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	return m.table
}

// AuthorizeDigest answers a separate proxy asking whether the bearer
// secret whose SHA-256 is digest may call service name: 0, or the status
// to refuse with (404 for no such service). Public services let anyone
// in; apiKey services compare digest with their keys' in constant time;
// token services ask token, which checks a user token by its hash and
// its role in the project.
func (m *Manager) AuthorizeDigest(name string, digest []byte, token func(digest []byte, project string) int) int {
	m.mu.Lock()
	e, ok := m.svcs[name]
	var auth model.ServiceAuth
	var project string
	if ok {
		auth, project = e.svc.Spec.Auth, e.svc.Project
	}
	m.mu.Unlock()
	switch {
	case !ok:
		return http.StatusNotFound
	case auth.Mode == model.AuthPublic:
		return 0
	case auth.Mode == model.AuthAPIKey:
		if m.cfg.Keys == nil || len(digest) != sha256.Size {
			return http.StatusUnauthorized
		}
		match := 0
		for _, s := range auth.Secrets {
			if want, _, opened := m.cfg.Keys.Value(project, s); opened && want != "" {
				h := sha256.Sum256([]byte(want))
				match |= subtle.ConstantTimeCompare(h[:], digest)
			}
		}
		if match == 1 {
			return 0
		}
		return http.StatusUnauthorized
	}
	return token(digest, project)
}

// ServeRoute serves r on the server's own proxy when it is a service's
// (Proxy.ServeRoute).
func (m *Manager) ServeRoute(w http.ResponseWriter, r *http.Request, authorize func(r *http.Request, project string) int) bool {
	return m.proxy.ServeRoute(w, r, byProject(authorize))
}

// byProject is an Authorize that asks authorize about the route's project.
func byProject(authorize func(r *http.Request, project string) int) Authorize {
	if authorize == nil {
		return nil
	}
	return func(r *http.Request, rt *model.ProxyRoute) int { return authorize(r, rt.Project) }
}

// Proxy serves one request to service name on the server's own proxy
// (Proxy.Serve).
func (m *Manager) Proxy(w http.ResponseWriter, r *http.Request, name, rest string, authorize func(r *http.Request, project string) int) {
	m.proxy.Serve(w, r, name, rest, byProject(authorize))
}
