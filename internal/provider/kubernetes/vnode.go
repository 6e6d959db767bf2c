package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// roundGap is the least time between the starts of two rounds, so a burst
// of pod changes is reported in a few syncs rather than one each; a node
// with many replicas waits longer (roundGapPerReplica each), since each
// sync costs the server in proportion to them.
const (
	roundGap           = 25 * time.Millisecond
	roundGapPerReplica = 20 * time.Microsecond
)

// vnode is the agent of one virtual node. Everything but changed, regTimer
// and the touched sets belongs to its loop's goroutine.
type vnode struct {
	ctx     context.Context // Run's; for the node's log shippers
	r       *runner
	id      string
	log     *slog.Logger
	changed chan struct{} // rung, never blocking, when there is news

	// What may have changed since the loop last looked: replicas, Jobs
	// (all their replicas, their want, their logs), or everything (a
	// node went). A round looks at these only, so its cost follows the
	// changes, not the thousands of replicas a node may run.
	touchMu         sync.Mutex
	touchedReplicas map[string]bool
	touchedJobs     map[string]bool
	touchedAll      bool
	// settle are the Jobs to check for cleanup: a replica was forgotten,
	// a log finished or a delete went through.
	settle map[string]bool

	tracked map[string]*replica  // by replica id
	jobs    map[string]*jobState // by Job name
	target  *nodeTarget          // where its pods go; nil until its group is seen

	reg      *agentapi.Registration // as last registered
	regGroup *group                 // the group reg was made from
	regAt    time.Time
	regTimer atomic.Bool // a wake-up for a delayed registration is pending
	// pendingDue is when each replica whose pod cannot be scheduled runs
	// out of time; pendingTimer says one wake-up for the earliest is set.
	pendingDue   map[string]time.Time
	pendingTimer atomic.Bool
	heartbeat    time.Duration
	generation   uint64
	delivered    map[string]agentapi.ReplicaStatus
}

// replica is one replica the virtual node runs, or ran.
type replica struct {
	id    string
	job   string // its Job's name; "" when it never had one
	grace *int64

	status   agentapi.ReplicaStatus
	seenJob  bool
	seenPod  bool
	podName  string
	podNode  string
	lastExit *int
	// stopping: its Job is being deleted because the server asked.
	stopping bool
	// refused, when set, is why it was never run; refusedPhase how that
	// ends it.
	refused      string
	refusedPhase agentapi.Phase
	// forgotten: the server recorded its end.
	forgotten bool
	// pendingSince is when its pod was first seen unschedulable (zero:
	// it is not).
	pendingSince time.Time
	logs         *shipper
	// ckpt follows the checkpoints its pod uploads (nil: it syncs none).
	ckpt *ckptWatch
}

// jobState is one Job of the virtual node and what is wanted of it.
type jobState struct {
	name     string
	attempt  string
	replicas []*replica
	want     *want // the create or delete last asked for; nil for an adopted Job
	resolved bool  // the workers are done with want
	deleting bool
	deleted  bool // the delete was accepted (or the Job was gone)
	// adoptedSecret: the adopted Job's Secret was asked for (a run that
	// ended between creating the Job and its Secret left none).
	adoptedSecret bool
}

func newVnode(r *runner, id string) *vnode {
	return &vnode{
		r: r, id: id, log: r.log.With("node_id", id),
		changed:         make(chan struct{}, 1),
		tracked:         map[string]*replica{},
		jobs:            map[string]*jobState{},
		touchedReplicas: map[string]bool{},
		touchedJobs:     map[string]bool{},
		settle:          map[string]bool{},
		delivered:       map[string]agentapi.ReplicaStatus{},
		pendingDue:      map[string]time.Time{},
	}
}

// touch notes that replica, or Job job, may have changed, and wakes the
// loop. Either may be "". Safe for concurrent use.
func (v *vnode) touch(replica, job string) {
	v.touchMu.Lock()
	if replica != "" {
		v.touchedReplicas[replica] = true
	}
	if job != "" {
		v.touchedJobs[job] = true
	}
	v.touchMu.Unlock()
	ring(v.changed)
}

// touchAll notes that any replica may have changed. Safe for concurrent use.
func (v *vnode) touchAll() {
	v.touchMu.Lock()
	v.touchedAll = true
	v.touchMu.Unlock()
	ring(v.changed)
}

