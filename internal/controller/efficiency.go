package controller

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/efficiency"
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

// maxAlerts bounds the recent alerts kept in memory.
const maxAlerts = 200

// telemetryState is what the controller keeps of GPU telemetry; guarded
// by Controller.mu.
type telemetryState struct {
	tracker *efficiency.Tracker
	// latest is each node's newest sample, and its source.
	latest map[string]agentapi.TelemetrySample
	source map[string]string
	// lastXID is the last XID seen per node and GPU UUID, so one error
	// raises one alert.
	lastXID map[string]float64
	// fired remembers alerts that fire once: rule + object.
	fired    map[string]bool
	alerts   []Alert
	lastEval time.Time
	// final is each job's last judged attempt once it has ended (the
	// tracker forgets it): the job's efficiency stays readable, and the
	// meter's last pass over the attempt still has its SM activity.
	final map[string]finalVerdict
}

// finalVerdict is an ended attempt's last verdict.
type finalVerdict struct {
	attempt string
	verdict efficiency.Verdict
	source  string
}

func newTelemetryState(th efficiency.Thresholds) telemetryState {
	return telemetryState{
		tracker: efficiency.NewTracker(th),
		latest:  map[string]agentapi.TelemetrySample{},
		source:  map[string]string{},
		lastXID: map[string]float64{},
		fired:   map[string]bool{},
		final:   map[string]finalVerdict{},
	}
}

const (
	fieldSMActive = "DCGM_FI_PROF_SM_ACTIVE"
	fieldXID      = "DCGM_FI_DEV_XID_ERRORS"
)

// nodeTelemetry is an agent's telemetry with its readings already in
// efficiency's units, converted before the lock is taken.
type nodeTelemetry struct {
	t        *agentapi.Telemetry
	readings [][]efficiency.Reading // per sample
}

// convertTelemetry converts t's readings (readings); it touches no shared
// state, so Sync calls it before taking c.mu.
func convertTelemetry(t *agentapi.Telemetry) *nodeTelemetry {
	if t == nil {
		return nil
	}
	nt := &nodeTelemetry{t: t, readings: make([][]efficiency.Reading, len(t.Samples))}
	for i, s := range t.Samples {
		rs := make([]efficiency.Reading, len(s.GPUs))
		for j, g := range s.GPUs {
			rs[j] = reading(g)
		}
		nt.readings[i] = rs
	}
	return nt
}

