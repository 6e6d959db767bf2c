package controller

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/launch"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
)

// simFleetScenario: every spot offer is interrupted 0.3 times per
// instance-hour and every launch fails with probability 0.5.
const simFleetScenario = `
offers:
  - match: {capacityType: spot}
    interruptionRate: 0.3
  - match: {}
    fail: {probability: 0.5, error: insufficient-capacity}
`

// TestSimFleet500 is issue 4's done-when on a fake clock: 500 jobs (1–8
// GPUs, some 2×8 and 2×4 gangs) over three simulated clouds with a 30% per
// hour spot interruption rate and half of all launches failing. A virtual
// runner plays the agent of every ready node: a replica "runs" for its
// job's remaining work, checkpoints every interval through
// Controller.Checkpoint, and exits with the stop reason when told to stop.
// Every job completes; each preempted job resumes with its checkpoint dir
// and the next attempt number; lost work never exceeds one checkpoint
// interval; no instance is leaked; the node-time of the launch and
// terminate events is the provider's bill to the second. -short runs 100
// jobs.
func TestSimFleet500(t *testing.T) {
	jobs := 500
	if testing.Short() {
		jobs = 100
	}
	res := runSimFleet(t, jobs, 42)
	if res.preempted == 0 {
		t.Errorf("no job was preempted: the scenario did not bite")
	}
	if res.launchFails == 0 {
		t.Errorf("no launch failed: the scenario did not bite")
	}
}

// TestSimFleetDeterministic runs a small fleet twice with one seed: the
// controller's events (ids, times, messages) and the provider's must be
// the same, so a failure of the big run can be replayed.
func TestSimFleetDeterministic(t *testing.T) {
	a := runSimFleet(t, 40, 7)
	b := runSimFleet(t, 40, 7)
	if a.digest != b.digest || a.events != b.events {
		t.Errorf("two runs with seed 7 differ: %d events (digest %s), then %d events (digest %s)", a.events, a.digest, b.events, b.digest)
	}
	if a.preempted == 0 || a.launchFails == 0 {
		t.Errorf("the small run saw %d preempted jobs and %d launch failures: make it bite", a.preempted, a.launchFails)
	}
}

// simFleetResult is what runSimFleet saw.
type simFleetResult struct {
	// digest is a SHA-256 over every controller event and sim event in
	// order; events counts the controller's.
	digest      string
	events      int
	preempted   int
	launchFails int
}

