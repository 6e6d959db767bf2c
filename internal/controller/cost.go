package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/controller/budgets"
	"github.com/gpufleet/gpufleet/internal/controller/ledger"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
	"github.com/gpufleet/gpufleet/internal/store"
)

// SourceOwnedUnpriced is model.PriceOwnedUnpriced, declared there so the API
// and its client need not import the controller.
const SourceOwnedUnpriced = model.PriceOwnedUnpriced

// ErrBudget is model.ErrBudget, declared there so the API and its client
// need not import the controller.
var ErrBudget = model.ErrBudget

// CostConfig configures metering, budgets and webhooks. The zero value
// meters every minute with catalog prices only and sends no webhooks.
type CostConfig struct {
	// Prices is the custom price file (--prices): owned and privately
	// priced machines.
	Prices cost.PriceTable
	// MeterInterval between metering and budget passes (1m); passes also
	// end on every hour boundary. The same loop delivers the webhook
	// outbox. Negative: no loop (tests drive CostPass and deliveries).
	MeterInterval time.Duration
	// WebhookURL is the default receiver of notifications: firings of
	// budgets without spec.webhook, and alerts when AlertRules.WebhookURL
	// is empty.
	WebhookURL string
	// WebhookSecret signs every webhook body (HMAC-SHA256) but those of
	// receivers with their own signingKeyRef.
	WebhookSecret []byte
	// HTTP sends webhooks (http.DefaultClient with a 10s timeout).
	HTTP *http.Client
	// ForecastHistoryDays of daily spend feed forecasts (28).
	ForecastHistoryDays int
	// ReportLag is the most the meter trails now for a running replica
	// whose agent has not confirmed it since (meterHoldsLocked): an end
	// reported late is then billed up to when it was, not to when its
	// report arrived. The server sets the heartbeat timeout; 0: the meter
	// bills running replicas up to now (tests that play the agent).
	ReportLag time.Duration
}

// costState is the controller's cost side, guarded by Controller.mu but
// for book.
type costState struct {
	// book is the ledger's views (package ledger; its own lock), set once
	// at load.
	book *ledger.Book
	// meteredTo is how far every node is metered but those behind it.
	meteredTo time.Time
	// behind are the nodes metered less far than meteredTo, with how far:
	// those hosting an attempt whose times the meter did not know yet at
	// the last pass (meterHoldsLocked). Stored with meteredTo in each
	// pass's batch (store.MeterBehindKey), so a new leader goes on from
	// the same place for every node.
	behind map[string]time.Time
	// ended are attempts that ended after the least of meteredTo and
	// behind: they are metered up to their end, then dropped. Rebuilt
	// from the attempts at load, so a new leader meters the ends its
	// predecessor had not.
	ended []*model.Attempt
	// budgets is what the budget passes decided (package budgets; its
	// own lock), set once at load.
	budgets *budgets.State
	metrics map[string][]store.MetricReport // by job id
	buf     []model.LedgerEntry
}

func (c *Controller) loadCost(d *store.Dump) {
	cs := &c.cost
	cs.book = ledger.New(d.Ledger)
	cs.budgets = budgets.New(d.BudgetFired)
	cs.metrics = map[string][]store.MetricReport{}
	for _, m := range d.Metrics {
		cs.metrics[m.JobID] = append(cs.metrics[m.JobID], m)
	}
	if v, ok := d.Meta[store.MeteredToKey]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			cs.meteredTo = t
		}
	}
	if cs.meteredTo.IsZero() {
		return
	}
	v := d.Meta[store.MeterBehindKey]
	behind, unread, err := parseBehind(v)
	if err != nil {
		// Skipping what cannot be read would leave those nodes' held
		// seconds unmetered; their rows say how far each was metered.
		behind = recoverBehind(behind, unread, d, cs.meteredTo)
		c.cfg.Log.Error("stored meter marks are unreadable: taking the nodes' marks from their last ledger rows",
			"key", store.MeterBehindKey, "value", v, "err", err, "recovered", formatBehind(behind))
	}
	cs.behind = behind
	low := cs.lowWater()
	for _, a := range d.Attempts {
		if a.StartedAt != nil && a.EndedAt != nil && a.EndedAt.After(low) {
			cs.ended = append(cs.ended, a)
		}
	}
}