// touched takes what was touched since the last call.
func (v *vnode) touched() (replicas, jobs map[string]bool, all bool) {
	v.touchMu.Lock()
	defer v.touchMu.Unlock()
	replicas, jobs, all = v.touchedReplicas, v.touchedJobs, v.touchedAll
	v.touchedReplicas, v.touchedJobs, v.touchedAll = map[string]bool{}, map[string]bool{}, false
	return replicas, jobs, all
}

// run registers the node, adopts its Jobs, and syncs until ctx ends or the
// node has neither nodes nor work left.
func (v *vnode) run(ctx context.Context) {
	v.ctx = ctx
	v.adopt()
	retry := v.r.c.backoff(v.r.c.opts.MaxRetryBackoff)
	var last time.Time
	for ctx.Err() == nil {
		gap := max(roundGap, time.Duration(len(v.tracked))*roundGapPerReplica)
		if wait := gap - v.r.c.opts.Clock.Now().Sub(last); wait > 0 && !v.r.c.sleep(ctx, wait) {
			return
		}
		last = v.r.c.opts.Clock.Now()
		// Changes before this point are in the request below.
		select {
		case <-v.changed:
		default:
		}
		if v.reg == nil {
			if err := v.register(ctx); err != nil {
				if ctx.Err() == nil {
					v.log.Warn("registering virtual node", "err", err)
					v.r.c.sleep(ctx, retry.Step())
				}
				continue
			}
		} else {
			v.maybeRegister(ctx)
		}
		v.refresh()
		v.cleanup()
		if len(v.tracked) == 0 && len(v.jobs) == 0 && v.r.group(v.id) == nil && v.r.retire(v) {
			v.log.Info("virtual node has no nodes and no work left; it stops syncing")
			return
		}
		req, endedIDs := v.request()
		resp, woken, err := v.sync(ctx, req)
		switch {
		case err == nil:
			retry = v.r.c.backoff(v.r.c.opts.MaxRetryBackoff)
			for _, s := range req.Statuses {
				v.delivered[s.ID] = s
			}
			v.apply(resp, endedIDs)
		case ctx.Err() != nil:
			return
		case woken:
			// News arrived during the long poll: report it now.
		case errors.Is(err, agentapi.ErrUnknownNode):
			v.log.Warn("the server does not know this virtual node; registering again", "err", err)
			// Everything is reported afresh.
			v.reg, v.generation = nil, 0
			clear(v.delivered)
		default:
			d := retry.Step()
			v.log.Warn("syncing with the server; Jobs keep running", "err", err, "retry_in", d)
			v.r.c.sleep(ctx, d)
		}
	}
}

// registration is the node's facts now: its group's, or no GPUs when the
// group has no usable nodes left.
func (v *vnode) registration() (agentapi.Registration, *group) {
	pool := v.r.c.opts.Pool
	reg := agentapi.Registration{NodeID: v.id, Name: v.id, Provider: pool, Pool: pool, GPUSource: gpuSource,
		AgentVersion: agentapi.Version, Region: DefaultRegion, Labels: map[string]string{LabelPool: pool}, GPUs: []model.GPU{},
		// Every replica is a pod: a container, apart from the control plane.
		Runtimes: []string{model.RuntimeContainer}}
	if v.reg != nil {
		// Keep where it was, without its GPUs.
		reg.Name, reg.Region, reg.Zone, reg.InstanceType, reg.CapacityType = v.reg.Name, v.reg.Region, v.reg.Zone, v.reg.InstanceType, v.reg.CapacityType
	}
	grp := v.r.group(v.id)
	if grp == nil {
		return reg, nil
	}
	v.target = targetOf(grp)
	n := grp.node(pool)
	reg.Name, reg.GPUs, reg.CPU, reg.Memory, reg.Labels = n.Name, n.GPUs, n.CPU, n.Memory, n.Labels
	reg.Region, reg.Zone, reg.InstanceType, reg.CapacityType, reg.PricePerHour = n.Region, n.Zone, n.InstanceType, n.CapacityType, n.PricePerHour
	return reg, grp
}

// register announces the node now.
func (v *vnode) register(ctx context.Context) error {
	reg, grp := v.registration()
	resp, err := v.r.cp.Register(ctx, reg)
	if err == nil && resp.NodeID != v.id {
		err = fmt.Errorf("the server registered it as %q", resp.NodeID)
	}
	if err != nil {
		return err
	}
	v.reg, v.regAt, v.heartbeat = &reg, v.r.c.opts.Clock.Now(), resp.HeartbeatInterval.D()
	v.regGroup = grp
	v.log.Info("registered virtual node", "gpus", len(reg.GPUs), "gpu_model", reg.Labels["gpufleet.dev/gpu-model"],
		"capacity_type", reg.CapacityType, "price_per_hour", reg.PricePerHour)
	return nil
}

