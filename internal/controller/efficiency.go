package controller

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/controller/telemetry"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/gpuseries"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// AlertRules configure the alerts the controller raises on efficiency,
// XID errors and queue wait. The zero value means the defaults noted.
type AlertRules struct {
	// Thresholds judge efficiency (efficiency.DefaultThresholds).
	Thresholds efficiency.Thresholds
	// IdleNotifyAfter: an attempt idle this long raises one "job-idle"
	// alert (30m; negative: never).
	IdleNotifyAfter time.Duration
	// IdleStopAfter: an interactive job (tag interactive=true) idle this
	// long is cancelled and a "job-idle-stopped" alert raised (0: never).
	IdleStopAfter time.Duration
	// DrainXIDs are the XID codes that drain the node and raise a
	// "node-xid" alert (DefaultDrainXIDs).
	DrainXIDs []int
	// QueueWaitP95: a queue whose waiting jobs' 95th-percentile wait
	// passes this raises one "queue-wait" alert until it falls back below
	// (1h; negative: never).
	QueueWaitP95 time.Duration
	// EvaluateEvery is how often efficiency and rules are evaluated (5s).
	EvaluateEvery time.Duration
	// WebhookURL receives alerts; empty: CostConfig.WebhookURL, the
	// server's default receiver. Alerts go through the same durable
	// outbox as budget firings (signed with CostConfig.WebhookSecret,
	// retried, one id per alert and period); with no receiver at all they
	// are only logged, counted and kept among the recent alerts.
	WebhookURL string
}

// DefaultDrainXIDs are the XID errors NVIDIA's XID catalogue says need
// the GPU reset or the node serviced, so the node should take no more
// work: 48 (double-bit ECC), 62 (internal micro-controller halt), 63 and
// 64 (ECC page retirement / row remapping events and failures), 74
// (NVLink error), 79 (GPU fallen off the bus), 92 (high single-bit ECC
// rate), 94 and 95 (contained and uncontained ECC errors), 119 and 120
// (GSP RPC timeout, GSP error), 140 (unrecovered ECC error).
var DefaultDrainXIDs = []int{48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}

func (r *AlertRules) defaults() {
	if r.IdleNotifyAfter == 0 {
		r.IdleNotifyAfter = 30 * time.Minute
	}
	if r.DrainXIDs == nil {
		r.DrainXIDs = DefaultDrainXIDs
	}
	if r.QueueWaitP95 == 0 {
		r.QueueWaitP95 = time.Hour
	}
	if r.EvaluateEvery == 0 {
		r.EvaluateEvery = 5 * time.Second
	}
}

// Alert rules.
const (
	AlertJobIdle        = "job-idle"
	AlertJobIdleStopped = "job-idle-stopped"
	AlertNodeXID        = "node-xid"
	AlertQueueWait      = "queue-wait"
)

// Alert is model.Alert, declared there so the API and its client need not
// import the controller.
type Alert = model.Alert

// telemetryState is the telemetry component and what the alert rules
// remember.
type telemetryState struct {
	// Tracker has its own lock (package telemetry); the controller may
	// call it with c.mu held, never the reverse.
	*telemetry.Tracker
	// fired remembers alerts that fire once: rule + object; lastEval is
	// the last evaluation. Both are guarded by Controller.mu.
	fired    map[string]bool
	lastEval time.Time
}

func newTelemetryState(r AlertRules) telemetryState {
	return telemetryState{Tracker: telemetry.New(r.Thresholds, r.DrainXIDs), fired: map[string]bool{}}
}

const (
	fieldSMActive = telemetry.FieldSMActive
	fieldXID      = telemetry.FieldXID
)

// telemetryAllocsLocked maps the attempts running on n to the UUIDs of
// their GPUs there (through the state's per-node index), for attributing
// n's telemetry; nil when tel carries no samples. Callers hold c.mu.
func (c *Controller) telemetryAllocsLocked(n *model.Node, tel *agentapi.Telemetry) map[string][]string {
	if tel == nil || len(tel.Samples) == 0 {
		return nil
	}
	uuidOf := make(map[int]string, len(n.GPUs))
	for _, g := range n.GPUs {
		uuidOf[g.Index] = g.UUID
	}
	allocs := map[string][]string{}
	c.st.LiveAttemptsOn(n.ID, func(a *model.Attempt) bool {
		for _, r := range a.Replicas {
			if r.NodeID != n.ID {
				continue
			}
			for _, gi := range r.GPUs {
				if u, ok := uuidOf[gi]; ok {
					allocs[a.ID] = append(allocs[a.ID], u)
				}
			}
		}
		return true
	})
	return allocs
}