func (c *Controller) costLoop(ctx context.Context) {
	every := c.cfg.Cost.MeterInterval
	if every < 0 {
		return
	}
	if every == 0 {
		every = time.Minute
	}
	tick := c.cfg.Clock.NewTicker(every)
	defer tick.Stop()
	meter := true
	for {
		if meter {
			if err := c.CostPass(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Error("cost pass failed", "err", err)
			}
		}
		// The webhook outbox (budget firings and alerts) is delivered
		// after every pass, as soon as something is queued, and when
		// the earliest retry is due.
		c.outbox.DeliverDue(ctx)
		next, ok := c.outbox.Next()
		var retry <-chan time.Time
		if ok {
			retry = c.cfg.Clock.After(max(next.Sub(c.cfg.Clock.Now()), time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			meter = true
		case <-c.outbox.Kicked():
			meter = false
		case <-retry:
			meter = false
		}
	}
}

// CostPass meters from the end of the last pass to now (in passes that end
// on hour boundaries), adds the entries to the rollups, evaluates budgets
// and carries out what they decide. The entries, firings, notifications
// and stops are one batch, durable before it returns.
func (c *Controller) CostPass(ctx context.Context) error {
	now := c.cfg.Clock.Now().UTC().Truncate(time.Second)
	c.mu.Lock()
	b := &store.Batch{}
	c.meterLocked(b, now)
	stopped := c.budgetsLocked(b, now)
	c.stuckLocked(b, now)
	if b.Empty() {
		c.mu.Unlock()
		return nil
	}
	if len(stopped) > 0 {
		c.broadcastLocked()
	}
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return fmt.Errorf("recording cost pass: %w", err)
	}
	return nil
}

// meterLocked meters into b each node from where it was metered to (the
// last pass's meteredTo, or its own mark in behind) up to now, or less
// far where meterHoldsLocked holds it: only the nodes whose attempts'
// times the server does not know yet lag, every other node and project is
// metered up to now. The first pass ever only starts the clock. A gap
// (the server was down, a leader changed) is metered from the state at
// restart, once the agents running its attempts have reported what ended
// meanwhile: nodes still registered were presumably running.
func (c *Controller) meterLocked(b *store.Batch, now time.Time) {
	cs := &c.cost
	if cs.meteredTo.IsZero() {
		cs.meteredTo = now
		b.Meta = map[string]string{store.MeteredToKey: now.Format(time.RFC3339)}
		return
	}
	if !now.After(cs.meteredTo) {
		return
	}
	holds := c.meterHoldsLocked(now)
	low := cs.lowWater()
	usage := c.nodeUsageLocked(low)
	// Each node's window: from its mark to its hold (never back), or to
	// now.
	type window struct{ from, to time.Time }
	wins := make([]window, len(usage))
	var behind map[string]time.Time
	for i := range usage {
		id := usage[i].NodeID
		w := window{from: cs.meteredTo, to: now}
		if t, ok := cs.behind[id]; ok {
			w.from = t
		}
		if h, ok := holds[id]; ok {
			w.to = maxTime(w.from, h)
		}
		if w.to.Before(now) {
			if behind == nil {
				behind = map[string]time.Time{}
			}
			behind[id] = w.to
		}
		wins[i] = w
	}
	// In passes that end on hour boundaries, node by node in id order;
	// nodes in a row with the same window (all of them, when none is
	// held) in one call, so the meter's buffers serve them all.
	entries := cs.buf[:0]
	for from := low; from.Before(now); {
		to := minTime(from.Truncate(time.Hour).Add(time.Hour), now)
		run, rf, rt := 0, time.Time{}, time.Time{}
		for i := 0; i <= len(usage); i++ {
			var f, t time.Time
			if i < len(usage) {
				f, t = maxTime(from, wins[i].from), minTime(to, wins[i].to)
			}
			if i < len(usage) && f.Equal(rf) && t.Equal(rt) {
				continue
			}
			if rf.Before(rt) {
				entries = cost.AppendMeter(entries, usage[run:i], rf, rt)
			}
			run, rf, rt = i, f, t
		}
		from = to
	}
	cs.buf = entries
	cs.book.Add(entries)
	b.Ledger = append(b.Ledger, entries...)
	was := cs.behind
	cs.meteredTo, cs.behind = now, behind
	// Attempts that ended after a node's mark are metered up to their end
	// by a later pass.
	low = cs.lowWater()
	cs.ended = slices.DeleteFunc(cs.ended, func(a *model.Attempt) bool { return !a.EndedAt.After(low) })
	b.Meta = map[string]string{store.MeteredToKey: now.Format(time.RFC3339)}
	if len(was) > 0 || len(behind) > 0 {
		b.Meta[store.MeterBehindKey] = formatBehind(behind)
	}
}

// lowWater is the earliest time some node is metered to.
func (cs *costState) lowWater() time.Time {
	low := cs.meteredTo
	for _, t := range cs.behind {
		low = minTime(low, t)
	}
	return low
}

// formatBehind encodes costState.behind for store.MeterBehindKey: a JSON
// object of node ids and RFC 3339 times, "{}" when no node is behind.
func formatBehind(behind map[string]time.Time) string {
	m := make(map[string]string, len(behind))
	for id, t := range behind {
		m[id] = t.UTC().Format(time.RFC3339)
	}
	out, _ := json.Marshal(m) // a map of strings always encodes
	return string(out)
}

// parseBehind decodes formatBehind's encoding. An entry whose time cannot
// be read is left out and its node named in unread; a value that is not a
// JSON object of strings names no node (unread is nil) and returns an
// error, as does any unread entry.
func parseBehind(v string) (behind map[string]time.Time, unread []string, err error) {
	if v == "" {
		return nil, nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, nil, fmt.Errorf("not a JSON object of node ids and RFC 3339 times: %w", err)
	}
	behind = make(map[string]time.Time, len(m))
	for id, s := range m {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			unread = append(unread, id)
			continue
		}
		behind[id] = t
	}
	if len(unread) > 0 {
		slices.Sort(unread)
		return behind, unread, fmt.Errorf("node %s: time %q is not RFC 3339", unread[0], m[unread[0]])
	}
	return behind, nil, nil
}