// maybeRegister registers again when the node's facts changed, at most
// once per RegisterInterval; a failure is retried at the next round.
func (v *vnode) maybeRegister(ctx context.Context) {
	if v.r.group(v.id) == v.regGroup {
		return // groups are rebuilt only when nodes change
	}
	reg, grp := v.registration()
	if reflect.DeepEqual(&reg, v.reg) {
		v.regGroup = grp
		return
	}
	wait := v.r.c.opts.RegisterInterval - v.r.c.opts.Clock.Now().Sub(v.regAt)
	if wait > 0 {
		if v.regTimer.CompareAndSwap(false, true) {
			go func() {
				defer v.regTimer.Store(false)
				if v.r.c.sleep(ctx, wait) {
					ring(v.changed)
				}
			}()
		}
		return
	}
	if err := v.register(ctx); err != nil && ctx.Err() == nil {
		v.log.Warn("registering virtual node again", "err", err)
	}
}

// adopt tracks the Jobs a previous run left for this node.
func (v *vnode) adopt() {
	for _, obj := range v.r.c.jobsOf(v.id) {
		j := obj.(*batchv1.Job)
		js := v.jobs[j.Name]
		if js != nil {
			continue
		}
		js = &jobState{name: j.Name, attempt: j.Annotations[AnnotationAttemptID]}
		if j.DeletionTimestamp != nil {
			js.deleting, js.deleted = true, true
		}
		for _, id := range replicasOfJob(j) {
			r := &replica{id: id, job: j.Name, seenJob: true, stopping: js.deleting, status: agentapi.ReplicaStatus{ID: id, Endpoint: j.Annotations[AnnotationEndpoint]}}
			js.replicas = append(js.replicas, r)
			v.tracked[id] = r
		}
		v.jobs[j.Name] = js
		v.touch("", j.Name)
		v.log.Info("adopting Job", "job", j.Name, "replicas", len(js.replicas))
	}
}

// refresh moves the statuses of the touched replicas on from the caches,
// takes in what the workers did, deletes the Jobs of lost replicas, and
// starts log shipping where a pod ran.
func (v *vnode) refresh() {
	c := v.r.c
	now := c.opts.Clock.Now()
	replicas, jobs, all := v.touched()
	if all {
		for name := range v.jobs {
			jobs[name] = true
		}
	}
	for name := range jobs {
		js := v.jobs[name]
		if js == nil {
			continue
		}
		v.settle[name] = true
		for _, r := range js.replicas {
			replicas[r.id] = true
		}
		if js.want == nil || js.resolved {
			continue
		}
		done, failed := v.r.result(js.want)
		js.resolved = done || failed != ""
		if js.want.delete {
			js.deleted = js.deleted || done
			continue
		}
		if failed != "" {
			for _, r := range js.replicas {
				if r.refused == "" {
					r.refused, r.refusedPhase = failed, agentapi.PhaseExited
				}
			}
		}
	}
	for id := range replicas {
		r := v.tracked[id]
		if r == nil || r.forgotten {
			continue
		}
		delete(v.pendingDue, id)
		if !ended(r.status.Phase) {
			js := v.jobs[r.job]
			pods := c.podsOf(r.id)
			lost := r.observe(pods, c.job(r.job), js, c.nodeGone, now)
			if !lost && !ended(r.status.Phase) {
				var due time.Time
				if due, lost = r.checkPending(pods, now, c.opts.Settings.PendingTimeout.D()); !due.IsZero() {
					v.pendingDue[id] = due
				}
			}
			if lost && js != nil {
				v.log.Info("replica lost", "replica_id", r.id, "reason", r.status.Reason)
				v.deleteJob(js, nil)
			}
		}
		switch {
		case r.logs == nil && (r.podName != "" && r.status.Phase != "" || ended(r.status.Phase)):
			r.logs = v.r.ship(v, r)
		case r.logs != nil && ended(r.status.Phase):
			r.logs.replicaEnded()
		}
	}
	v.armPending()
}