// observeTelemetry hands a node's telemetry to the tracker, outside c.mu,
// with allocs from telemetryAllocsLocked; a new XID from the drain list
// drains the node and raises an alert, in a batch it returns committed
// (nil when there was none).
func (c *Controller) observeTelemetry(nodeID string, tel *agentapi.Telemetry, allocs map[string][]string) *commit {
	xids := c.tel.Observe(nodeID, tel, allocs)
	if len(xids) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &store.Batch{}
	for _, x := range xids {
		c.alertLocked(Alert{Rule: AlertNodeXID, Severity: "critical", At: x.At, Node: x.Node, GPU: x.UUID, XID: x.Code,
			Summary: fmt.Sprintf("GPU %d (%s) of node %s reported XID %d; the node is drained", x.GPU, x.UUID, x.Node, x.Code)}, b)
		c.cordonLocked(x.Node, fmt.Sprintf("XID %d on GPU %d", x.Code, x.GPU), b)
	}
	if b.Empty() {
		return nil
	}
	c.broadcastLocked()
	return c.com.submit(b)
}

// cordonLocked drains a node gently: it takes no new work and its running
// attempts go on (an XID may have hit a GPU no attempt uses).
func (c *Controller) cordonLocked(nodeID, why string, b *store.Batch) {
	n, ok := c.st.Node(nodeID)
	if !ok || n.State != model.NodeReady {
		return
	}
	n = n.Clone()
	n.State = model.NodeDraining
	n.Version++
	c.st.PutNode(n)
	c.nodeGen.bump(nodeID)
	b.Nodes = append(b.Nodes, n)
	c.recordLocked(b, model.Event{Kind: model.EventDrain, Object: "node/" + nodeID, Node: nodeID, Provider: n.Provider, Region: n.Region, Message: "drained: " + why})
}

// alertLocked records an alert and, when a receiver is configured, queues
// it in the webhook outbox through b (the path budget firings take:
// durable, signed, retried). Callers hold c.mu and commit b.
func (c *Controller) alertLocked(a Alert, b *store.Batch) {
	a.ID = alertID(a)
	c.tel.Record(a)
	c.cfg.Metrics.alert(a.Rule)
	c.cfg.Log.Warn("alert", "rule", a.Rule, "alert_id", a.ID, "job_id", a.Job, "node_id", a.Node, "queue", a.Queue, "summary", a.Summary)
	c.notifyLocked(b, c.alertEventLocked(a))
	if c.alertWebhookURL() == "" {
		return
	}
	now := c.cfg.Clock.Now()
	body, err := json.Marshal(alertBody{Kind: NotifyAlert, Alert: a})
	if err != nil {
		panic(fmt.Sprintf("encoding an alert: %v", err)) // plain values only
	}
	c.queueNotificationLocked(&store.Notification{ID: a.ID, Kind: NotifyAlert, Body: body, NextAt: now, Created: now}, b)
}

// alertBody is what a webhook receives for an alert: the alert's fields
// (its id first among them) and the kind.
type alertBody struct {
	Kind string `json:"kind"` // NotifyAlert
	Alert
}

// alertID names one alert and period: the rule, what it is about, and when
// the condition began (idle since) or, for point events, when it fired.
// The same condition raised again gets the same id, so receivers
// deduplicate it.
func alertID(a Alert) string {
	var about string
	switch a.Rule {
	case AlertNodeXID:
		about = fmt.Sprintf("%s/%s/%d", a.Node, a.GPU, a.XID)
	case AlertQueueWait:
		about = a.Queue
	default:
		about = cmpOr(a.Attempt, a.Job)
	}
	period := a.Since
	if period.IsZero() {
		period = a.At
	}
	return "alert/" + a.Rule + "/" + about + "/" + period.UTC().Format("20060102T150405Z")
}

// Alerts returns the recent alerts, oldest first.
func (c *Controller) Alerts() []Alert { return c.tel.Alerts() }

// evaluate classifies every tracked attempt and applies the alert rules,
// at most once per EvaluateEvery. The Run loop calls it on its tick. The
// classification runs outside c.mu: c.mu is held only to tell which
// tracked attempts ended and to apply the rules' actions.
func (c *Controller) evaluate(now time.Time) {
	c.mu.Lock()
	if now.Sub(c.tel.lastEval) < c.cfg.Alerts.EvaluateEvery {
		c.mu.Unlock()
		return
	}
	c.tel.lastEval = now
	var ended []telemetry.Ended
	for _, id := range c.tel.Tracked() {
		a, ok := c.st.Attempt(id)
		if ok {
			if live, isLive := c.st.LiveAttempt(a.JobID); isLive && live.ID == id {
				continue
			}
		}
		e := telemetry.Ended{Attempt: id}
		if ok {
			e.Job = a.JobID
			if len(a.Replicas) > 0 {
				e.Node = a.Replicas[0].NodeID
			}
		}
		ended = append(ended, e)
		delete(c.tel.fired, AlertJobIdle+"/"+id)
		delete(c.tel.fired, AlertJobIdleStopped+"/"+id)
	}
	var waits map[string]*queueWait
	if c.cfg.Alerts.QueueWaitP95 > 0 {
		waits = c.queueWaitsLocked(now, c.cfg.Alerts.QueueWaitP95)
	}
	c.mu.Unlock()
	c.tel.End(ended)
	judged := c.tel.Evaluate(now)
	c.mu.Lock()
	b := &store.Batch{}
	c.evaluateLocked(now, judged, waits, b)
	var cm *commit
	if !b.Empty() {
		c.broadcastLocked()
		cm = c.com.submit(b)
	}
	c.mu.Unlock()
	if cm != nil {
		c.trigger()
	}
}

