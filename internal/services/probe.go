package services

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// probe is one readiness check to make, and its answer.
type probe struct {
	service string
	project string
	job     string
	url     string
	timeout time.Duration
	key     string // the replica key, sent as a bearer token; "" for none (set by runProbes)
	ok      bool
}

// dueProbesLocked lists the running replicas of e whose probe is due.
func (m *Manager) dueProbesLocked(e *entry, now time.Time) []*probe {
	var out []*probe
	r := e.svc.Spec.Readiness
	for _, b := range e.replicas {
		if b.addr == "" || now.Before(b.nextProbe) || now.Before(b.started.Add(r.InitialDelay.D())) {
			continue
		}
		b.nextProbe = now.Add(r.Period.D())
		out = append(out, &probe{service: e.svc.Name, job: b.job, url: "http://" + b.addr + r.Path, timeout: r.Timeout.D(), project: e.svc.Project})
	}
	return out
}

// runProbes makes every probe at once, with the replica key of its
// project (read here, without the Manager's lock); each answers 2xx within
// its timeout or fails.
func (m *Manager) runProbes(ctx context.Context, ps []*probe) {
	keys := map[string]string{}
	for _, p := range ps {
		key, ok := keys[p.project]
		if !ok {
			key = m.replicaKey(p.project)
			keys[p.project] = key
		}
		p.key = key
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, p.timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
			if err != nil {
				return
			}
			if p.key != "" {
				req.Header.Set("Authorization", "Bearer "+p.key)
			}
			resp, err := m.client.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			p.ok = resp.StatusCode >= 200 && resp.StatusCode < 300
		}()
	}
	wg.Wait()
}

// applyProbeLocked records a probe's answer (the table published at the
// end of the reconciliation lists a replica that turned ready).
func (m *Manager) applyProbeLocked(p *probe, _ time.Time) {
	e, ok := m.svcs[p.service]
	if !ok {
		return
	}
	b, ok := e.replicas[p.job]
	if !ok {
		return
	}
	m.setReadyLocked(b, p.ok)
}

func (m *Manager) setReadyLocked(b *backend, ready bool) {
	if ready == b.ready {
		return
	}
	b.ready = ready
	if ready {
		b.wasReady = true
	}
}

// rateMeter counts requests in one-second buckets over the last ten.
type rateMeter struct {
	buckets [10]int
	last    int64
}

func (r *rateMeter) add(now time.Time) {
	r.advance(now.Unix())
	r.buckets[now.Unix()%10]++
}

// advance clears the buckets of seconds that passed since the last one.
func (r *rateMeter) advance(sec int64) {
	if r.last == 0 {
		r.last = sec
		return
	}
	for s := r.last + 1; s <= sec && s <= r.last+10; s++ {
		r.buckets[s%10] = 0
	}
	if sec > r.last {
		r.last = sec
	}
}

// rate is requests per second over the last ten seconds.
func (r *rateMeter) rate(now time.Time) float64 {
	r.advance(now.Unix())
	n := 0
	for _, c := range r.buckets {
		n += c
	}
	return float64(n) / 10
}