// armPending sets one wake-up, on the Options clock, for the replicas whose
// pods run out of time to be scheduled first; the informers bring every
// other change. Deadlines only grow (the timeout is fixed), so a wake-up
// already set is never late.
func (v *vnode) armPending() {
	if len(v.pendingDue) == 0 || !v.pendingTimer.CompareAndSwap(false, true) {
		return
	}
	var at time.Time
	for _, due := range v.pendingDue {
		if at.IsZero() || due.Before(at) {
			at = due
		}
	}
	var ids []string
	for id, due := range v.pendingDue {
		if !due.After(at) {
			ids = append(ids, id)
		}
	}
	ctx, wait := v.ctx, at.Sub(v.r.c.opts.Clock.Now())
	go func() {
		ok := v.r.c.sleep(ctx, wait)
		v.pendingTimer.Store(false) // before the touch: the round it wakes sets the next
		if ok {
			for _, id := range ids {
				v.touch(id, "")
			}
		}
	}()
}

// cleanup deletes the Jobs whose replicas the server has recorded, once
// their logs are shipped, and forgets Jobs that are gone. It looks at the
// Jobs something happened to; what is not done yet comes back when the
// rest happens.
func (v *vnode) cleanup() {
	for name := range v.settle {
		delete(v.settle, name)
		js := v.jobs[name]
		if js == nil {
			continue
		}
		done := true
		for _, r := range js.replicas {
			if !r.forgotten || r.logs != nil && !r.logs.finished() {
				done = false
				break
			}
		}
		if !done {
			continue
		}
		if !js.deleted {
			switch v.fate(js) {
			case fateKeep:
				v.release(js)
			case fateAwait:
				// The Job controller has yet to mark it finished; that
				// update brings it back here.
			default:
				v.deleteJob(js, nil)
			}
			continue
		}
		for _, r := range js.replicas {
			delete(v.tracked, r.id)
			delete(v.delivered, r.id)
			delete(v.pendingDue, r.id)
		}
		if js.want != nil {
			v.r.dropWant(keyJob+name, js.want)
		}
		delete(v.jobs, name)
	}
}

// request builds the next sync. It carries each status the server has not
// received yet, and every final one until the server answers without that
// replica; it waits on the server only when there is nothing new.
func (v *vnode) request() (agentapi.SyncRequest, map[string]bool) {
	var statuses []agentapi.ReplicaStatus
	endedIDs := map[string]bool{}
	anyNews := false
	for _, r := range v.tracked {
		if r.ckpt != nil {
			if t := r.ckpt.checkpointOf(); t != nil {
				r.status.Checkpoint = t
			}
			if ended(r.status.Phase) || r.forgotten {
				r.ckpt.stop()
			}
		}
		s := r.status
		if s.Phase == "" || r.forgotten {
			continue
		}
		last, sent := v.delivered[s.ID]
		news := !sent || !sameStatus(last, s)
		if ended(s.Phase) {
			endedIDs[s.ID] = true
		} else if !news {
			continue
		}
		if news {
			anyNews = true
		}
		statuses = append(statuses, s)
	}
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].ID < statuses[j].ID })
	wait := v.r.c.opts.SyncWait
	if v.heartbeat > 0 {
		wait = min(wait, v.heartbeat)
	}
	if anyNews {
		wait = 0
	}
	if statuses == nil {
		statuses = []agentapi.ReplicaStatus{}
	}
	return agentapi.SyncRequest{NodeID: v.id, Generation: v.generation, Statuses: statuses, Wait: model.Duration(wait)}, endedIDs
}

// sync calls the server, cancelling the call if there is news before it
// answers; woken reports that.
func (v *vnode) sync(ctx context.Context, req agentapi.SyncRequest) (resp agentapi.SyncResponse, woken bool, err error) {
	resp, woken, err = agentapi.SyncUnlessChanged(ctx, v.r.cp, req, v.changed)
	if woken && err == nil {
		ring(v.changed) // the answer came anyway; look again next round
	}
	return resp, woken, err
}