// observeTelemetryLocked attributes a node's samples to the attempts
// running on it (by the GPU UUIDs of their replicas there, found through
// the state's per-node index) and checks XIDs. Callers hold c.mu.
func (c *Controller) observeTelemetryLocked(n *model.Node, nt *nodeTelemetry, b *store.Batch) {
	ts := &c.tel
	t := nt.t
	ts.source[n.ID] = t.Source
	if len(t.Samples) == 0 {
		return
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
	for i, s := range t.Samples {
		ts.tracker.Observe(s.Time, nt.readings[i], allocs, math.NaN())
		c.checkXIDsLocked(n, s, b)
	}
	ts.latest[n.ID] = t.Samples[len(t.Samples)-1]
}

// reading converts a wire reading to efficiency's units: percent
// utilisation to a fraction, missing fields NaN.
func reading(g agentapi.GPUTelemetry) efficiency.Reading {
	v := func(name string, scale float64) float64 {
		x, ok := g.Values[name]
		if !ok {
			return math.NaN()
		}
		return x * scale
	}
	return efficiency.Reading{
		UUID:         g.UUID,
		SMActive:     v(fieldSMActive, 1),
		SMOccupancy:  v("DCGM_FI_PROF_SM_OCCUPANCY", 1),
		TensorActive: v("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1),
		DRAMActive:   v("DCGM_FI_PROF_DRAM_ACTIVE", 1),
		GPUUtil:      v("DCGM_FI_DEV_GPU_UTIL", 0.01),
		FBUsedMiB:    v("DCGM_FI_DEV_FB_USED", 1),
		FBTotalMiB:   v("DCGM_FI_DEV_FB_TOTAL", 1),
		PCIeTX:       v("DCGM_FI_PROF_PCIE_TX_BYTES", 1),
		PCIeRX:       v("DCGM_FI_PROF_PCIE_RX_BYTES", 1),
		NVLinkTX:     v("DCGM_FI_PROF_NVLINK_TX_BYTES", 1),
		NVLinkRX:     v("DCGM_FI_PROF_NVLINK_RX_BYTES", 1),
	}
}

// checkXIDsLocked drains the node on a new XID from the drain list.
func (c *Controller) checkXIDsLocked(n *model.Node, s agentapi.TelemetrySample, b *store.Batch) {
	for _, g := range s.GPUs {
		x, ok := g.Values[fieldXID]
		key := n.ID + "/" + g.UUID
		if !ok || x == 0 || c.tel.lastXID[key] == x {
			continue
		}
		c.tel.lastXID[key] = x
		if !slices.Contains(c.cfg.Alerts.DrainXIDs, int(x)) {
			continue
		}
		c.alertLocked(Alert{Rule: AlertNodeXID, Severity: "critical", At: s.Time, Node: n.ID, GPU: g.UUID, XID: int(x),
			Summary: fmt.Sprintf("GPU %d (%s) of node %s reported XID %d; the node is drained", g.Index, g.UUID, n.ID, int(x))}, b)
		c.cordonLocked(n.ID, fmt.Sprintf("XID %d on GPU %d", int(x), g.Index), b)
	}
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
	ts := &c.tel
	ts.alerts = append(ts.alerts, a)
	if len(ts.alerts) > maxAlerts {
		ts.alerts = slices.Delete(ts.alerts, 0, len(ts.alerts)-maxAlerts)
	}
	c.cfg.Metrics.alert(a.Rule)
	c.cfg.Log.Warn("alert", "rule", a.Rule, "alert_id", a.ID, "job_id", a.Job, "node_id", a.Node, "queue", a.Queue, "summary", a.Summary)
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
func (c *Controller) Alerts() []Alert {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tel.alerts)
}

// evaluate classifies every tracked attempt and applies the alert rules,
// at most once per EvaluateEvery. The Run loop calls it on its tick.
func (c *Controller) evaluate(now time.Time) {
	c.mu.Lock()
	if now.Sub(c.tel.lastEval) < c.cfg.Alerts.EvaluateEvery {
		c.mu.Unlock()
		return
	}
	c.tel.lastEval = now
	b := &store.Batch{}
	c.evaluateLocked(now, b)
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

func (c *Controller) evaluateLocked(now time.Time, b *store.Batch) {
	ts := &c.tel
	rules := c.cfg.Alerts
	live := map[string]*model.Attempt{}
	c.st.EachLiveAttempt(func(a *model.Attempt) { live[a.ID] = a })
	for _, id := range ts.tracker.Attempts() {
		if live[id] == nil {
			if a, ok := c.st.Attempt(id); ok {
				if v, _, ok := ts.tracker.Verdict(id); ok {
					fv := finalVerdict{attempt: id, verdict: v}
					if len(a.Replicas) > 0 {
						fv.source = ts.source[a.Replicas[0].NodeID]
					}
					ts.final[a.JobID] = fv
				}
			}
			ts.tracker.Forget(id)
			delete(ts.fired, AlertJobIdle+"/"+id)
			delete(ts.fired, AlertJobIdleStopped+"/"+id)
		}
	}
	ts.tracker.Evaluate(now)
	for _, id := range ts.tracker.Attempts() {
		v, _, _ := ts.tracker.Verdict(id)
		if v.Class != efficiency.Idle || v.IdleSince.IsZero() {
			continue
		}
		a := live[id]
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
		for q, p95 := range c.queueWaitP95Locked(now) {
			key := AlertQueueWait + "/" + q
			switch {
			case p95 > rules.QueueWaitP95 && !ts.fired[key]:
				ts.fired[key] = true
				c.alertLocked(Alert{Rule: AlertQueueWait, Severity: "warning", At: now, Queue: q,
					Summary: fmt.Sprintf("queue %s: 95%% of waiting jobs have waited up to %s, above %s", q, p95.Truncate(time.Second), rules.QueueWaitP95)}, b)
			case p95 <= rules.QueueWaitP95:
				delete(ts.fired, key)
			}
		}
	}
}

// queueWaitP95Locked returns, per queue with waiting jobs, the 95th
// percentile of how long they have waited (nearest rank).
func (c *Controller) queueWaitP95Locked(now time.Time) map[string]time.Duration {
	waits := map[string][]time.Duration{}
	c.st.EachPending(func(j *model.Job) {
		waits[j.Spec.Queue] = append(waits[j.Spec.Queue], now.Sub(j.SubmittedAt))
	})
	out := make(map[string]time.Duration, len(waits))
	for q, w := range waits {
		slices.Sort(w)
		rank := int(math.Ceil(0.95*float64(len(w)))) - 1
		out[q] = w[max(rank, 0)]
	}
	return out
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
	v, _, ok := c.tel.tracker.Verdict(a.ID)
	if !ok {
		return Efficiency{}, false
	}
	now := c.cfg.Clock.Now()
	e := Efficiency{Attempt: a.ID, Verdict: v}
	if len(a.Replicas) > 0 {
		e.Source = c.tel.source[a.Replicas[0].NodeID]
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
	fv, ok := c.tel.final[jobID]
	if !ok {
		return Efficiency{}, false
	}
	e := Efficiency{Attempt: fv.attempt, Verdict: fv.verdict, Source: fv.source}
	if sm := fv.verdict.Summary.SMActive; !math.IsNaN(sm) {
		e.SMActive = &sm
	}
	if jc, ok := c.cost.rollup.Job(jobID); ok {
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
	v, _, ok := c.tel.tracker.Verdict(a.ID)
	if !ok {
		fv, found := c.tel.final[a.JobID]
		if !found || fv.attempt != a.ID {
			return 0, false
		}
		v = fv.verdict
	}
	sm := v.Summary.SMActive
	if math.IsNaN(sm) {
		return 0, false
	}
	return sm, true
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
