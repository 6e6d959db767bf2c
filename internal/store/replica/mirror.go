// Package replica keeps a copy of a store's state in memory, current with
// its commits: a Mirror starts from a snapshot (store.Feed.Snapshot) and
// applies each committed change after it with the rules the store's own
// statements follow (version-guarded upserts, insert-once rows, revoked
// tokens staying revoked, delivered notifications staying delivered). A
// follower replica of the server keeps one so that, when it takes over as
// leader, it hands the controller the mirror's Dump — the state Load would
// return — after applying only the changes it had not yet seen, instead
// of reading every table again.
package replica

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Mirror is the state of a store at one change seq. It is safe for
// concurrent use.
type Mirror struct {
	mu  sync.Mutex
	seq uint64

	jobs          map[string]*model.Job
	attempts      map[string]*model.Attempt
	nodes         map[string]*model.Node
	tokens        map[string]*model.Token
	idem          map[[2]string]store.Idempotency
	meta          map[string]string
	queues        map[string]*model.Queue
	revisions     map[int]*model.Revision
	events        []*model.Event // by Seq, at most store.MaxLoadedEvents
	ledger        []model.LedgerEntry
	fired         map[string]model.FiredKey
	metrics       map[string]store.MetricReport
	notifications map[string]*store.Notification // delivered ones kept as tombstones
	grants        map[[2]string]model.Grant
	auditHead     *model.AuditEntry
	secrets       map[[2]string]model.Secret
	services      map[string]*model.Service
}

// New returns a Mirror holding d, the store's state as of change seq.
func New(d *store.Dump, seq uint64) *Mirror {
	m := &Mirror{seq: seq,
		jobs: map[string]*model.Job{}, attempts: map[string]*model.Attempt{}, nodes: map[string]*model.Node{},
		tokens: map[string]*model.Token{}, idem: map[[2]string]store.Idempotency{}, meta: map[string]string{},
		queues: map[string]*model.Queue{}, revisions: map[int]*model.Revision{}, fired: map[string]model.FiredKey{},
		metrics: map[string]store.MetricReport{}, notifications: map[string]*store.Notification{},
		grants: map[[2]string]model.Grant{}, secrets: map[[2]string]model.Secret{},
		services: map[string]*model.Service{},
	}
	b := &store.Batch{Jobs: d.Jobs, Attempts: d.Attempts, Nodes: d.Nodes, Tokens: d.Tokens, Idempotency: d.Idempotency,
		Queues: d.Queues, Revisions: d.Revisions, Events: d.Events, Meta: d.Meta, Cost: d.Cost, Services: d.Services,
		Access: store.Access{Grants: d.Grants, Secrets: d.Secrets}}
	if d.AuditHead != nil {
		b.Audit = []*model.AuditEntry{d.AuditHead}
	}
	m.apply(b)
	return m
}

// Seq is the number of the last change the mirror holds.
func (m *Mirror) Seq() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq
}

// Apply applies c, which must be the change right after the mirror's.
func (m *Mirror) Apply(c store.Change) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Seq != m.seq+1 {
		return fmt.Errorf("replica: change %d does not follow change %d", c.Seq, m.seq)
	}
	for _, b := range c.Batches {
		m.apply(b)
	}
	m.seq = c.Seq
	return nil
}

// apply applies one batch as the store's statements would, in the order
// encode.Batch writes its rows (upserts before deletions). Callers hold
// m.mu.
func (m *Mirror) apply(b *store.Batch) {
	for _, j := range b.Jobs {
		if old, ok := m.jobs[j.ID]; !ok || j.Version >= old.Version {
			m.jobs[j.ID] = j
		}
	}
	for _, a := range b.Attempts {
		if old, ok := m.attempts[a.ID]; !ok || a.Version >= old.Version {
			m.attempts[a.ID] = a
		}
	}
	for _, n := range b.Nodes {
		if old, ok := m.nodes[n.ID]; !ok || n.Version >= old.Version {
			m.nodes[n.ID] = n
		}
	}
	for _, t := range b.Tokens {
		if old, ok := m.tokens[t.ID]; !ok || !old.Revoked {
			m.tokens[t.ID] = t
		}
	}
	for _, r := range b.Idempotency {
		m.idem[[2]string{r.Subject, r.Key}] = r
	}
	for _, q := range b.Queues {
		if old, ok := m.queues[q.Name]; !ok || q.Version >= old.Version {
			m.queues[q.Name] = q
		}
	}
	for _, name := range b.DeleteQueues {
		delete(m.queues, name)
	}
	for _, sv := range b.Services {
		if old, ok := m.services[sv.Name]; !ok || sv.Generation >= old.Generation {
			m.services[sv.Name] = sv
		}
	}
	for _, name := range b.DeleteServices {
		delete(m.services, name)
	}
	for _, r := range b.Revisions {
		if _, ok := m.revisions[r.Number]; !ok {
			m.revisions[r.Number] = r
		}
	}
	for _, e := range b.Events {
		m.addEvent(e)
	}
	for _, g := range b.Grants {
		m.grants[[2]string{g.User, g.Project}] = g
	}
	for _, k := range b.DeleteGrants {
		delete(m.grants, [2]string{k.User, k.Project})
	}
	for _, e := range b.Audit {
		if m.auditHead == nil || e.Seq > m.auditHead.Seq {
			m.auditHead = e
		}
	}
	for _, s := range b.Secrets {
		m.secrets[[2]string{s.Project, s.Name}] = s
	}
	for _, k := range b.DeleteSecrets {
		delete(m.secrets, [2]string{k.Project, k.Name})
	}
	m.ledger = append(m.ledger, b.Ledger...)
	for _, k := range b.BudgetFired {
		id := firedID(k)
		if _, ok := m.fired[id]; !ok {
			m.fired[id] = k
		}
	}
	for _, r := range b.Metrics {
		id := fmt.Sprintf("%s\x00%020d", r.JobID, r.Seq)
		if _, ok := m.metrics[id]; !ok {
			m.metrics[id] = r
		}
	}
	for _, n := range b.Notifications {
		if old, ok := m.notifications[n.ID]; !ok || !old.Delivered {
			m.notifications[n.ID] = n
		}
	}
	for k, v := range b.Meta {
		m.meta[k] = v
	}
}