// apply acts on the desired set: it runs the replicas it does not track,
// stops those marked Stop or no longer listed, and forgets ended ones the
// server no longer lists in answer to a report of their end.
func (v *vnode) apply(resp agentapi.SyncResponse, reportedEnded map[string]bool) {
	v.generation = resp.Generation
	desired := make(map[string]bool, len(resp.Replicas))
	fresh := map[string][]agentapi.ReplicaSpec{}
	adopted := map[string][]agentapi.ReplicaSpec{} // by Job name
	for _, spec := range resp.Replicas {
		desired[spec.ID] = true
		r := v.tracked[spec.ID]
		if r == nil {
			fresh[spec.AttemptID] = append(fresh[spec.AttemptID], spec)
			continue
		}
		if js := v.jobs[r.job]; js != nil && js.want == nil && !js.adoptedSecret && !js.deleting && !spec.Stop {
			adopted[r.job] = append(adopted[r.job], spec)
		}
		if g := grace(spec); g != nil {
			r.grace = g
		}
		if r.ckpt == nil && spec.Checkpoint != nil && r.refused == "" && !ended(r.status.Phase) && !spec.Stop {
			// Adopted after a restart of the runner: follow its uploads.
			r.ckpt = watchCheckpoints(v.ctx, spec, v.changed, v.log)
		}
		if spec.Stop {
			v.stop(r)
		}
	}
	for _, attempt := range slices.Sorted(maps.Keys(fresh)) {
		v.admit(fresh[attempt])
	}
	for _, name := range slices.Sorted(maps.Keys(adopted)) {
		v.adoptSecret(v.jobs[name], adopted[name])
	}
	for id, r := range v.tracked {
		switch {
		case desired[id] || r.forgotten:
		case reportedEnded[id]:
			r.forgotten = true
			v.settle[r.job] = true
		case !ended(r.status.Phase):
			v.stop(r)
		}
	}
}

// sameStatus reports whether two statuses say the same, cheaply: a virtual
// node may track thousands.
func sameStatus(a, b agentapi.ReplicaStatus) bool {
	return a.ID == b.ID && a.Phase == b.Phase && a.Reason == b.Reason && a.Signal == b.Signal && a.StartedAt.Equal(b.StartedAt) &&
		sameInt(a.ExitCode, b.ExitCode) && (a.EndedAt == nil) == (b.EndedAt == nil) && (a.EndedAt == nil || a.EndedAt.Equal(*b.EndedAt)) &&
		(a.Checkpoint == nil) == (b.Checkpoint == nil) && (a.Checkpoint == nil || a.Checkpoint.Equal(*b.Checkpoint))
}