// evaluateLocked applies the alert rules to the verdicts of the tracked
// attempts (judged) and to the queues' waits (queueWaitsLocked). Callers
// hold c.mu.
func (c *Controller) evaluateLocked(now time.Time, judged []telemetry.Judged, waits map[string]*queueWait, b *store.Batch) {
	ts := &c.tel
	rules := c.cfg.Alerts
	for _, jv := range judged {
		id, v := jv.Attempt, jv.Verdict
		if v.Class != efficiency.Idle || v.IdleSince.IsZero() {
			continue
		}
		a, ok := c.st.Attempt(id)
		if !ok {
			continue
		}
		if live, isLive := c.st.LiveAttempt(a.JobID); !isLive || live.ID != id {
			continue // ended while it was judged; the next evaluation forgets it
		}
		idle := now.Sub(v.IdleSince)
		if rules.IdleNotifyAfter > 0 && idle >= rules.IdleNotifyAfter && !ts.fired[AlertJobIdle+"/"+id] {
			ts.fired[AlertJobIdle+"/"+id] = true
			c.alertLocked(Alert{Rule: AlertJobIdle, Severity: "warning", At: now, Job: a.JobID, Attempt: id, Since: v.IdleSince,
				Summary: fmt.Sprintf("job %s has been idle for %s: %s", a.JobID, idle.Truncate(time.Second), v.Findings[0].Reason)}, b)
		}
		if rules.IdleStopAfter > 0 && idle >= rules.IdleStopAfter && !ts.fired[AlertJobIdleStopped+"/"+id] {
			if j, ok := c.st.Job(a.JobID); ok && j.Tags["interactive"] == "true" {
				ts.fired[AlertJobIdleStopped+"/"+id] = true
				c.cancelLocked(j, b, now)
				c.alertLocked(Alert{Rule: AlertJobIdleStopped, Severity: "warning", At: now, Job: a.JobID, Attempt: id, Since: v.IdleSince,
					Summary: fmt.Sprintf("interactive job %s was idle for %s and has been stopped", a.JobID, idle.Truncate(time.Second))}, b)
			}
		}
	}
	if rules.QueueWaitP95 > 0 {
		for q, w := range waits {
			key := AlertQueueWait + "/" + q
			switch {
			case w.p95Over() && !ts.fired[key]:
				ts.fired[key] = true
				c.alertLocked(Alert{Rule: AlertQueueWait, Severity: "warning", At: now, Queue: q,
					Summary: fmt.Sprintf("queue %s: 95%% of waiting jobs have waited up to %s, above %s", q, w.p95().Truncate(time.Second), rules.QueueWaitP95)}, b)
			case !w.p95Over():
				delete(ts.fired, key)
			}
		}
	}
}

// queueWait is one queue's waiting jobs at an evaluation: how many, and
// the waits of those that have waited longer than the rule's limit.
type queueWait struct {
	n    int
	over []time.Duration
}

// p95Over reports whether the 95th percentile of the waits (nearest rank)
// is above the limit: the waits above it, sorted last, reach the rank.
func (w *queueWait) p95Over() bool { return w.n > 0 && len(w.over) >= w.n-p95Rank(w.n) }

// p95 returns the 95th percentile of the waits when p95Over, from the
// waits above the limit alone (the percentile is one of them); 0 when not.
// It sorts w.over in place.
func (w *queueWait) p95() time.Duration {
	if !w.p95Over() {
		return 0
	}
	slices.Sort(w.over)
	return w.over[p95Rank(w.n)-(w.n-len(w.over))]
}

// p95Rank is the nearest rank of the 95th percentile of n values, from 0.
func p95Rank(n int) int { return max(int(math.Ceil(0.95*float64(n)))-1, 0) }