// firedID is a firing's key as the store orders them: budget, period
// start (RFC 3339, as stored), threshold.
func firedID(k model.FiredKey) string {
	return fmt.Sprintf("%s\x00%s\x00%010d", k.Budget, k.PeriodStart.UTC().Format(time.RFC3339), k.Threshold)
}

// addEvent inserts e by Seq unless stored, keeping the newest
// store.MaxLoadedEvents. Callers hold m.mu.
func (m *Mirror) addEvent(e *model.Event) {
	n := len(m.events)
	switch {
	case n == 0 || m.events[n-1].Seq < e.Seq:
		m.events = append(m.events, e)
	default:
		i, found := slices.BinarySearchFunc(m.events, e.Seq, func(x *model.Event, seq uint64) int { return cmp.Compare(x.Seq, seq) })
		if found {
			return
		}
		if i == 0 && n >= store.MaxLoadedEvents {
			return // older than every event kept
		}
		m.events = slices.Insert(m.events, i, e)
	}
	if over := len(m.events) - store.MaxLoadedEvents; over > 0 {
		m.events = slices.Delete(m.events, 0, over)
	}
}

// Dump returns the state as the store's Load would at now: the same
// objects in the same order, idempotency records expired by now left out,
// delivered notifications left out. The objects are the mirror's own:
// callers must not change them while the mirror is in use (a new leader
// takes the Dump and stops using the mirror).
func (m *Mirror) Dump(now time.Time) *store.Dump {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &store.Dump{Meta: make(map[string]string, len(m.meta))}
	d.Jobs = values(m.jobs)
	slices.SortFunc(d.Jobs, func(a, b *model.Job) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID)) })
	d.Attempts = sorted(m.attempts, func(a *model.Attempt) string { return a.ID })
	d.Nodes = sorted(m.nodes, func(n *model.Node) string { return n.ID })
	d.Tokens = sorted(m.tokens, func(t *model.Token) string { return t.ID })
	for _, r := range m.idem {
		if r.Expires.After(now) {
			d.Idempotency = append(d.Idempotency, r)
		}
	}
	slices.SortFunc(d.Idempotency, func(a, b store.Idempotency) int {
		return cmp.Or(strings.Compare(a.Subject, b.Subject), strings.Compare(a.Key, b.Key))
	})
	d.Queues = sorted(m.queues, func(q *model.Queue) string { return q.Name })
	d.Services = sorted(m.services, func(sv *model.Service) string { return sv.Name })
	d.Revisions = values(m.revisions)
	slices.SortFunc(d.Revisions, func(a, b *model.Revision) int { return cmp.Compare(a.Number, b.Number) })
	d.Events = slices.Clone(m.events)
	for k, v := range m.meta {
		d.Meta[k] = v
	}
	d.Ledger = slices.Clone(m.ledger)
	for _, k := range sortedKeys(m.fired) {
		d.BudgetFired = append(d.BudgetFired, m.fired[k])
	}
	for _, k := range sortedKeys(m.metrics) {
		d.Metrics = append(d.Metrics, m.metrics[k])
	}
	for _, k := range sortedKeys(m.notifications) {
		if n := m.notifications[k]; !n.Delivered {
			d.Notifications = append(d.Notifications, n)
		}
	}
	for _, k := range sortedPairs(m.grants) {
		d.Grants = append(d.Grants, m.grants[k])
	}
	d.AuditHead = m.auditHead
	for _, k := range sortedPairs(m.secrets) {
		d.Secrets = append(d.Secrets, m.secrets[k])
	}
	return d
}

func values[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func sorted[V any](m map[string]V, key func(V) string) []V {
	out := values(m)
	slices.SortFunc(out, func(a, b V) int { return strings.Compare(key(a), key(b)) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedPairs[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1])) })
	return keys
}