func sameInt(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func grace(spec agentapi.ReplicaSpec) *int64 {
	if g := spec.Grace.D(); g > 0 {
		return new(int64(g.Seconds()))
	}
	return nil
}

// admit takes on the replicas of one attempt that the server placed on
// this node: ranks from 0 on run as one Job (the common case: the whole
// gang here, as each virtual node is its own placement group); any other
// rank, which only a gang spread over several virtual nodes would bring,
// runs as a Job of its own.
func (v *vnode) admit(specs []agentapi.ReplicaSpec) {
	slices.SortFunc(specs, func(a, b agentapi.ReplicaSpec) int { return a.Rank - b.Rank })
	settings := v.r.c.opts.Settings
	var batches [][]agentapi.ReplicaSpec
	i := 0
	if specs[0].Rank == 0 {
		for i = 1; i < len(specs) && specs[i].Rank == specs[i-1].Rank+1; i++ {
		}
		batches = append(batches, specs[:i])
	}
	for ; i < len(specs); i++ {
		batches = append(batches, specs[i:i+1])
	}
	for _, batch := range batches {
		first := batch[0]
		name := jobName(first.AttemptID, first.Rank)
		log := v.log.With("job_id", first.JobID, "attempt_id", first.AttemptID, "job", name)
		js := v.jobs[name]
		if js == nil {
			js = &jobState{name: name, attempt: first.AttemptID}
			v.jobs[name] = js
		}
		var reason string
		phase := agentapi.PhaseExited
		switch {
		case first.Stop:
			reason = agentapi.ReasonStopped
		case refusal(first, settings) != "":
			reason = refusal(first, settings)
		case v.target == nil:
			reason, phase = fmt.Sprintf("%v: nowhere to run it", errNoTarget), agentapi.PhaseLost
		}
		for _, spec := range batch {
			r := &replica{id: spec.ID, job: name, grace: grace(spec), status: agentapi.ReplicaStatus{ID: spec.ID}}
			if port := servicePort(spec); port > 0 && worldSize(spec) <= 1 {
				r.status.Endpoint = endpoint(spec.AttemptID, settings.Namespace, port)
			}
			if reason != "" {
				r.refused, r.refusedPhase = reason, phase
			} else if spec.Checkpoint != nil && v.ctx != nil {
				r.ckpt = watchCheckpoints(v.ctx, spec, v.changed, log)
			}
			js.replicas = append(js.replicas, r)
			v.tracked[spec.ID] = r
			v.touch(spec.ID, "")
		}
		if reason != "" {
			// A Job that is never made: nothing to delete.
			js.deleting, js.deleted, js.resolved = true, true, true
			log.Info("not running replicas", "reason", reason)
			continue
		}
		plan := jobPlan{pool: v.r.c.opts.Pool, settings: settings, node: v.target, specs: batch}
		job, svc := plan.build()
		js.want = &want{node: v.id, attempt: first.AttemptID, job: job, svc: svc, secret: plan.secret(job)}
		if svc != nil && policiesOn(settings) {
			js.want.policy = policyFor(svc)
		}
		v.r.setWant(keyJob+name, js.want)
		log.Info("creating Job", "replicas", len(batch), "first_rank", first.Rank, "gpus_per_replica", len(first.GPUs))
	}
}

// adoptSecret asks the workers for the Secret of adopted Job js, owned by
// it, made from specs, its desired replicas: the run that created the Job
// may have ended before its Secret, and its pods wait for it. Once per Job;
// one that exists already is left as it is.
func (v *vnode) adoptSecret(js *jobState, specs []agentapi.ReplicaSpec) {
	js.adoptedSecret = true
	job := v.r.c.job(js.name)
	if job == nil || job.DeletionTimestamp != nil {
		return
	}
	slices.SortFunc(specs, func(a, b agentapi.ReplicaSpec) int { return a.Rank - b.Rank })
	plan := jobPlan{pool: v.r.c.opts.Pool, settings: v.r.c.opts.Settings, specs: specs}
	secret := plan.secret(job)
	if secret == nil {
		return
	}
	// No job: the worker never creates one; it makes the Secret only if
	// the Job is still there.
	js.want, js.resolved = &want{node: v.id, attempt: js.attempt, secret: secret}, false
	v.r.setWant(keyJob+js.name, js.want)
	v.log.Info("ensuring the adopted Job's Secret", "job", js.name)
}

// stop ends a replica's run: its Job (and so every replica of it) is
// deleted with the replica's grace period.
func (v *vnode) stop(r *replica) {
	if r.stopping || ended(r.status.Phase) {
		return
	}
	js := v.jobs[r.job]
	if js == nil {
		r.stopping = true
		return
	}
	v.deleteJob(js, r.grace)
}

// deleteJob asks for js to be deleted, its pods with grace (nil: their
// own), and marks its live replicas stopping.
func (v *vnode) deleteJob(js *jobState, grace *int64) {
	for _, r := range js.replicas {
		if !ended(r.status.Phase) {
			r.stopping = true
		}
	}
	if js.deleting {
		return
	}
	js.deleting, js.resolved = true, false
	js.want = &want{node: v.id, attempt: js.attempt, delete: true, grace: grace}
	v.r.setWant(keyJob+js.name, js.want)
	v.log.Info("deleting Job", "job", js.name, "grace_seconds", derefOr(grace, -1))
}

// What becomes of a Job whose replicas the server has recorded.
const (
	fateDelete = iota // gpufleet deletes it now
	fateKeep          // it stays for the TTL-after-finished controller
	fateAwait         // it will stay, once the Job controller marks it finished
)

// fate decides what becomes of js's Job: the pool keeps Jobs that ended
// on their own (all replicas exited) when KeepFinished > 0, and deletes
// the rest.
func (v *vnode) fate(js *jobState) int {
	if k := v.r.c.opts.Settings.KeepFinished; k == nil || k.D() <= 0 || js.deleting {
		return fateDelete
	}
	j := v.r.c.job(js.name)
	if j == nil || j.DeletionTimestamp != nil || j.Spec.TTLSecondsAfterFinished == nil {
		return fateDelete
	}
	if finished(j) {
		return fateKeep
	}
	for _, r := range js.replicas {
		if r.status.Phase != agentapi.PhaseExited || r.refused != "" {
			return fateDelete
		}
	}
	return fateAwait
}

// release lets go of a finished Job that stays in the cluster: only its
// Secret is deleted, and the node forgets it once that is done.
func (v *vnode) release(js *jobState) {
	js.deleting, js.resolved = true, false
	js.want = &want{node: v.id, attempt: js.attempt, delete: true, keepJob: true}
	v.r.setWant(keyJob+js.name, js.want)
}

func derefOr(p *int64, d int64) int64 {
	if p == nil {
		return d
	}
	return *p
}