// recoverBehind adds to behind the marks parseBehind could not read: each
// node's in unread, or, where unread is nil (the whole value unreadable),
// every node's not known to be metered up to meteredTo. A node's mark is
// where its last ledger row ends (the meter writes every priced node a row
// for each window, idle if nothing else), when that is before meteredTo
// and the node ran past it; else the node is taken as metered to
// meteredTo. A node with no row at all is metered from when it came up.
// Metering from the last row never bills a second twice, where
// taking the mark as meteredTo would leave a held node's seconds unbilled.
func recoverBehind(behind map[string]time.Time, unread []string, d *store.Dump, meteredTo time.Time) map[string]time.Time {
	last := map[string]time.Time{}
	for _, e := range d.Ledger {
		if e.To.After(last[e.NodeID]) {
			last[e.NodeID] = e.To
		}
	}
	want := func(string) bool { return true }
	if unread != nil {
		want = func(id string) bool { return slices.Contains(unread, id) }
	}
	if behind == nil {
		behind = map[string]time.Time{}
	}
	for _, n := range d.Nodes {
		t, ok := last[n.ID]
		if !ok { // never billed: held since it came up, or never priced
			t = cmp.Or(n.LaunchedAt, n.RegisteredAt).UTC().Truncate(time.Second)
		}
		if _, read := behind[n.ID]; read || !want(n.ID) || !t.Before(meteredTo) {
			continue
		}
		if !n.StoppedAt.IsZero() && !n.StoppedAt.After(t) {
			continue // its rows end where it stopped
		}
		behind[n.ID] = t
	}
	return behind
}