// queueWaitsLocked counts each queue's waiting jobs, and keeps the waits
// of those that have waited longer than limit, from the pending index (not
// every job), in one walk: the rule's decision and the percentile in its
// message come from the same jobs. Callers hold c.mu.
func (c *Controller) queueWaitsLocked(now time.Time, limit time.Duration) map[string]*queueWait {
	waits := map[string]*queueWait{}
	var q string // the last job's queue, w its count
	var w *queueWait
	c.st.EachPending(func(j *model.Job) {
		if w == nil || j.Spec.Queue != q {
			q = j.Spec.Queue
			if w = waits[q]; w == nil {
				w = &queueWait{}
				waits[q] = w
			}
		}
		w.n++
		if d := now.Sub(j.SubmittedAt); d > limit {
			w.over = append(w.over, d)
		}
	})
	return waits
}

// Efficiency is efficiency.Report, declared there so the API and its client
// need not import the controller.
type Efficiency = efficiency.Report

// Efficiency returns the judgement of a job's live attempt, or once no
// attempt runs, of its last judged one with the job's ledger cost and
// effective cost over all its attempts (what its Cost line covers), so it
// stays readable after the job ends; false when no telemetry reached the
// controller for it.
func (c *Controller) Efficiency(jobID string) (Efficiency, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.st.LiveAttempt(jobID)
	if !ok {
		return c.finalEfficiencyLocked(jobID)
	}
	v, ok := c.tel.Verdict(a.ID)
	if !ok {
		return Efficiency{}, false
	}
	now := c.cfg.Clock.Now()
	e := Efficiency{Attempt: a.ID, Verdict: v}
	if len(a.Replicas) > 0 {
		e.Source = c.tel.Source(a.Replicas[0].NodeID)
	}
	sm := v.Summary.SMActive
	if !math.IsNaN(sm) {
		e.SMActive = &sm
	}
	if cost, ok := c.allocatedCostLocked(a, now); ok {
		e.CostMicros = &cost
		if !math.IsNaN(sm) {
			eff := efficiency.EffectiveCost(cost, sm)
			e.EffectiveCostMicros = &eff
		}
	}
	return e, true
}

// finalEfficiencyLocked is Efficiency for a job without a live attempt.
func (c *Controller) finalEfficiencyLocked(jobID string) (Efficiency, bool) {
	fv, ok := c.tel.Final(jobID)
	if !ok {
		return Efficiency{}, false
	}
	e := Efficiency{Attempt: fv.Attempt, Verdict: fv.Verdict, Source: fv.Source}
	if sm := fv.Verdict.Summary.SMActive; !math.IsNaN(sm) {
		e.SMActive = &sm
	}
	if jc, ok := c.cost.book.Job(jobID); ok {
		total := int64(jc.Total)
		e.CostMicros = &total
		if jc.MeasuredCost > 0 {
			eff := int64(jc.EffectiveCost)
			e.EffectiveCostMicros = &eff
		}
	}
	return e, true
}

// smActiveLocked is the mean SM activity the tracker measured for attempt
// a (of its last verdict, also after it ended), for the meter.
func (c *Controller) smActiveLocked(a *model.Attempt) (float64, bool) {
	return c.tel.SMActive(a.JobID, a.ID)
}

// allocatedCostLocked is what an attempt's GPUs have cost since it
// started, at its nodes' prices (nodePrice: the price file, else the
// catalog, as the meter charges) shared by GPU; false when no node of it
// has a price.
func (c *Controller) allocatedCostLocked(a *model.Attempt, now time.Time) (int64, bool) {
	if a.StartedAt == nil {
		return 0, false
	}
	hours := now.Sub(*a.StartedAt).Hours()
	var total float64
	priced := false
	for _, r := range a.Replicas {
		n, ok := c.st.Node(r.NodeID)
		if !ok || len(n.GPUs) == 0 {
			continue
		}
		price, _ := c.nodePrice(n)
		if price <= 0 {
			continue
		}
		priced = true
		share := float64(len(r.GPUs)) / float64(len(n.GPUs))
		if r.GPUShare > 0 {
			share = r.GPUShare / float64(len(n.GPUs))
		}
		total += price.Dollars() * share * hours
	}
	return int64(math.Round(total * 1e6)), priced
}

// GPUPlots returns each attempt's per-GPU telemetry series (SM activity,
// memory, power over time) of a job, by attempt number; attempts without
// a kept series are left out. The series live in memory only: a restart
// starts them afresh.
func (c *Controller) GPUPlots(jobID string) (map[int][]gpuseries.GPU, error) {
	c.mu.Lock()
	j, ok := c.st.Job(jobID)
	n := 0
	if ok {
		n = j.Attempts
	}
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	out := map[int][]gpuseries.GPU{}
	for i := 1; i <= n; i++ {
		if p := c.tel.Plots(model.AttemptID(jobID, i)); p != nil {
			out[i] = p
		}
	}
	return out, nil
}