// runSimFleet runs jobs jobs on three simulated clouds to the end and checks
// the done-when invariants; everything random derives from seed.
func runSimFleet(t *testing.T, jobs int, seed int64) simFleetResult {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	scn, err := sim.ParseScenario([]byte(simFleetScenario))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := sim.New(sim.Config{Clock: clk, Seed: seed, Providers: []string{"aws", "gcp", "azure"}, Scenario: scn, Offers: busiestRegions(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	ms := newMemStore()
	c, err := New(ctx, Config{Store: ms, Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1, Seed: seed,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		// Called under the controller's mutex.
		NewID:  func(prefix string) string { ids[prefix]++; return fmt.Sprintf("%s%06d", prefix, ids[prefix]) },
		Offers: func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o },
		// Launches one at a time: in a deterministic order.
		Scale: ScaleConfig{Providers: []provider.Provider{sp}, Drivers: simRegistry(t, sp), LaunchTimeout: 15 * time.Minute,
			Launches: launch.Options{PerProvider: 1, PerRegion: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Max: 48,
		CapacityTypes: []model.CapacityType{model.OnDemand, model.Spot}, IdleTimeout: model.Duration(5 * time.Minute)}}}
	c.mu.Unlock()

	const interval = 10 * time.Minute
	rng := rand.New(rand.NewPCG(uint64(seed), 4))
	work := map[string]time.Duration{}
	var order []string
	for range jobs {
		spec := model.JobSpec{Replicas: 1, Spot: model.SpotAllowed}
		switch k := rng.IntN(20); {
		case k == 0:
			spec.Replicas, spec.Resources.GPUs = 2, 8 // a 16-GPU gang
		case k == 1:
			spec.Replicas, spec.Resources.GPUs = 2, 4
		default:
			spec.Resources.GPUs = float64([]int{1, 2, 4, 8}[rng.IntN(4)])
		}
		spec.Run.Command = []string{"train"}
		rt := time.Duration(10+rng.IntN(80)) * time.Minute
		spec.Estimate.Runtime = model.Duration(rt)
		spec.Checkpoint.Interval = model.Duration(interval)
		spec.Retries.Preemptions = 1000
		spec.Default()
		j, _, err := c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		work[j.ID] = rt
		order = append(order, j.ID)
	}

	r := &virtualRunner{t: t, c: c, interval: interval, work: work, order: order, jobs: map[string]*vjob{}, replicas: map[string]*vreplica{}}
	const step = time.Minute
	deadline := t0.Add(14 * 24 * time.Hour)
	for !r.allDone() {
		if clk.Now().After(deadline) {
			t.Fatalf("not every job ended within 14 simulated days: %s", r.summary())
		}
		c.scaleWait(ctx)
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
		r.syncAll(ctx, clk.Now())
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(step)
	}

	// 1. Every job completed; preempted ones resumed with their checkpoint
	// dir and the next attempt number (checked as they started).
	var res simFleetResult
	for _, id := range order {
		j, _ := c.Job(id)
		if j.State != model.JobSucceeded {
			t.Errorf("job %s ended %s (%s)", id, j.State, j.Reason)
		}
		if v := r.jobs[id]; v != nil && j.Attempts != v.lastAttempt {
			t.Errorf("job %s counts %d attempts, runner saw %d", id, j.Attempts, v.lastAttempt)
		}
		if j.Preemptions > 0 {
			res.preempted++
		}
	}
	// 2. No instance leaked: once the controller has had the scale cycle
	// that observes the providers' last stops, their inventory is the
	// store's.
	c.scaleWait(ctx)
	r.checkInventory(ctx, sp)
	// Idle nodes go after their idle timeout, and the inventory follows.
	for range 20 {
		clk.Advance(step)
		c.scaleWait(ctx)
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r.checkInventory(ctx, sp)
	if list, _ := sp.List(ctx); len(list) != 0 {
		t.Errorf("%d instances still run after every job ended and the idle timeout passed", len(list))
	}
	// 3. The node-time of the events is the bill: each instance's launch
	// event carries the provider's launch time and its terminate (or leak)
	// event the provider's stop time, so per instance the whole seconds
	// between them are the seconds billed, exactly.
	launched, ended := map[string]time.Time{}, map[string]time.Time{}
	h := sha256.New()
	events := c.Events(EventFilter{Limit: 1 << 20})
	for _, e := range events {
		digestEvent(h, e)
		in := e.Fields["instance"]
		switch e.Kind {
		case model.EventLaunch:
			launched[in] = eventTime(t, e, FieldLaunchedAt)
		case model.EventTerminate, model.EventLeak:
			if _, ok := ended[in]; ok {
				t.Errorf("instance %s ends twice: %s", in, e.Message)
			}
			if in != "" {
				ended[in] = eventTime(t, e, FieldStoppedAt)
			}
		case model.EventLaunchFail:
			res.launchFails++
		}
	}
	for _, e := range sp.Events() {
		fmt.Fprintf(h, "sim %s %s %s %s %s\n", e.At.Format(time.RFC3339Nano), e.Kind, e.InstanceID, autoscaler.OfferKey(e.Offer), e.Detail)
	}
	res.digest, res.events = fmt.Sprintf("%x", h.Sum(nil)), len(events)
	usage, err := sp.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 4. The ledger is the bill: every instance's entries (allocations and
	// idle, boot time included) add up to what the provider charged, to
	// the micro-dollar.
	ledger := map[string]int64{} // instance id → micro-dollars
	ms.mu.Lock()
	for _, e := range ms.ledger {
		if n, ok := c.st.Node(e.NodeID); ok {
			ledger[n.Labels[model.LabelInstance]] += int64(e.Cost)
		}
	}
	ms.mu.Unlock()
	var billedUSD, ledgerUSD int64
	for _, u := range usage {
		if ledger[u.InstanceID] != u.MicroUSD {
			t.Errorf("instance %s (%s, %ds) billed %d µ$, its ledger entries add up to %d µ$", u.InstanceID, u.Offer.InstanceType, u.Seconds, u.MicroUSD, ledger[u.InstanceID])
		}
		billedUSD += u.MicroUSD
		ledgerUSD += ledger[u.InstanceID]
	}
	if billedUSD != ledgerUSD {
		t.Errorf("the provider billed %d µ$, the ledger adds up to %d µ$ (%.2f%% short)", billedUSD, ledgerUSD, 100*float64(billedUSD-ledgerUSD)/float64(max(billedUSD, 1)))
	}
	var billed, evented int64
	for _, u := range usage {
		start, ok1 := launched[u.InstanceID]
		end, ok2 := ended[u.InstanceID]
		if !ok1 || !ok2 {
			t.Errorf("instance %s billed %ds has no launch or terminate event", u.InstanceID, u.Seconds)
			continue
		}
		secs := int64(end.Sub(start) / time.Second)
		if secs != u.Seconds {
			t.Errorf("instance %s billed %ds, its events span %ds (%s to %s)", u.InstanceID, u.Seconds, secs, start, end)
		}
		billed += u.Seconds
		evented += secs
	}
	if billed != evented {
		t.Errorf("the provider billed %ds of node-time, the events add up to %ds", billed, evented)
	}
	t.Logf("%d jobs, %d preempted, %d attempts, %d instances, %d launch failures, %s simulated; billed %s node-time, events %s; worst lost work %s; %d events, digest %.16s",
		len(work), res.preempted, r.attempts, len(usage), res.launchFails, clk.Now().Sub(t0).Round(time.Minute),
		time.Duration(billed)*time.Second, time.Duration(evented)*time.Second, r.worstLost, len(events), res.digest)
	return res
}

// digestEvent writes everything of e but its wall-clock-free parts that
// could only differ by map order (fields are sorted).
func digestEvent(h io.Writer, e model.Event) {
	fmt.Fprintf(h, "%d %s %s %s %s %s %d %q", e.Seq, e.Time.Format(time.RFC3339Nano), e.Kind, e.Object, e.Node, e.Job, e.Attempt, e.Message)
	for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
		fmt.Fprintf(h, " %s=%q", k, e.Fields[k])
	}
	fmt.Fprintln(h)
}

// eventTime parses the time field f of e.
func eventTime(t *testing.T, e model.Event, f string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, e.Fields[f])
	if err != nil {
		t.Errorf("event %d (%s %s): field %s: %v", e.Seq, e.Kind, e.Object, f, err)
	}
	return at
}

// virtualRunner plays the agent for every ready node on the fake clock.
type virtualRunner struct {
	t         *testing.T
	c         *Controller
	interval  time.Duration
	work      map[string]time.Duration // job → runtime
	order     []string                 // jobs in submission order
	jobs      map[string]*vjob
	replicas  map[string]*vreplica // by replica id
	attempts  int
	worstLost time.Duration
}

type vjob struct {
	ckpt        time.Duration // work saved by the last checkpoint
	base        time.Duration // work saved when the latest attempt started
	progress    time.Duration // work done by the latest attempt
	lastAttempt int
	attemptID   string
	started     time.Time // the latest attempt's start
	dir         string
	done        bool
}

type vreplica struct {
	node   string
	job    string
	status agentapi.ReplicaStatus
	sent   bool
}

func (r *virtualRunner) allDone() bool {
	for _, id := range r.order {
		if j, err := r.c.Job(id); err != nil || !j.State.Terminal() {
			return false
		}
	}
	return true
}

func (r *virtualRunner) summary() string {
	n := map[model.JobState]int{}
	for id := range r.work {
		j, _ := r.c.Job(id)
		n[j.State]++
	}
	return fmt.Sprint(n)
}

// syncAll syncs every ready or draining node: it reports its replicas'
// statuses and acts on the desired set.
func (r *virtualRunner) syncAll(ctx context.Context, now time.Time) {
	t := r.t
	// Statuses in replica order: map order would make the controller
	// record a node's exits in a different order each run.
	byNode := map[string][]*vreplica{}
	for _, id := range slices.Sorted(maps.Keys(r.replicas)) {
		rp := r.replicas[id]
		byNode[rp.node] = append(byNode[rp.node], rp)
	}
	for _, n := range r.c.Nodes() {
		if n.State != model.NodeReady && n.State != model.NodeDraining {
			continue
		}
		var sts []agentapi.ReplicaStatus
		for _, rp := range byNode[n.ID] {
			sts = append(sts, rp.status)
			rp.sent = rp.status.Phase == agentapi.PhaseExited
		}
		resp, err := r.c.Sync(ctx, agentapi.SyncRequest{NodeID: n.ID, Statuses: sts})
		if err != nil {
			t.Fatalf("sync %s: %v", n.ID, err)
		}
		for _, spec := range resp.Replicas {
			rp := r.replicas[spec.ID]
			if rp == nil {
				if spec.Stop {
					continue
				}
				rp = &vreplica{node: n.ID, job: spec.JobID, status: agentapi.ReplicaStatus{ID: spec.ID, Phase: agentapi.PhaseRunning, StartedAt: now}}
				r.replicas[spec.ID] = rp
				r.start(spec, now)
			}
			if rp.status.Phase != agentapi.PhaseRunning {
				continue
			}
			v := r.jobs[spec.JobID]
			if v.attemptID != spec.AttemptID {
				continue
			}
			v.progress = v.base + now.Sub(v.started)
			for v.progress-v.ckpt >= r.interval && v.ckpt+r.interval < r.work[spec.JobID] {
				v.ckpt += r.interval
				// As a job does: the marker in its checkpoint folder says
				// how far the saved state goes, then the server is told.
				if err := os.WriteFile(filepath.Join(v.dir, "LATEST"), []byte(fmt.Sprintf("work=%d\n", v.ckpt)), 0o600); err != nil {
					t.Fatalf("checkpoint marker of %s: %v", spec.JobID, err)
				}
				if _, err := r.c.Checkpoint(ctx, spec.JobID); err != nil {
					t.Fatalf("checkpoint %s: %v", spec.JobID, err)
				}
			}
			switch {
			case spec.Stop:
				rp.status = exitedAt(spec.ID, 143, agentapi.ReasonStopped, rp.status.StartedAt, now)
			case v.progress >= r.work[spec.JobID]:
				rp.status = exitedAt(spec.ID, 0, "", rp.status.StartedAt, now)
			}
		}
		// Replicas the server no longer lists and that reported their end
		// are forgotten, as an agent does.
		listed := map[string]bool{}
		for _, spec := range resp.Replicas {
			listed[spec.ID] = true
		}
		for id, rp := range r.replicas {
			if rp.node == n.ID && rp.sent && !listed[id] {
				delete(r.replicas, id)
			}
		}
	}
	// Replicas on nodes that are gone are gone too.
	live := map[string]bool{}
	for _, n := range r.c.Nodes() {
		live[n.ID] = n.State == model.NodeReady || n.State == model.NodeDraining
	}
	for id, rp := range r.replicas {
		if !live[rp.node] {
			delete(r.replicas, id)
		}
	}
}

// start begins replica spec: the first replica of a new attempt checks it
// resumes from the last checkpoint, in the same checkpoint dir, numbered
// one after the last attempt.
func (r *virtualRunner) start(spec agentapi.ReplicaSpec, now time.Time) {
	t := r.t
	v := r.jobs[spec.JobID]
	if v == nil {
		v = &vjob{dir: spec.Env["GPUFLEET_CHECKPOINT_DIR"]}
		r.jobs[spec.JobID] = v
	}
	if v.attemptID == spec.AttemptID {
		return
	}
	if spec.Attempt != v.lastAttempt+1 {
		t.Errorf("job %s: attempt %d follows attempt %d", spec.JobID, spec.Attempt, v.lastAttempt)
	}
	if got := spec.Env["GPUFLEET_ATTEMPT"]; got != fmt.Sprint(spec.Attempt) {
		t.Errorf("job %s attempt %d: GPUFLEET_ATTEMPT=%q", spec.JobID, spec.Attempt, got)
	}
	if d := spec.Env["GPUFLEET_CHECKPOINT_DIR"]; d == "" || d != v.dir {
		t.Errorf("job %s attempt %d: checkpoint dir %q, first attempt had %q", spec.JobID, spec.Attempt, d, v.dir)
	}
	// The attempt resumes from what the job's checkpoint marker says, not
	// from the runner's own bookkeeping: lost work is measured from it.
	var resume time.Duration
	if data, err := os.ReadFile(filepath.Join(v.dir, "LATEST")); err == nil {
		var n int64
		if _, err := fmt.Sscanf(string(data), "work=%d", &n); err != nil {
			t.Errorf("job %s: checkpoint marker %q: %v", spec.JobID, data, err)
		}
		resume = time.Duration(n)
	} else if spec.Attempt > 1 && v.ckpt > 0 {
		t.Errorf("job %s attempt %d: its checkpoint marker is gone: %v", spec.JobID, spec.Attempt, err)
	}
	lost := v.progress - resume
	if lost > r.interval {
		t.Errorf("job %s attempt %d: lost %s of work, more than one checkpoint interval", spec.JobID, spec.Attempt, lost)
	}
	r.worstLost = max(r.worstLost, lost)
	v.ckpt = resume
	v.progress, v.base, v.lastAttempt, v.attemptID, v.started = resume, resume, spec.Attempt, spec.AttemptID, now
	r.attempts++
}

// checkInventory compares the provider's instances with the store's live
// nodes.
func (r *virtualRunner) checkInventory(ctx context.Context, sp *sim.Provider) {
	t := r.t
	list, err := sp.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inv := map[string]bool{}
	for _, in := range list {
		inv[in.ID] = true
	}
	st := map[string]bool{}
	for _, n := range r.c.Nodes() {
		if id := n.Labels[model.LabelInstance]; id != "" && n.State != model.NodeTerminated {
			st[id] = true
		}
	}
	for id := range inv {
		if !st[id] {
			t.Errorf("instance %s runs but no live node owns it (leak)", id)
		}
	}
	for id := range st {
		if !inv[id] {
			t.Errorf("node of instance %s is live but the provider does not list it", id)
		}
	}
}

func exitedAt(id string, code int, reason string, start, end time.Time) agentapi.ReplicaStatus {
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseExited, ExitCode: &code, Reason: reason, StartedAt: start, EndedAt: &end}
}

// busiestRegions keeps the catalog offers of each cloud's k regions with the
// most offers: three clouds still, but few enough offers that a pass over
// hundreds of queued jobs stays cheap under -race.
func busiestRegions(t *testing.T, k int) []model.Offer {
	t.Helper()
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	all := cat.Offers()
	count := map[[2]string]int{}
	for _, o := range all {
		count[[2]string{o.Provider, o.Region}]++
	}
	regions := map[string][][2]string{}
	for pr := range count {
		regions[pr[0]] = append(regions[pr[0]], pr)
	}
	keep := map[[2]string]bool{}
	for _, rs := range regions {
		slices.SortFunc(rs, func(a, b [2]string) int {
			if d := count[b] - count[a]; d != 0 {
				return d
			}
			return strings.Compare(a[1], b[1])
		})
		for _, pr := range rs[:min(k, len(rs))] {
			keep[pr] = true
		}
	}
	var out []model.Offer
	for _, o := range all {
		if keep[[2]string{o.Provider, o.Region}] {
			out = append(out, o)
		}
	}
	return out
}