// meterHoldsLocked says which nodes the meter may not meter up to now, and
// how far it may: as far as the server knows whether each attempt they
// host still runs. Every node not in the result is metered up to now.
//
// A replica's agent reports when it last saw the replica's process alive
// (agentapi.ReplicaStatus.ObservedAt), and its end, with the end's time,
// once it has seen it; the meter bills a running replica up to the last
// such observation and never further. An agent slow to notice an end (a
// loaded machine, a log shipment stuck on a leader that died) may go on
// reporting the replica running in its syncs, but not as seen alive, so
// none of the time between the end and its report is billed. An agent too
// old to say vouches instead for its replicas up to its last sync's
// arrival, or up to now while it waits in a sync (it cuts its wait short
// when a replica changes). A replica still starting on an agent that sends
// its clock (agentapi.SyncRequest.SentAt) holds the meter, as its start
// will be reported with the time it started, possibly before now: billed
// from then, not lost to a pass that metered the node idle meanwhile.
//
// A node that has not synced with this controller (it took over from a
// leader that died, or restarted) holds the meter back until its first
// sync tells what ended while no one listened, or until it has been silent
// for the heartbeat timeout (it is lost, and its attempts with it); one
// that has, for at most CostConfig.ReportLag: a replica whose agent syncs
// but has not seen it for longer (an agent wedged) is billed up to
// now - ReportLag.
//
// A hold is on an attempt, and so on every node hosting one of its
// replicas (its times are the attempt's: an end one replica's agent
// reports late is every replica's), and on nothing else: a slow node
// delays no other node's rows, project's spend or budget. now is in whole
// seconds; so are the holds.
func (c *Controller) meterHoldsLocked(now time.Time) map[string]time.Time {
	var holds map[string]time.Time
	for _, a := range c.st.LiveAttempts() {
		h := now
		for rank, r := range a.Replicas {
			if r.State.Terminal() {
				continue
			}
			if t, ok := c.heard[r.NodeID]; ok {
				if c.cfg.Cost.ReportLag <= 0 {
					continue
				}
				if seen, ok := c.observed[model.ReplicaID(a.ID, rank)]; ok {
					t = seen
				} else if _, timed := c.timed[r.NodeID]; timed && r.State != model.AttemptRunning {
					// Starting, on an agent that reports its starts with
					// its own times: one may come (in a sync that cuts a
					// long poll short) with a start before now.
					t = a.CreatedAt
				} else if c.polling[r.NodeID] > 0 {
					continue
				}
				h = minTime(h, maxTime(t, now.Add(-c.cfg.Cost.ReportLag)))
				continue
			}
			// A replica bound to a machine still booting has not started;
			// one starting on a running machine may have (its start is
			// reported with the agent's time, and billed from it).
			if n, ok := c.st.Node(r.NodeID); !ok || n.State == model.NodeLaunching {
				continue
			}
			h = minTime(h, now.Add(-c.cfg.HeartbeatTimeout))
		}
		if !h.Before(now) {
			continue
		}
		h = h.Truncate(time.Second)
		if holds == nil {
			holds = map[string]time.Time{}
		}
		for _, r := range a.Replicas {
			if t, ok := holds[r.NodeID]; !ok || h.Before(t) {
				holds[r.NodeID] = h
			}
		}
	}
	return holds
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// nodePrice returns a node's price: the custom price file first, then the
// node's catalog price, else $0 "owned-unpriced".
func (c *Controller) nodePrice(n *model.Node) (model.Money, model.PriceSource) {
	if p, ok := c.cfg.Cost.Prices.Lookup(n.ID, n.Pool, n.InstanceType); ok {
		return p.PerHour, p.Source
	}
	if n.PricePerHour > 0 {
		return model.FromDollars(n.PricePerHour), model.PriceCatalog
	}
	return 0, SourceOwnedUnpriced
}

// capacityType is a node's capacity type; machines with none (local,
// static) are owned.
func capacityType(n *model.Node) model.CapacityType {
	if n.CapacityType == "" {
		return model.Owned
	}
	return n.CapacityType
}

// billedIn reports whether node n is billed for some of the time after
// from: it has not stopped (a lost machine without an instance has), or
// it stopped after from (its last partial interval). A node that never
// launched (a failed launch) is billed nothing.
func billedIn(n *model.Node, from time.Time) bool {
	switch {
	case n.State == model.NodeTerminated && n.StoppedAt.IsZero():
		return false
	case n.StoppedAt.IsZero():
		return n.State != model.NodeLost || n.Labels[model.LabelInstance] != ""
	}
	return n.StoppedAt.After(from)
}

// nodeUsageLocked builds what the meter sees after from: every node
// its provider bills after it (DESIGN.md §2: the ledger is the bill),
// from the provider's launch time to its stop time, boot time as idle,
// with the replicas of live attempts and of attempts that ended after
// from. An attempt is charged from StartedAt (GPUs bound while a
// replica starts count as idle).
func (c *Controller) nodeUsageLocked(from time.Time) []cost.NodeUsage {
	// Every node billed after from is active or stopped after it; in id
	// order, as the ledger's entries are.
	nodes := slices.Concat(c.st.ActiveNodes(), c.st.NodesStoppedAfter(from))
	slices.SortFunc(nodes, func(a, b *model.Node) int { return strings.Compare(a.ID, b.ID) })
	idx := make(map[string]int, len(nodes))
	out := make([]cost.NodeUsage, 0, len(nodes))
	for _, n := range nodes {
		if !billedIn(n, from) {
			continue
		}
		price, src := c.nodePrice(n)
		nu := cost.NodeUsage{NodeID: n.ID, Pool: n.Pool, Provider: n.Provider, Region: n.Region, InstanceType: n.InstanceType,
			CapacityType: capacityType(n), PriceSource: src, PricePerHour: price, GPUs: float64(len(n.GPUs)), CPU: n.CPU,
			Start: n.RegisteredAt, End: n.StoppedAt, Origin: n.LaunchedAt}
		if !n.LaunchedAt.IsZero() {
			nu.Start = n.LaunchedAt
		}
		if len(n.GPUs) > 0 {
			nu.GPUModel = n.GPUs[0].Model
		}
		idx[n.ID] = len(out)
		out = append(out, nu)
	}
	add := func(a *model.Attempt) {
		if a.StartedAt == nil || a.EndedAt != nil && !a.EndedAt.After(from) {
			return
		}
		j, ok := c.st.Job(a.JobID)
		if !ok {
			return
		}
		sm, measured := c.smActiveLocked(a)
		for _, r := range a.Replicas {
			i, ok := idx[r.NodeID]
			if !ok {
				continue
			}
			gpus := float64(len(r.GPUs))
			if r.GPUShare > 0 {
				gpus = r.GPUShare
			}
			al := cost.Allocation{JobID: j.ID, AttemptID: a.ID, Attempt: a.Number, Project: j.Project, User: j.User,
				Queue: j.Spec.Queue, Tags: j.Tags, GPUs: gpus, CPU: j.Spec.Resources.CPU, Start: *a.StartedAt}
			if a.EndedAt != nil {
				al.End = *a.EndedAt
			}
			// The ledger's effective cost is cost × the SM activity
			// telemetry measured, so a job's cost and effective cost
			// cover the same attempts.
			al.SMActive, al.Telemetry = sm, measured
			out[i].Allocations = append(out[i].Allocations, al)
		}
	}
	for _, a := range c.st.LiveAttempts() {
		add(a)
	}
	for _, a := range c.cost.ended {
		add(a)
	}
	return out
}

// declaredBudgetsLocked returns the declared budgets and their webhooks
// (nil: the server's default receiver), by name.
func (c *Controller) declaredBudgetsLocked() ([]model.Budget, map[string]*manifest.WebhookRef) {
	return declaredBudgets(c.fleet.set)
}

// declaredBudgets returns the budgets set declares and their webhooks.
func declaredBudgets(set *manifest.Set) ([]model.Budget, map[string]*manifest.WebhookRef) {
	if set == nil {
		return nil, nil
	}
	out := make([]model.Budget, 0, len(set.Budgets))
	hooks := map[string]*manifest.WebhookRef{}
	for i := range set.Budgets {
		d := &set.Budgets[i]
		out = append(out, d.Budget())
		hooks[d.Metadata.Name] = d.Spec.Webhook
	}
	return out, hooks
}

func (c *Controller) historyDays() int {
	if c.cfg.Cost.ForecastHistoryDays > 0 {
		return c.cfg.Cost.ForecastHistoryDays
	}
	return 28
}

// budgetStopPrefix starts the StopWhy of attempts stopped by a budget.
const budgetStopPrefix = "stopped by budget "

func budgetStopped(a *model.Attempt) bool { return strings.HasPrefix(a.StopWhy, budgetStopPrefix) }

// budgetsLocked runs one budget pass (cost.Evaluate) into b: new firings
// are stored and queued as notifications, blocks published for admission,
// and running jobs in a stop-spot or stop-all scope asked to stop through
// the drain path (checkpoint signal and grace period). A stopped attempt
// ends preempted; its job is requeued without counting an interruption
// and waits in its queue (holdLocked) until the period rolls over, so it
// resumes from its checkpoint in the next period. Returns the jobs stopped.
func (c *Controller) budgetsLocked(b *store.Batch, now time.Time) []string {
	cs := &c.cost
	budgets, hooks := c.declaredBudgetsLocked()
	if len(budgets) == 0 {
		cs.budgets.Record(nil, nil, nil, nil, now)
		return nil
	}
	spend := make(map[string]cost.Spend, len(budgets))
	for _, bu := range budgets {
		sp, _ := cs.book.Forecast(bu, now, c.historyDays())
		spend[bu.Name] = sp
	}
	var running []cost.Running
	live := map[string]*model.Attempt{}
	for _, a := range c.st.LiveAttempts() {
		j, ok := c.st.Job(a.JobID)
		if !ok || len(a.Replicas) == 0 {
			continue
		}
		ct := model.OnDemand
		if n, ok := c.st.Node(a.Replicas[0].NodeID); ok {
			ct = capacityType(n)
		}
		live[j.ID] = a
		running = append(running, cost.Running{JobID: j.ID, Project: j.Project, Queue: j.Spec.Queue, Tags: j.Tags, CapacityType: ct})
	}
	slices.SortFunc(running, func(x, y cost.Running) int { return strings.Compare(x.JobID, y.JobID) })
	ev := cost.Evaluate(cost.EvaluateInput{Budgets: budgets, Spend: spend, Fired: cs.budgets.Fired(), Running: running, Now: now})
	fired := make([]model.FiredKey, 0, len(ev.Firings))
	for _, f := range ev.Firings {
		fired = append(fired, f.Key)
		b.BudgetFired = append(b.BudgetFired, f.Key)
		c.cfg.Log.Info("budget threshold fired", "budget", f.Budget, "threshold", f.Key.Threshold, "action", string(f.Action),
			"basis", string(f.Basis), "spent", f.Spent.USD(), "limit", f.Limit.USD())
		c.notifyLocked(b, budgetEvent(f, now))
		hook := hooks[f.Budget]
		if hook == nil && c.cfg.Cost.WebhookURL == "" {
			continue
		}
		c.queueNotificationLocked(newNotification(f, hook, now), b)
	}
	// Remember the pass: fired keys, blocks, spend, and which scopes are
	// held (every active stop threshold).
	cs.budgets.Record(budgets, fired, ev.Blocks, spend, now)
	var stopped []string
	for _, s := range ev.Stops {
		a, ok := live[s.JobID]
		if !ok || a.Stop {
			continue
		}
		a = a.Clone()
		a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, budgetStopPrefix+strings.TrimPrefix(s.Reason, "budget ")
		a.Version++
		c.st.PutAttempt(a)
		b.Attempts = append(b.Attempts, a)
		c.bumpNodesLocked(a)
		stopped = append(stopped, s.JobID)
		c.cfg.Log.Info("stopping job for budget", "job_id", s.JobID, "budget", s.Budget)
	}
	return stopped
}

// holdsLocked returns the budgets' holds on queued jobs, for the
// scheduler (state.Snapshot.Holds; budgets.State.Holds).
func (c *Controller) holdsLocked() []state.Hold { return c.cost.budgets.Holds() }

// budgetAdmitLocked applies budgets to a submission (cost.Admit): a blocked scope
// refuses it, and so does a hard budget its worst case would exceed. The
// worst case is GPUs × the dearest price per GPU-hour among ready nodes
// and offers × spec.limits.runtime. A GPU job without a runtime limit in
// a hard budget's scope is refused with a field error on
// spec.limits.runtime (it has no worst case to bound).
func (c *Controller) budgetAdmitLocked(s Submission, now time.Time, offers []model.Offer) error {
	budgets, _ := c.declaredBudgetsLocked()
	if len(budgets) == 0 {
		return nil
	}
	spec := s.Spec
	r := cost.Request{Project: s.Project, Queue: spec.Queue, Tags: s.Tags,
		GPUs: spec.Resources.GPUs * float64(max(spec.Replicas, 1)), MaxDuration: time.Duration(spec.Limits.Runtime)}
	if r.MaxDuration > 0 && r.GPUs > 0 {
		var dearest model.Money
		for _, n := range c.st.ActiveNodes() {
			if n.State != model.NodeReady || len(n.GPUs) == 0 {
				continue
			}
			p, _ := c.nodePrice(n)
			dearest = max(dearest, p/model.Money(len(n.GPUs)))
		}
		for _, o := range offers {
			if o.GPUCount > 0 {
				dearest = max(dearest, model.FromDollars(o.PricePerHour/float64(o.GPUCount)))
			}
		}
		r.PricePerGPUHour = dearest
	}
	blocks, spend := c.cost.budgets.Admission()
	ad := cost.Admit(r, cost.AdmissionState{Budgets: budgets, Blocks: blocks, Spend: spend, Now: now})
	switch {
	case ad.OK:
	case ad.Field != "":
		return fmt.Errorf("%w (%w)", model.FieldErrors{{Path: ad.Field, Message: ad.Reason}}, ErrBudget)
	default:
		return fmt.Errorf("%s: %w", ad.Reason, ErrBudget)
	}
	return nil
}

// hardBudgetOffers returns the offers when a hard budget exists (its
// worst-case check prices jobs at the dearest offer), else nil.
func (c *Controller) hardBudgetOffers(ctx context.Context) []model.Offer {
	c.mu.Lock()
	budgets, _ := c.declaredBudgetsLocked()
	c.mu.Unlock()
	for _, b := range budgets {
		if b.Hard {
			return c.cfg.Offers(ctx)
		}
	}
	return nil
}

// CatalogOffers returns the offers the controller schedules against.
func (c *Controller) CatalogOffers(ctx context.Context) []model.Offer { return c.cfg.Offers(ctx) }

// CostReport answers a report query from the rollups.
func (c *Controller) CostReport(q cost.Query) (cost.Report, error) {
	return c.cost.book.Report(q)
}

// JobCost is a job's cost across all its attempts; ok is false before its
// first metered second.
func (c *Controller) JobCost(id string) (cost.JobCost, bool) {
	return c.cost.book.Job(id)
}

// BudgetStatus is model.BudgetStatus, declared there so the API and its
// client need not import the controller.
type BudgetStatus = model.BudgetStatus

// DailyPoint is model.DailyPoint, declared there so the API and its client
// need not import the controller.
type DailyPoint = model.DailyPoint

// Budgets returns every declared budget's status; days > 0 adds a daily
// forecast of up to that many days from today, ending at the period's end:
// a budget's forecast is of its period, never of the next.
func (c *Controller) Budgets(days int) []BudgetStatus {
	now := c.cfg.Clock.Now().UTC()
	budgets, hooks := declaredBudgets(c.revs.Current().Set)
	out := make([]BudgetStatus, 0, len(budgets))
	for _, bu := range budgets {
		start, end := bu.Period.Bounds(now)
		sp, f := c.cost.book.Forecast(bu, now, c.historyDays())
		st := BudgetStatus{Budget: bu, Webhook: webhookName(hooks[bu.Name]), PeriodStart: start, PeriodEnd: end, Actual: sp.Actual, Forecast: sp.Forecast,
			Ratio: sp.Actual.Dollars() / bu.Amount.Dollars(), Method: f.Method, Note: f.Note}
		st.Fired, st.Blocked = c.cost.budgets.Status(bu, start, now)
		if days > 0 {
			today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
			for _, p := range f.Points {
				if p.Day >= days || !today.AddDate(0, 0, p.Day).Before(end) {
					break
				}
				st.Daily = append(st.Daily, DailyPoint{Day: today.AddDate(0, 0, p.Day), Mean: model.FromDollars(p.Mean),
					Lower: model.FromDollars(p.Lower), Upper: model.FromDollars(p.Upper)})
			}
		}
		out = append(out, st)
	}
	return out
}

// Budget returns one budget's status.
func (c *Controller) Budget(name string, days int) (BudgetStatus, error) {
	for _, b := range c.Budgets(days) {
		if b.Budget.Name == name {
			return b, nil
		}
	}
	return BudgetStatus{}, fmt.Errorf("budget %s: %w", name, ErrNotFound)
}

// HourlyGPUUsage returns, per GPU model, GPUs in use per hour over the
// days before now (oldest first) and the part that tolerates interruption
// (spot capacity), for purchase recommendations.
func (c *Controller) HourlyGPUUsage(days int) (usage, spot map[string][]float64) {
	now := c.cfg.Clock.Now().UTC().Truncate(time.Hour)
	from := now.Add(-time.Duration(days) * 24 * time.Hour)
	rep, err := c.cost.book.Report(cost.Query{From: from, To: now, Step: time.Hour, GroupBy: []string{"kind", "gpuModel", "capacityType"}, Idle: cost.IdleShown})
	usage, spot = map[string][]float64{}, map[string][]float64{}
	if err != nil {
		return usage, spot
	}
	hours := days * 24
	for _, r := range rep.Rows {
		if r.Group[0] != string(model.LedgerAllocation) || r.Group[1] == "" {
			continue
		}
		m := r.Group[1]
		if usage[m] == nil {
			usage[m], spot[m] = make([]float64, hours), make([]float64, hours)
		}
		h := int(r.Start.Sub(from) / time.Hour)
		if h < 0 || h >= hours {
			continue
		}
		usage[m][h] += r.GPUHours
		if r.Group[2] == string(model.Spot) {
			spot[m][h] += r.GPUHours
		}
	}
	return usage, spot
}

// CostTotals returns money metered so far by project, queue and capacity
// type, the idle total, and each budget's spend ratio this period, for
// metrics.
func (c *Controller) CostTotals() (byKey map[[3]string]model.Money, idle model.Money, ratios map[string]float64) {
	totals, idle := c.cost.book.Totals()
	byKey = make(map[[3]string]model.Money, len(totals))
	for k, v := range totals {
		byKey[[3]string{k.Project, k.Queue, k.Capacity}] = v
	}
	budgets, _ := declaredBudgets(c.revs.Current().Set)
	ratios = map[string]float64{}
	for _, b := range budgets {
		ratios[b.Name] = c.cost.budgets.Spend(b.Name).Actual.Dollars() / b.Amount.Dollars()
	}
	return byKey, idle, ratios
}

// firingBody is what a webhook receives for a budget firing.
type firingBody struct {
	ID          string            `json:"id"`
	Kind        string            `json:"kind"` // NotifyBudget
	Budget      string            `json:"budget"`
	Scope       model.BudgetScope `json:"scope"`
	Threshold   int               `json:"threshold"`
	Percent     float64           `json:"percent"`
	Action      string            `json:"action"`
	Basis       string            `json:"basis"`
	Spent       model.Money       `json:"spent"`
	Limit       model.Money       `json:"limit"`
	Amount      model.Money       `json:"amount"`
	PeriodStart time.Time         `json:"periodStart"`
	PeriodEnd   time.Time         `json:"periodEnd"`
	FiredAt     time.Time         `json:"firedAt"`
}

// newNotification makes the outbox record of a firing, for hook (nil: the
// server's default receiver). Its id is derived from the firing's key, so
// it is the same however often it is retried.
func newNotification(f cost.Firing, hook *manifest.WebhookRef, now time.Time) *store.Notification {
	id := fmt.Sprintf("%s/%d/%s", f.Budget, f.Key.Threshold, f.Key.PeriodStart.UTC().Format(time.DateOnly))
	body, err := json.Marshal(firingBody{ID: id, Kind: NotifyBudget, Budget: f.Budget, Scope: f.Scope, Threshold: f.Key.Threshold, Percent: f.Percent,
		Action: string(f.Action), Basis: string(f.Basis), Spent: f.Spent, Limit: f.Limit, Amount: f.Amount,
		PeriodStart: f.Key.PeriodStart, PeriodEnd: f.PeriodEnd, FiredAt: now})
	if err != nil {
		panic(fmt.Sprintf("encoding a firing: %v", err)) // plain values only
	}
	n := &store.Notification{ID: id, Kind: NotifyBudget, Body: body, NextAt: now, Created: now}
	switch {
	case hook.Legacy():
		n.URL = hook.LegacyURL
	case hook != nil:
		n.URLRef, n.KeyRef = string(hook.SecretRef), string(hook.SigningKeyRef)
	}
	return n
}

// legacyWebhookName is what the API shows of a budget's inline webhook URL
// (manifest.WebhookRef.LegacyURL) in place of a secret's name.
const legacyWebhookName = "(inline URL: move it into a secret)"

// webhookName is what the API shows of a budget's webhook: the secret
// naming its URL, never the URL.
func webhookName(h *manifest.WebhookRef) string {
	switch {
	case h == nil:
		return ""
	case h.Legacy():
		return legacyWebhookName
	}
	return string(h.SecretRef)
}

func cloneNote(n *store.Notification) *store.Notification {
	c := *n
	return &c
}
